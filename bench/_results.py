"""Where every bench writes its result: `bench/results/<name>.json`, with the command, date, machine and commit.

A `--quick` run writes to `bench/results/quick/<name>.json` (ignored by git), so trying a bench leaves the tree clean.
`python bench/figures.py` reads the full runs' files to check the figures README.md quotes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
QUICK_RESULTS = RESULTS / "quick"


def _git(*args: str) -> str:
    run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip() if run.returncode == 0 else ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            name = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:  # not Linux
        name = ""
    return name or platform.processor() or "cpu"  # ARM's /proc/cpuinfo has no "model name"


def _gpus() -> list[str]:
    """The CUDA devices' names from nvidia-smi, without importing torch (which a bench may not load)."""
    try:
        run = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in run.stdout.splitlines() if line.strip()] if run.returncode == 0 else []


def provenance(measured_code: list[str] | None = None) -> dict:
    """Command, date, machine (CPU model, cores, load average, GPUs) and commit, for a result file.

    `measured_code` names the files whose uncommitted changes the commit should mention (default: any file)."""
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", *(measured_code or ["."])).splitlines()
    commit = _git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    return {
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "host": platform.node(),
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "gpus": _gpus() or "none",
            "python": platform.python_version(),
        },
        "commit": commit + (f" with {len(dirty)} uncommitted changed files" if dirty else ""),
    }


def write_result(
    name: str, result: dict, quick: bool = False, folder: Path | None = None, measured_code: list[str] | None = None
) -> Path:
    """Write `result` with its provenance (and the load average at the end) to `<folder>/<name>.json`; return the path.

    The folder defaults to bench/results/, or bench/results/quick/ for a --quick run."""
    out_dir = folder or (QUICK_RESULTS if quick else RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {"bench": name, "quick": quick, **provenance(measured_code), **result}
    record["load_avg_1min_at_end"] = round(os.getloadavg()[0], 2)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, default=float) + "\n")
    return path
