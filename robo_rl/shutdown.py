"""Clean shutdown: once a process is saving its state, a second Ctrl-C must not cut that short."""

from __future__ import annotations

import signal
import threading


def ignore_further_interrupts() -> None:
    """Ignore SIGINT from now on (main thread only; elsewhere signals are not ours to set)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
