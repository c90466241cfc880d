"""Meta-World's scripted policies (sim/metaworld_experts.py) on every MT50 task in our setup: success per task.

Our setup (sim/metaworld_tasks.py): positions drawn per episode from the task's seeded generator, the goal in the
state, at most 500 steps, an episode ending at its first success (Meta-World's evaluation). Episode i of every task
is `reset(seed=i)`. Each action gets the demonstrations' noise (`--noise-std`, robo-rl's demos.noise_std default
0.1) and, in the same run, none. A task whose expert succeeds in fewer than `--min-success` of its noisy episodes is
named under `failing` (left out of demonstrations). Writes bench/results/metaworld_experts.json.

    python bench/metaworld_experts.py             # 50 tasks x 20 episodes x 2 noise levels, ~15-25 min on 2 cores
    python bench/metaworld_experts.py --quick     # 4 tasks x 5 episodes (bench/results/quick/)
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from bench._results import write_result  # noqa: E402
from sim.metaworld_experts import MetaWorldExpert  # noqa: E402
from sim.metaworld_tasks import MetaWorldEnv, group_tasks  # noqa: E402

QUICK_TASKS = ("reach-v3", "button-press-v3", "pick-place-v3", "disassemble-v3")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return round(float(centre - half), 3), round(float(centre + half), 3)


def expert_success(env: MetaWorldEnv, task: str, episodes: int, noise_std: float) -> dict:
    """The expert's successes over episodes `reset(seed=0..episodes-1)` of `task`, and the steps each took."""
    expert = MetaWorldExpert(env, noise_std=noise_std, seed=0)
    wins, steps = 0, []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed, options={"task": task})
        expert.reset()
        while True:
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            if terminated or truncated:
                break
        wins += int(info["success"])
        steps.append(env._elapsed_steps)
    return {
        "success_rate": round(wins / episodes, 3),
        "successes": wins,
        "episodes": episodes,
        "interval_95": wilson(wins, episodes),
        "mean_steps": round(float(np.mean(steps)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{len(QUICK_TASKS)} tasks x 5 episodes")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: MT50)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per task (default 20; --quick 5)")
    parser.add_argument("--noise-std", type=float, default=0.1, help="the demonstrations' action noise")
    parser.add_argument("--min-success", type=float, default=0.8, help="below this (noisy) the expert fails")
    args = parser.parse_args()
    tasks = args.tasks.split(",") if args.tasks else QUICK_TASKS if args.quick else group_tasks()["mt50"]
    episodes = args.episodes or (5 if args.quick else 20)

    env = MetaWorldEnv(",".join(tasks))
    start, per_task = time.perf_counter(), {}
    for task in env.tasks:
        t0 = time.perf_counter()
        noisy = expert_success(env, task, episodes, args.noise_std)
        clean = expert_success(env, task, episodes, 0.0)
        per_task[task] = {"noisy": noisy, "noiseless": clean, "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{task:32s} noisy {noisy['success_rate']:.2f}  noiseless {clean['success_rate']:.2f}", flush=True)
    env.close()

    failing = [t for t, r in per_task.items() if r["noisy"]["success_rate"] < args.min_success]
    difficulty = {
        g: [t for t in names if t in per_task] for g, names in group_tasks().items() if g not in ("mt10", "mt50")
    }
    result = {
        "setup": "randomised positions per episode (seeded), goal in the state, <= 500 steps, ends at first success",
        "episodes_per_task": episodes,
        "noise_std": args.noise_std,
        "min_success": args.min_success,
        "mean_success_noisy": round(float(np.mean([r["noisy"]["success_rate"] for r in per_task.values()])), 3),
        "mean_success_noiseless": round(float(np.mean([r["noiseless"]["success_rate"] for r in per_task.values()])), 3),
        "mean_success_noisy_by_group": {
            g: round(float(np.mean([per_task[t]["noisy"]["success_rate"] for t in ts])), 3)
            for g, ts in difficulty.items()
            if ts
        },
        "failing": failing,
        "tasks": per_task,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    path = write_result("metaworld_experts", result, args.quick)
    print(json.dumps({k: v for k, v in result.items() if k != "tasks"}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
