"""A Meta-World env's steps per second with and without a camera: ours (sim/metaworld_tasks.py, robo_rl's fast-render
preset) against the benchmark's default rendering, measured in the same run.

The benchmark's default: Meta-World's env built with ``render_mode="rgb_array"`` (gymnasium's MujocoRenderer, the
model's own visual settings: shadows, reflections, multisampling), ``env.render()`` after every step, as lerobot's
Meta-World env does, at its default 480x480 and at our size. Random actions, resets counted in the time, one process.
Writes bench/results/metaworld_render.json.

    python bench/metaworld_render.py            # ~15 s per measurement
    python bench/metaworld_render.py --quick    # ~4 s per measurement
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from bench._results import write_result  # noqa: E402
from sim.metaworld_tasks import MetaWorldEnv  # noqa: E402

TASK = "pick-place-v3"
CAMERA = "corner2"


class BenchmarkRendering:
    """Meta-World's env as lerobot builds it (MT1's first task, positions unfrozen), rendering after every step."""

    def __init__(self, size: int) -> None:
        import metaworld

        mt1 = metaworld.MT1(TASK, seed=42)
        self.env = mt1.train_classes[TASK](render_mode="rgb_array", camera_name=CAMERA, width=size, height=size)
        self.env.set_task(mt1.train_tasks[0])
        self.env._freeze_rand_vec, self.env.seeded_rand_vec = False, True
        self.action_space = self.env.action_space

    def reset(self, seed: int | None = None):
        if seed is not None:
            self.env.seed(seed)
        obs, info = self.env.reset()
        return (obs, self.env.render()), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return (obs, self.env.render()), reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()


def steps_per_second(env, seconds: float, seed: int = 0) -> float:
    """Env steps per wall-clock second under uniformly random actions, resets counted in the time."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    env.step(rng.uniform(-1, 1, 4).astype(np.float32))  # outside the clock: lazy renderer creation
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short measurements")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--size", type=int, default=96, help="our camera's height and width, pixels")
    args = parser.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 15.0)
    size = args.size

    results: dict = {}
    for key, make in (
        ("ours_state_steps_per_s", lambda: MetaWorldEnv(TASK)),
        (f"ours_{CAMERA}{size}_steps_per_s", lambda: MetaWorldEnv(TASK, cameras=(CAMERA,), image_size=size)),
        (f"benchmark_{CAMERA}480_steps_per_s", lambda: BenchmarkRendering(480)),
        (f"benchmark_{CAMERA}{size}_steps_per_s", lambda: BenchmarkRendering(size)),
    ):
        env = make()
        results[key] = round(steps_per_second(env, seconds), 1)
        env.close()
        print(f"{key}: {results[key]}", flush=True)
    ours = results[f"ours_{CAMERA}{size}_steps_per_s"]
    results[f"ratio_ours_{size}_vs_benchmark_480"] = round(ours / results[f"benchmark_{CAMERA}480_steps_per_s"], 2)
    results[f"ratio_ours_vs_benchmark_both_{size}"] = round(ours / results[f"benchmark_{CAMERA}{size}_steps_per_s"], 2)
    results[f"ratio_ours_{size}_vs_ours_state"] = round(ours / results["ours_state_steps_per_s"], 2)
    results |= {"task": TASK, "camera": CAMERA, "seconds_per_measurement": seconds}
    write_result("metaworld_render", results, args.quick)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
