"""Waiting in a test for something another thread or process brings about: poll a condition until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until[T](
    condition: Callable[[], T], timeout_s: float = 10.0, what: str = "the condition", every_s: float = 0.02
) -> T:
    """`condition()`'s first truthy value, polled every `every_s` seconds; an AssertionError naming `what` if it has
    not come within `timeout_s` (the last check comes at or after the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)
