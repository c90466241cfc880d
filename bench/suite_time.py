"""The fast suite's wall time, and where it goes: `python bench/suite_time.py [--quick]`.

Runs the README's test command (`pytest`, the project's addopts: two workers, `-m 'not slow'`) with a small plugin
(`bench/_pytest_durations.py`) that logs each test phase's duration, then writes `bench/results/suite_time_<date>.json`:
the wall time, the pass/fail/skip counts, the test time per worker and the slowest tests and files. There is no
baseline to run beside it: the figure is compared with the result files before it (BENCHMARKS.md). `--quick` runs one
small file, to check the script on a loaded machine. Run it in a fresh clone set up as `.ci/run` does, nothing else
running, for the figure the README quotes.

This VM's speed changes from hour to hour (the same pure-CPU test files took up to twice as long in one run as in
another the same day), so each run also records two probes of the machine's speed, taken just before the suite: a
fixed pure-Python loop, and the CPU a fresh interpreter spends on `import torch` (what each process a test starts
pays first); and the suite's own CPU time (pytest and every process it reaped), with how busy it kept the cores.
Compare suite times between runs with the probes beside them.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def speed_probes() -> dict:
    """How fast this machine is now: seconds for a fixed pure-Python loop (the best of three), and the CPU seconds a
    fresh interpreter spends importing torch (the best of two)."""
    loop = []
    for _ in range(3):
        start, total = time.perf_counter(), 0
        for i in range(10**7):
            total += i
        loop.append(time.perf_counter() - start)
    code = "import os, torch; t = os.times(); print(t.user + t.system)"
    torch_cpu = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout) for _ in (1, 2)
    ]
    return {"python_loop_1e7_s": round(min(loop), 2), "import_torch_cpu_s": round(min(torch_cpu), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small test file, to check the script")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="suite_time_")) / "durations.tsv"
    env = {**os.environ, "ROBO_RL_DURATIONS_LOG": str(log)}
    command = [sys.executable, "-m", "pytest", "-p", "bench._pytest_durations"]  # importable from the root, as -m runs
    if args.quick:
        command += ["tests/test_configs_run.py"]
    probes = speed_probes()
    load_start = [round(x, 2) for x in os.getloadavg()]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # pytest and every process it started and reaped
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail)}
    per_test, per_file, per_worker = collections.Counter(), collections.Counter(), collections.Counter()
    failed: list[str] = []
    for line in log.read_text().splitlines() if log.exists() else []:
        worker, nodeid, phase, seconds, *outcome = line.split("\t")
        if outcome and outcome[0] == "failed":  # a failed phase: which test, and where (setup, call, teardown)
            failed.append(f"{nodeid} ({phase})")
        per_test[nodeid] += float(seconds)
        per_file[nodeid.split("::")[0]] += float(seconds)
        per_worker[worker] += float(seconds)
    result = {
        "pytest_command": " ".join(["pytest", *command[3:]]),
        "pytest_summary": tail,
        "exit_code": out.returncode,
        "wall_s": round(wall, 1),
        **counts,
        "load_avg_1_5_15_at_start": load_start,
        "machine_speed_before": probes,
        "cpu_s": round(cpu, 1),
        "cores_busy_share": round(cpu / (wall * (os.cpu_count() or 1)), 2),
        "test_seconds_total": round(sum(per_worker.values()), 1),
        "test_seconds_per_worker": {k: round(v, 1) for k, v in sorted(per_worker.items())},
        "failed_tests": failed,
        "slowest_tests_s": {n: round(t, 1) for n, t in per_test.most_common(25)},
        "slowest_files_s": {n: round(t, 1) for n, t in per_file.most_common(20)},
    }
    path = write_result(f"suite_time_{time.strftime('%Y_%m_%d')}", result, quick=args.quick)
    print(f"{tail}\nwall {wall:.1f} s, test time {result['test_seconds_total']} s, CPU {cpu:.0f} s; {probes}: {path}")
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
