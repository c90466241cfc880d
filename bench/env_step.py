"""Env stepping speed: our PickCubeEnv against gym-hil's Panda pick-cube env, measured in the same run.

Single process, random actions, resets included in the time. Prints one line per measurement and, as its last
line, one JSON object: ours (state only), gym-hil (state only), their ratio, and ours with one 128x128 camera.

    python bench/env_step.py            # ~15 s per measurement
    python bench/env_step.py --quick    # ~4 s per measurement, under a minute in all
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # gym-hil builds an OpenGL renderer even for state-only envs

import gymnasium as gym  # noqa: E402

from bench._results import write_result  # noqa: E402
from sim.pick_cube import PickCubeEnv  # noqa: E402

GYM_HIL_ENV_ID = "gym_hil/PandaPickCubeBase-v0"  # state-only observations by default (image_obs=False)


def steps_per_second(env: gym.Env, seconds: float, seed: int = 0) -> float:
    """Env steps per wall-clock second under uniformly random actions, resets counted in the time."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    env.step(env.action_space.sample())  # first step outside the clock: lazy renderer creation and the like
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def make_gym_hil() -> gym.Env:
    import gym_hil  # noqa: F401  (registers the gym_hil/* ids)

    return gym.make(GYM_HIL_ENV_ID)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short measurements (whole run under a minute)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement")
    args = parser.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 15.0)

    results = {}
    for key, make in (
        ("ours_state_steps_per_s", PickCubeEnv),
        ("gym_hil_state_steps_per_s", make_gym_hil),
        ("ours_front128_steps_per_s", lambda: PickCubeEnv(cameras=["front"], image_size=128)),
    ):
        env = make()
        results[key] = round(steps_per_second(env, seconds), 1)
        env.close()
        print(f"{key}: {results[key]}", flush=True)
    ratio = results["ours_state_steps_per_s"] / results["gym_hil_state_steps_per_s"]
    results["ratio_ours_vs_gym_hil"] = round(ratio, 2)
    results["gym_hil_env_id"] = GYM_HIL_ENV_ID
    results["seconds_per_measurement"] = seconds
    write_result("env_step", results, args.quick)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
