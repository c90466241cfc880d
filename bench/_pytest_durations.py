"""A pytest plugin for `bench/suite_time.py`: each test phase's duration, one line per phase, appended to the file
that `ROBO_RL_DURATIONS_LOG` names (worker, test id, phase, seconds, outcome). Under xdist only the workers write (the
controller receives every report again), so each phase is counted once."""

from __future__ import annotations

import os

_writes = True


def pytest_configure(config) -> None:
    global _writes
    is_worker = hasattr(config, "workerinput")
    is_controller = not is_worker and bool(config.getoption("numprocesses", None))
    _writes = not is_controller


def pytest_runtest_logreport(report) -> None:
    path = os.environ.get("ROBO_RL_DURATIONS_LOG")
    if not path or not _writes:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(path, "a") as f:
        f.write(f"{worker}\t{report.nodeid}\t{report.when}\t{report.duration:.3f}\t{report.outcome}\n")
