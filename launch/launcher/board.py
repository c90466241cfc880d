"""The status board: one line per process, redrawn in place on a terminal, printed on each change elsewhere."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from launch.launcher.slots import Slot

STATUS_EVERY_S = 1.0  # status lines redrawn this often on a terminal
PLAIN_STATUS_EVERY_S = 10.0  # and printed this often into a log or pipe (besides every change of state)
PLAIN_WIDTH = 160  # status line width when not on a terminal
FALLBACK_COLUMNS = 80  # a terminal reporting no columns (0: a serial console, some CI runners): the usual 80


class LearnerProgress:
    """The learner's env steps and updates, read as they are appended to its metrics.jsonl."""

    def __init__(self, path: Path | None, total: int | None) -> None:
        self.path, self.total, self.offset, self.text = path, total, 0, ""

    def read(self) -> str:
        if self.path is None or not self.path.exists():
            return self.text
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        data = data[: data.rfind(b"\n") + 1]  # whole lines only
        self.offset += len(data)
        for line in data.splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("kind") == "learner":
                total = f"/{self.total}" if self.total else ""
                self.text = f"env steps {m.get('env_steps')}{total}, updates {m.get('updates')}"
        return self.text


class StatusBoard:
    """One line per process: name, pid, state, restarts, (the learner's progress,) the last line of its log.
    Redrawn in place about once a second on a terminal; elsewhere printed on every change of state."""

    def __init__(self, slots: list[Slot], progress: LearnerProgress, out=None) -> None:
        self.slots, self.progress, self.out = slots, progress, out or sys.stdout
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.drawn, self.last_draw, self.last_key = 0, 0.0, None
        self.start = time.monotonic()

    def lines(self, now: float, whole: bool = False) -> list[str]:
        """The status lines, each cut to the terminal's width unless `whole` (the last draw: never redrawn)."""
        width = os.get_terminal_size(self.out.fileno()).columns if self.tty else PLAIN_WIDTH
        width = width or FALLBACK_COLUMNS
        name_w = max(len(s.proc.name) for s in self.slots)
        state_w = max(len(s.label(now)) for s in self.slots)
        out = []
        for s in self.slots:
            pid = s.pids[-1] if s.pids else "-"
            extra = self.progress.read() if s.proc.role == "learner" else ""
            log = s.handle.last_line() if s.handle is not None else ""
            text = f"{s.proc.name:<{name_w}}  pid {pid!s:>7}  {s.label(now):<{state_w}}  restarts {s.restarts}"
            text += f"  {extra}" if extra else ""
            line = text + (f" | {log}" if log else "")
            out.append(line if whole else line[: width - 1])
        return out

    def draw(self, force: bool = False, whole: bool = False) -> None:
        now = time.monotonic()
        key = [(s.state, s.pids[-1:], s.restarts) for s in self.slots]
        due = now - self.last_draw >= (STATUS_EVERY_S if self.tty else PLAIN_STATUS_EVERY_S)
        if not (force or due or key != self.last_key):
            return
        lines = self.lines(now, whole)
        if self.tty:
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            self.out.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        else:
            self.out.write(f"[launch {now - self.start:.0f} s]\n" + "".join(f"  {line}\n" for line in lines))
        self.out.flush()
        self.drawn, self.last_draw, self.last_key = len(lines), now, key

    def finish(self) -> None:
        """The final states, whole on a terminal (a log already has every change): the last lines say how it ended."""
        self.draw(force=self.tty, whole=True)

    def say(self, text: str) -> None:
        """A message above the status lines (they are redrawn below it)."""
        if self.tty and self.drawn:
            self.out.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0
        self.out.write(text + "\n")
        self.out.flush()
        self.last_key = None
