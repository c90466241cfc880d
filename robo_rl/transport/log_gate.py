"""A per-reason limit on log lines: a peer chooses how often its messages are dropped, not how fast the log grows.

Each reason may log `burst` lines at once and one more every `period_s / burst` seconds after (a token bucket); the
lines held back are counted, and the next line of that reason says how many there were. Every drop is still counted
in the metrics (`bad_messages`, `internal_errors`): only the log is thinned.
"""

from __future__ import annotations

import time

MAX_REASONS = 256  # distinct reasons remembered; reasons are the link's own words, so far fewer occur


class LogGate:
    def __init__(self, burst: int = 5, period_s: float = 60.0, clock=time.monotonic) -> None:
        self.burst, self.period_s, self.clock = burst, period_s, clock
        self._tokens: dict[str, tuple[float, float, int]] = {}  # reason → (tokens, when counted, lines held back)

    def admit(self, reason: str) -> int | None:
        """None when this line of `reason` is held back; otherwise how many of its lines were held back before it."""
        now = self.clock()
        if reason not in self._tokens and len(self._tokens) >= MAX_REASONS:
            reason = "(other reasons)"
        tokens, then, held = self._tokens.get(reason, (float(self.burst), now, 0))
        tokens = min(float(self.burst), tokens + (now - then) * self.burst / self.period_s)
        if tokens < 1.0:
            self._tokens[reason] = (tokens, now, held + 1)
            return None
        self._tokens[reason] = (tokens - 1.0, now, 0)
        return held


def held_note(held: int) -> str:
    """What a log line adds about the lines of its reason that were held back before it."""
    return f" ({held} more like it since the last one, not logged)" if held else ""
