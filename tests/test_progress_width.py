"""The training bar on a terminal that reports 0 columns (a fresh pty, some CI runners and serial consoles) still
shows its progress, at a fixed width (issue 47)."""

import fcntl
import os
import pty
import select
import struct
import sys
import termios

from robo_rl.config import load_config
from robo_rl.progress import FALLBACK_COLUMNS, TrainingBar


def read_until_closed(master: int, timeout_s: float = 10.0) -> bytes:
    """All a pty's master side gets until its slave side is closed (Linux then says EIO), not only what has
    arrived by the first read."""
    out = b""
    while select.select([master], [], [], timeout_s)[0]:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the slave side is closed and everything was read
            break
        if not chunk:
            break
        out += chunk
    return out


def test_a_terminal_of_0_columns_gets_the_bar_at_a_fixed_width(monkeypatch):
    master, slave = pty.openpty()
    assert struct.unpack("HHHH", fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8))[:2] == (0, 0)
    terminal = os.fdopen(slave, "w")
    monkeypatch.setattr(sys, "stderr", terminal)  # where tqdm draws
    try:
        cfg = load_config(["env=point_reach", "experiment=rlpd", "train.total_env_steps=2000"])
        bar = TrainingBar(cfg, None, enabled=True)
        bar.learner_line({"env_steps": 500, "episodes": 3, "success_rate": 0.25})
        bar.finish(done=False)
        terminal.close()  # the pty passes output to its master side later (a kernel work queue): read until EOF
        shown = read_until_closed(master).decode(errors="replace")
    finally:
        if not terminal.closed:
            terminal.close()
        os.close(master)
    last = shown.replace("\r\n", "\n").split("\r")[-1].strip()
    assert "500/2000" in last and "success=0.25" in last, repr(shown)
    assert len(last) <= FALLBACK_COLUMNS
