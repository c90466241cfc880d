"""Does the pick table's pair of end walls (`env.end_walls`) stop cubes squeezed out of the fingers from calling a
person (issue 52)?

All 10 human calls of a 1.75-hour unattended pick run (bench/results/unattended_1h45_2026_11_30_midday.json) were a
cube at rest beyond the arm's top-down grasp: 6 at x 0.80-0.85 m, 4 beside the base at x 0.19-0.24 m. In episodes
like those below, half-closed fingers closing on a corner of the cube launch it at 1.1-1.4 m/s, 7 cm high, and it
comes to rest 20-30 cm away. This bench makes such episodes on purpose and counts the calls, on the table as it was
(baseline) and with the end walls (ours):

  episode   5-39 steps of the scripted pick expert with Gaussian action noise (std 0.6) and, on 30% of the steps, a
            gripper command drawn uniform in [-1, 1] (the closes on a corner a policy learning to grasp makes), the
            cube's mass and friction drawn per episode as the unattended bench draws them
  reset     the scripted reset (`env.reset_mode=scripted`) and its check; a failed check is a call (the simulated
            person answers it)

It reports, per table: calls per 100 episodes with a Wilson 95% interval, where each called cube lay, and the
launches (the cube faster than 1 m/s in an episode). Episodes run in `--workers` processes, one seed each.

    python bench/pick_squeeze.py            # 600 episodes per table
    python bench/pick_squeeze.py --quick    # 100 per table

The last line printed is one JSON object; the file goes to bench/results/pick_squeeze.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

NOISE_STD = 0.6
RANDOM_GRIPPER_SHARE = 0.3
EPISODE_STEPS = (5, 40)  # drawn in [5, 40)
LAUNCH_M_S = 1.0
RANDOMIZE = {"object_mass_scale": [0.5, 2.0], "friction_scale": [0.7, 1.3]}  # as bench/unattended.py's pick


def episodes(walls: bool, n: int, seed: int) -> dict:
    """`n` squeezing episodes, each followed by the scripted reset, on one table; what the resets' checks found."""
    import mujoco
    import numpy as np

    from robo_rl.envs.resets import ResetWrapper
    from sim.experts import PickCubeExpert
    from sim.pick_cube import PickCubeEnv

    task = PickCubeEnv(reset_mode="scripted", reset_person="sim", randomize=RANDOMIZE, end_walls=walls)
    env = ResetWrapper(task, task.reset_settings)
    expert = PickCubeExpert(task, noise_std=NOISE_STD, seed=seed)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    calls, launches = [], 0
    for _ in range(n):
        expert.reset()
        fastest = 0.0
        for _ in range(int(rng.integers(*EPISODE_STEPS))):
            action = expert.act(obs)
            if rng.random() < RANDOM_GRIPPER_SHARE:
                action[3] = rng.uniform(-1, 1)
            obs, reward, terminated, truncated, info = env.step(action)
            fastest = max(fastest, task._speed(mujoco.mjtObj.mjOBJ_BODY, task._cube_body))
            if terminated or truncated:
                break
        launches += fastest > LAUNCH_M_S
        where = task.data.xpos[task._cube_body][:2].round(3).tolist()
        obs, info = env.reset()
        if info["reset"]["problem"] is not None:
            calls.append({"cube_xy_m": where, "problem": info["reset"]["problem"]})
    env.close()
    return {"episodes": n, "calls": calls, "launches": launches}


def main() -> None:
    from robo_rl.eval.wilson import wilson_interval

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=None, help="per table (600; --quick: 100)")
    parser.add_argument("--workers", type=int, default=2, help="processes; each runs one seed's share")
    parser.add_argument("--seeds", type=int, default=4, help="the episodes are split over this many seeds")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    total = args.episodes or (100 if args.quick else 600)
    seeds = max(1, min(args.seeds, total))
    jobs = [(walls, total // seeds + (s < total % seeds), s + 1) for walls in (False, True) for s in range(seeds)]
    print(f"{total} squeezing episodes per table, {seeds} seeds, {args.workers} workers ...", flush=True)
    with ProcessPoolExecutor(args.workers) as pool:
        parts = list(pool.map(episodes, *zip(*jobs, strict=True)))
    tables = {}
    for name, walls in (("baseline_open_table", False), ("ours_end_walls", True)):
        mine = [p for (w, _, _), p in zip(jobs, parts, strict=True) if w == walls]
        n, calls = sum(p["episodes"] for p in mine), [c for p in mine for c in p["calls"]]
        low, high = wilson_interval(len(calls), n)
        tables[name] = {
            "episodes": n,
            "calls": len(calls),
            "calls_per_100": round(100 * len(calls) / n, 2),
            "calls_per_100_wilson_95": [round(100 * low, 2), round(100 * high, 2)],
            "launches_over_1_m_s": sum(p["launches"] for p in mine),
            "called_cubes": calls,
        }
        print(f"{name:20s} {len(calls)} calls in {n} episodes ({tables[name]['calls_per_100']} per 100)", flush=True)
    base, ours = tables["baseline_open_table"]["calls"], tables["ours_end_walls"]["calls"]
    result = {
        "episodes_per_table": total,
        "seeds": seeds,
        "noise_std": NOISE_STD,
        "random_gripper_share": RANDOM_GRIPPER_SHARE,
        "tables": tables,
        "calls_ratio_baseline_to_ours": None if ours == 0 else round(base / ours, 2),
    }
    print(f"calls: baseline {base}, ours {ours}" + ("" if ours == 0 else f" (ratio {base / ours:.1f}x)"), flush=True)
    path = write_result("pick_squeeze", result, quick=args.quick, measured_code=["sim", "bench/pick_squeeze.py"])
    print(f"wrote {path}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
