"""How long a fresh robo_rl process takes to import what it runs, with the installed modules' bytecode (ours:
`[tool.uv] compile-bytecode` in pyproject.toml compiles it at install) and without (the baseline: what every process
paid before, where Python runs with PYTHONDONTWRITEBYTECODE as on this CI machine and in many Docker images).

The baseline points PYTHONPYCACHEPREFIX at an empty folder with PYTHONDONTWRITEBYTECODE=1: Python finds no bytecode
and writes none, so it compiles each imported module from source, every process. Both run interleaved, in fresh
processes, with the same interpreter.

    uv run python bench/startup.py           # 3 runs per module and mode (median)
    uv run python bench/startup.py --quick   # 1 run each

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

from bench._results import write_result

MODULES = ("torch", "robo_rl.learner", "robo_rl.actor")


def import_s(module: str, env: dict) -> float:
    """Wall time of a fresh interpreter that imports `module` and exits."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per module and mode")
    args = parser.parse_args()
    runs = 1 if args.quick else 3
    ours_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    results = {}
    with tempfile.TemporaryDirectory() as empty:
        baseline_env = {**ours_env, "PYTHONPYCACHEPREFIX": empty}
        for module in MODULES:
            ours, baseline = [], []
            for _ in range(runs):  # interleaved: load changes hit both alike
                ours.append(import_s(module, ours_env))
                baseline.append(import_s(module, baseline_env))
            o, b = statistics.median(ours), statistics.median(baseline)
            results[module] = {"ours_s": round(o, 2), "baseline_s": round(b, 2), "speedup": round(b / o, 2)}
            print(f"import {module:16s} ours {o:5.2f} s   without bytecode {b:5.2f} s   {b / o:4.1f}x", flush=True)
    result = {"bench": "startup", "runs": runs, "load": round(os.getloadavg()[0], 2), "results": results}
    write_result("startup", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
