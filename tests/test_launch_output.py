"""What `robo-rl launch` leaves and prints: one log per process, whole final status lines on a terminal of any width
(0 columns included), and the run's evaluation at the end (issue 47)."""

from __future__ import annotations

import io
import json
import os
import signal
import sys

from launch.launcher import LearnerProgress, LocalProcess, Slot, StatusBoard
from launch.layout import Process
from robo_rl import cli
from robo_rl.commands.common import STARTED_BY_ENV
from robo_rl.transport.link import free_ports

LONG_LOG_LINE = "success 9/10 = 0.90 (Wilson 95% CI [0.60, 0.98]), mean length 41.2 " + "x" * 60 + " END"


class Terminal(io.StringIO):
    """A terminal's stdout, as the board sees one."""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1


class Ended:
    """A process handle that has exited with code 0 after writing `line` last."""

    pid = 4242

    def __init__(self, line: str) -> None:
        self.line = line

    def poll(self) -> int:
        return 0

    def last_line(self) -> str:
        return self.line


def test_a_learner_started_by_launch_writes_one_log_the_launchers(tmp_path, monkeypatch):
    seen = tmp_path / "logs" / "child.log"
    child = LocalProcess([sys.executable, "-c", f"import os; print(os.environ['{STARTED_BY_ENV}'])"], seen)
    assert child.popen.wait(timeout=30) == 0 and seen.read_text().strip() == "launch"

    import zmq

    p = free_ports(3)
    ctx = zmq.Context()
    busy = ctx.socket(zmq.PULL)
    busy.bind(f"tcp://127.0.0.1:{p[0]}")  # the learner stops at its first bind, after choosing its logs
    args = ["env=point_reach", "experiment=rlpd", "logger.progress=false"]
    ports = [f"transport.data_port={p[0]}", f"transport.weights_port={p[1]}", f"transport.ctrl_port={p[2]}"]
    try:
        monkeypatch.setenv(STARTED_BY_ENV, "launch")
        assert cli.main(["learner", *args, *ports, f"run_dir={tmp_path / 'launched'}"]) == 2
        monkeypatch.delenv(STARTED_BY_ENV)
        assert cli.main(["learner", *args, *ports, f"run_dir={tmp_path / 'alone'}"]) == 2
    finally:
        ctx.destroy(linger=0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert not (tmp_path / "launched" / "learner.log").exists(), "the launcher's logs/learner.log is its only log"
    assert (tmp_path / "alone" / "learner.log").exists(), "a learner started by hand keeps its own"


def test_the_final_status_lines_are_whole_and_a_terminal_of_0_columns_gets_a_sane_width(tmp_path, monkeypatch):
    slot = Slot(Process("learner", "learner"), [], tmp_path / "learner.log", handle=Ended(LONG_LOG_LINE))
    slot.code, slot.state, slot.pids = 0, "exited", [Ended.pid]
    for columns in (60, 0):
        monkeypatch.setattr(os, "get_terminal_size", lambda fd=1, c=columns: os.terminal_size((c, 24)))
        out = Terminal()
        board = StatusBoard([slot], LearnerProgress(None, None), out)
        (line,) = board.lines(0.0)
        assert 20 <= len(line) < max(columns, 80), "while running, a line fits the terminal (or a sane width)"
        board.finish()
        assert out.getvalue().rstrip().endswith(" | " + LONG_LOG_LINE), "the final lines are not cut"


def test_launch_ends_with_the_runs_evaluation(tmp_path):
    from launch.launcher.command import evaluation_summary
    from robo_rl.eval.episodes import write_report

    result = {"episodes": 10, "successes": 9, "success_rate": 0.9, "success_ci95": [0.6, 0.98]}
    write_report(tmp_path / "eval", {**result, "mean_length": 41.2, "mean_return": 0.9}, "ckpt.pt", 300, None)
    assert evaluation_summary(tmp_path) == (
        f"evaluation: success 9/10 = 0.90 (Wilson 95% CI [0.60, 0.98]), report {tmp_path / 'eval' / 'report.md'}"
    )
    assert evaluation_summary(tmp_path / "missing") is None
    assert json.loads((tmp_path / "eval" / "report.json").read_text())["env_steps"] == 300
