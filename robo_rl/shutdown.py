"""Clean shutdown: once a process is saving its state, a second Ctrl-C must not cut that short."""

from __future__ import annotations

import signal
import threading


def ignore_further_interrupts() -> None:
    """Ignore SIGINT from now on (main thread only; elsewhere signals are not ours to set)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt_once() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt the first time only: a second one (a terminal's Ctrl-C reaches the
    whole process group, and `train` passes its own on) arriving before the process starts saving its state is
    ignored instead of cutting the checkpoint short."""
    fired: list[int] = []

    def handler(signum, frame):
        if fired:
            return
        fired.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
