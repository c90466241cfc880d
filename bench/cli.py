"""How long `robo-rl` takes to answer `--help`, `show`, a config error and `keys`, each in a fresh process.

The target is 2 s. The baseline is the same commands on the commit before the settings check
(robo_rl/configs/settings.py) was added, run from a temporary `git worktree` with the same interpreter.

    uv run python bench/cli.py            # 3 runs per command (median), with the baseline
    uv run python bench/cli.py --quick    # 1 run per command, no baseline
    uv run python bench/cli.py --baseline <commit>

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._results import write_result

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 2.0
HELP = [[command, "--help"] for command in ("train", "learner", "actor", "eval", "show", "keys", "data")]
# Cases that do no work on the old code either (no training starts): compared with the baseline.
COMPARABLE = [*HELP, ["show"], ["show", "algo.batch_sise=3"], ["show", "algo.batch_size=0"], ["keys"]]
# A config error that the old code did not catch (it trained with NaN losses): timed on ours only.
OURS_ONLY = [["train", "algo.batch_size=0"], ["train", "train.total_env_steps=-5"], ["show", "env=pick_cub"]]


def time_command(argv: list[str], cwd: Path, runs: int) -> tuple[float, int, str]:
    """Median wall time of `python -m robo_rl.cli <argv>` in a fresh process, its exit code and last line."""
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(cwd)}
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "robo_rl.cli", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
        times.append(time.perf_counter() - start)
    lines = (out.stdout + out.stderr).strip().splitlines()
    return statistics.median(times), out.returncode, (lines[-1] if lines else "")[:110]


def baseline_commit() -> str:
    """The commit before robo_rl/configs/settings.py was added."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "robo_rl/configs/settings.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit(
            "bench/cli.py: robo_rl/configs/settings.py is not in the git history; pass --baseline <commit>"
        )
    return added[-1] + "^"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run per command, no baseline")
    parser.add_argument(
        "--baseline", help="commit to compare with (default: the one before robo_rl/configs/settings.py)"
    )
    args = parser.parse_args()
    runs = 1 if args.quick else 3
    results = {}
    for argv in [*COMPARABLE, *OURS_ONLY]:
        seconds, code, last = time_command(argv, ROOT, runs)
        results[" ".join(argv)] = {"ours_s": round(seconds, 3), "rc": code}
        print(f"{' '.join(argv):<32} {seconds:6.2f} s  rc={code}  {last}", flush=True)

    baseline = None
    if args.baseline or not args.quick:
        baseline = args.baseline or baseline_commit()
        with tempfile.TemporaryDirectory() as tmp:
            old = Path(tmp) / "old"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), baseline], cwd=ROOT, check=True)
            try:
                print(f"baseline: {baseline} in a temporary worktree", flush=True)
                for argv in COMPARABLE:
                    seconds, code, last = time_command(argv, old, runs)
                    case = results[" ".join(argv)]
                    case.update(
                        baseline_s=round(seconds, 3), baseline_rc=code, speedup=round(seconds / case["ours_s"], 2)
                    )
                    print(f"{' '.join(argv):<32} {seconds:6.2f} s  rc={code}  {last}", flush=True)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)

    slowest = max(case["ours_s"] for case in results.values())
    load = os.getloadavg()[0]
    result = {
        "bench": "cli",
        "runs_per_command": runs,
        "target_s": TARGET_S,
        "max_ours_s": slowest,
        "all_under_target": slowest < TARGET_S,
        "baseline": baseline,
        "load_avg_1min": round(load, 2),
        "cpus": os.cpu_count(),
        "cases": results,
    }
    write_result("cli", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
