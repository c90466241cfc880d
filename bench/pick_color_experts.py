"""pick_color's scripted expert (sim/pick_color_expert.py) against a colour-blind one, in the same run: success per
colour with Wilson intervals, and the env's speed against pick_cube's one-cube env.

Episode i of each colour is `reset(seed=i, options={"target": colour})`, at the task's own time limit (50 steps), so
both experts see the same scenes. The expert reads the instruction; the colour-blind one takes the cube nearer the
gripper (the best a policy reading the state alone can do): their gap is what language is worth here. The expert
runs without noise and with the demonstrations' noise (robo-rl's demos.noise_std default, 0.1). Speed: env steps per
second under random actions, state only and with the front camera at 128x128 (fast render), pick_cube's alongside.
Writes bench/results/pick_color_experts.json.

    python bench/pick_color_experts.py            # 50 episodes per colour and expert, ~2-4 min on 2 cores
    python bench/pick_color_experts.py --quick    # 10 episodes per colour (bench/results/quick/)
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from bench._results import write_result  # noqa: E402
from bench.env_step import steps_per_second  # noqa: E402
from robo_rl.eval.wilson import wilson_interval  # noqa: E402
from sim.pick_color import COLOURS, PickColorEnv  # noqa: E402
from sim.pick_color_expert import PickColorExpert  # noqa: E402
from sim.pick_cube import PickCubeEnv  # noqa: E402

DEMO_NOISE_STD = 0.1  # robo_rl/configs/run.py's demos noise_std default


def success(env: PickColorEnv, expert: PickColorExpert, colour: str, episodes: int) -> dict:
    """The expert's successes over `reset(seed=0..episodes-1)` with `colour` named, and what the failures were."""
    wins, other, steps = 0, 0, []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed, options={"target": colour})
        expert.reset()
        while True:
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            if terminated or truncated:
                break
        wins += int(info["success"])
        other += int(info["other_lifted"])
        steps.append(env._elapsed_steps)
    low, high = wilson_interval(wins, episodes)
    return {
        "success_rate": round(wins / episodes, 3),
        "successes": wins,
        "episodes": episodes,
        "interval_95": [round(low, 3), round(high, 3)],
        "ended_holding_the_other_cube": other,
        "mean_steps": round(float(np.mean(steps)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 episodes per colour, 2 s per speed measurement")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per colour (default 50; --quick 10)")
    args = parser.parse_args()
    episodes = args.episodes or (10 if args.quick else 50)
    seconds = 2.0 if args.quick else 8.0

    env, start, experts = PickColorEnv(), time.perf_counter(), {}
    for name, expert in (
        ("expert", PickColorExpert(env)),
        ("expert_noisy", PickColorExpert(env, noise_std=DEMO_NOISE_STD, seed=0)),
        ("colour_blind", PickColorExpert(env, colour_blind=True)),
    ):
        experts[name] = {colour: success(env, expert, colour, episodes) for colour in COLOURS}
        wins = sum(r["successes"] for r in experts[name].values())
        low, high = wilson_interval(wins, episodes * len(COLOURS))
        experts[name]["both"] = {"success_rate": round(wins / (episodes * len(COLOURS)), 3)}
        experts[name]["both"]["interval_95"] = [round(low, 3), round(high, 3)]
        print(f"{name:14s} " + "  ".join(f"{c} {r['success_rate']:.2f}" for c, r in experts[name].items()), flush=True)

    speed = {}
    for key, make in (
        ("pick_color_state", PickColorEnv),
        ("pick_cube_state", PickCubeEnv),
        ("pick_color_front128", lambda: PickColorEnv(cameras=("front",), image_size=128)),
        ("pick_cube_front128", lambda: PickCubeEnv(cameras=("front",), image_size=128)),
    ):
        speed_env = make()
        speed[key] = round(steps_per_second(speed_env, seconds), 1)
        speed_env.close()
        print(f"{key:20s} {speed[key]:.1f} steps/s", flush=True)
    result = {
        "setup": "seeds 0..n-1 per colour, target fixed by reset option, 50-step limit, episode ends on success",
        "episodes_per_colour": episodes,
        "noise_std_noisy": DEMO_NOISE_STD,
        "experts": experts,
        "language_gain_points": round(
            100 * (experts["expert"]["both"]["success_rate"] - experts["colour_blind"]["both"]["success_rate"]), 1
        ),
        "steps_per_s": speed,
        "pick_color_over_pick_cube_state": round(speed["pick_color_state"] / speed["pick_cube_state"], 2),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    measured = ["sim/pick_color.py", "sim/pick_color_expert.py", "sim/pick_cube.py", "sim/experts.py"]
    path = write_result("pick_color_experts", result, args.quick, measured_code=measured)
    print(json.dumps({k: v for k, v in result.items() if k != "experts"}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
