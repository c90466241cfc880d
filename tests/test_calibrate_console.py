"""`robo-rl calibrate` at a console: a missing SDK is one line, as doctor says it, and the end of stdin ends the
calibration instead of waiting forever for an Enter that cannot come (issue 47)."""

import importlib.util
import io
import sys
import threading

import pytest

from robo_rl.cli import main


def test_calibrate_without_the_robots_sdk_says_so_in_one_line(tmp_path, capsys):
    if importlib.util.find_spec("scservo_sdk") is not None:
        pytest.skip("the SO-101's SDK is installed here: its absence cannot be shown")
    assert main(["calibrate", "env=so101", f"out={tmp_path / 'c.yaml'}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "scservo_sdk" in err and "uv sync --extra so101" in err
    assert not (tmp_path / "c.yaml").exists()


def test_calibrate_ends_when_stdin_ends(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))  # one Enter (the home pose), then the end of input
    codes = []
    run = threading.Thread(
        target=lambda: codes.append(main(["calibrate", "twin=so101", f"out={tmp_path / 'c.yaml'}"])), daemon=True
    )
    run.start()
    run.join(timeout=60)
    assert not run.is_alive(), "calibrate still waits for an Enter after stdin ended"
    assert codes == [2]
    captured = capsys.readouterr()
    assert "2/2: move the tool" in captured.out, "the Enter ended the first phase"
    assert "stdin ended before the workspace was recorded: nothing written" in captured.err
    assert not (tmp_path / "c.yaml").exists()
