"""Where evaluation reports go: a repeated `eval` keeps the earlier report and says so, and `eval compare` writes
beside the runs it compares, not into the working directory (issue 47)."""

import json
from pathlib import Path

import pytest

from robo_rl.cli import main
from tests.test_eval_suite import make_run as make_suite_run


def make_run(root: Path, name: str) -> Path:
    """A point_reach run folder with a checkpoint at 1,000 env steps (test_eval_suite's policy that stands still)."""
    return make_suite_run(root, name, "bad")


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """A working directory that is not the run's: nothing may be written into it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_a_repeated_eval_keeps_the_earlier_report_and_says_where_the_new_one_went(tmp_path, capsys, elsewhere):
    run = make_run(tmp_path, "run")
    args = ["eval", f"checkpoint={run}", "eval.episodes=2", "logger.progress=false"]
    assert main(args) == 0
    first = run / "eval" / "step_000001000"
    earlier = (first / "report.json").read_text()
    capsys.readouterr()
    assert main([*args, "eval.episodes=3"]) == 0
    second = run / "eval" / "step_000001000_2"
    out = capsys.readouterr().out
    assert f"an earlier report is in {first}: kept; this one goes to {second}" in out
    assert (first / "report.json").read_text() == earlier  # the earlier report is untouched
    assert json.loads((second / "report.json").read_text())["episodes"] == 3
    assert f"report: {second / 'report.md'}" in out
    assert list(elsewhere.iterdir()) == []


def test_eval_compare_without_out_writes_beside_the_first_run_not_into_the_working_directory(
    tmp_path, capsys, elsewhere
):
    a, b = make_run(tmp_path, "a"), make_run(tmp_path, "b")
    assert main(["eval", "compare", str(a), str(b), "suite=smoke", "eval.video=false", "logger.progress=false"]) == 0
    table = json.loads((a / "eval" / "compare_smoke.json").read_text())
    assert [p["label"] for p in table["policies"]] == ["a", "b"]
    assert f"written: {a / 'eval' / 'compare_smoke.md'}" in capsys.readouterr().out
    assert list(elsewhere.iterdir()) == [], "nothing in the working directory"


def test_an_evaluation_under_launch_draws_its_bar_for_the_launchers_status_line(tmp_path, capsys, monkeypatch):
    """`launch` turns its processes' bars off and shows each log's last line: a learner's final evaluation (15
    minutes on a robot's twin) showed "connected" and nothing else until it ended."""
    run = make_run(tmp_path, "run")
    monkeypatch.setenv("ROBO_RL_STARTED_BY", "launch")
    assert main(["eval", f"checkpoint={run}", "eval.episodes=2", "logger.progress=false"]) == 0
    assert "evaluation: 100%" in capsys.readouterr().err
    monkeypatch.delenv("ROBO_RL_STARTED_BY")
    assert main(["eval", f"checkpoint={run}", "eval.episodes=2", "logger.progress=false"]) == 0
    assert "evaluation:" not in capsys.readouterr().err  # asked for no bar, not under launch: none
