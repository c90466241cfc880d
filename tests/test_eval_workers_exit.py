"""An evaluation whose workers fail before reading their tasks (a missing base checkpoint, a bad condition) exits
after saying so: the undelivered tasks in its queue do not hold the interpreter at exit (robo_rl/eval/workers.py)."""

from __future__ import annotations

import os
import subprocess
import sys

# a worker that fails on its checkpoint before its first task; the task (a condition's config) is larger than a pipe
CHILD = """
from omegaconf import OmegaConf
from robo_rl.eval.conditions import Condition, Suite
from robo_rl.eval.workers import run_in_workers

class Bar:
    def update(self, n):
        pass

cfg = OmegaConf.create({"torch_threads": 1, "padding": "x" * 300_000})
try:
    run_in_workers(Suite("s", 2, 0, (Condition("a"),)), [cfg], {"path": "/nonexistent/step_1.pt"}, 1, Bar())
except Exception as e:
    print("said:", type(e).__name__, flush=True)
"""


def test_a_failed_worker_leaves_no_queue_holding_the_process_at_exit():
    # before the fix the child said its error and then never exited: subprocess.run's timeout failed the test
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    assert "said: CheckpointError" in out.stdout, out.stderr[-2000:]
    assert out.returncode == 0, out.stderr[-2000:]
