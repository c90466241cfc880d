"""One RL run from a base that `bench/metaworld.py` trained, on one task, with any overrides: the recipe search
before the protocol's hours (which method settings move a task's success at all). Appends its record to
bench/results/metaworld_probes.json.

    python bench/metaworld_probe.py --out outputs/bench_mw12 --task reach-v3 --steps 10000 --name residual_ramped \\
        experiment=residual_pick_cube policy.state_norm=base policy.scale=0.1 algo.actor_start_updates=1000 \\
        algo.bound_ramp_updates=3000

The base is seed `--seed`'s in `--out` (its base/base.json); the episode length and the demonstrations are those its
recipe names (the cached ones), the reward sparse success as bench/metaworld.py's. The run's final checkpoint is
evaluated on `--episodes` fixed seeds with deterministic actions, and the base on the same seeds, sampled.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import bench.metaworld as mw  # noqa: E402
from bench._results import RESULTS, provenance, write_result  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a bench/metaworld.py --out holding the seed's base")
    parser.add_argument("--task", required=True)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--name", required=True, help="what the overrides are called in the record")
    parser.add_argument("overrides", nargs="+", help="the method's overrides (as bench/metaworld.py's METHODS)")
    args = parser.parse_args()
    base = json.loads((Path(args.out) / f"s{args.seed}" / "base" / "base.json").read_text())
    # the env and demonstrations the base was trained with (its recipe), so the run reuses its cached demos
    recipe = base["recipe"]
    settings = argparse.Namespace(
        horizon=recipe["horizon"], demos=recipe["demos"], noise_std=recipe["noise_std"], out=args.out, steps=args.steps
    )
    settings.episodes = args.episodes
    from sim.metaworld_tasks import lerobot_metaworld_config

    instruction = lerobot_metaworld_config()["TASK_DESCRIPTIONS"][args.task]
    mw.METHODS[args.name] = args.overrides
    start = time.monotonic()
    record = {
        "task": args.task,
        "seed": args.seed,
        "name": args.name,
        "base": mw.evaluate_base(settings, args.task, base["checkpoint"])["sampled"],
        **mw.run_rl(
            settings, args.seed, args.task, instruction, base["checkpoint"], args.name, Path(args.out) / "probes"
        ),
        "wall_s": round(time.monotonic() - start),
        "provenance": provenance(),  # each run's own command, commit, date and load (the file's are the last run's)
    }
    path = RESULTS / "metaworld_probes.json"
    with open(RESULTS / ".metaworld_probes.lock", "w") as lock:  # probes run side by side: one appends at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        runs = json.loads(path.read_text())["runs"] if path.exists() else []
        write_result("metaworld_probes", {"runs": [*runs, record]}, quick=False, folder=RESULTS)
    print(json.dumps({k: record[k] for k in ("task", "name", "steps")} | {"base": record["base"]["success_rate"]}))
    print(json.dumps({"after": record["after"]["success_rate"], "ci95": record["after"]["success_ci95"]}))


if __name__ == "__main__":
    main()
