"""A process of the launch on this machine: its own process group, its output appended to its log."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from robo_rl.commands.common import STARTED_BY_ENV, own_session

LOG_TAIL_BYTES = 4096  # read from the end of a log for its last line


# logs written as they happen; a learner keeps no copy of its output beside the launcher's logs/<name>.log
CHILD_ENV = {"PYTHONUNBUFFERED": "1", STARTED_BY_ENV: "launch"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def last_line(path: Path) -> str:
    """The last non-blank line of a log (a progress bar's last redraw counts), without terminal escapes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [ANSI.sub("", s).strip() for s in re.split(r"[\r\n]", text)]
    return next((s for s in reversed(lines) if s), "")


class LocalProcess:
    """One OS process in its own process group (so a stop reaches its children), output appended to its log."""

    def __init__(self, argv: list[str], log_path: Path, cwd: str | None = None) -> None:
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**os.environ, **CHILD_ENV},
                **own_session(),
            )
        self.pid = self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def last_line(self) -> str:
        return last_line(self.log_path)
