"""A real-time control loop's timing: each period (from one step's start to the next), where its time went, and the
policy calls' times, as the figures the heartbeat and the page show.

A period's parts, in order (`LATE_PARTS`): the policy call (`decide`), stepping the envs and the bookkeeping after
(`env`), waking later than planned from the sleep to the next tick (`woke_late`), the loop's top before the next step
(`loop_top`), and the control thread's own CPU time within `env` (`env_cpu`: a long env step that used little CPU
waited, for the CPU, the GIL or the robot). A late period then says what made it late: its policy, its env or its
machine. Steps that end an episode start no period (a reset move is no control period)."""

from __future__ import annotations

import collections
import time

import numpy as np

LATE_PARTS = ("decide", "env", "woke_late", "loop_top", "env_cpu")
WINDOW = 2000  # periods and policy calls kept: the figures cover the newest this many


class LoopClock:
    """The control loop marks each step's start (`start`), its decision (`decided`) and its end after the sleep
    (`slept`); `no_period` after a step whose time is no control period (an episode's reset). Read from another
    thread by `stats` (a copy that races an append skips the timing figures for that call, never fails)."""

    def __init__(self, control_hz: float | None, window: int = WINDOW) -> None:
        self.period_s = 1.0 / control_hz if control_hz else None  # None: no rate, so no jitter to measure
        self.rows: collections.deque = collections.deque(maxlen=window)  # per period: its length, then its parts, s
        self.decide_ms: collections.deque = collections.deque(maxlen=window)  # each policy call (base + residual)
        self._start: float | None = None
        self._step: tuple | None = None  # the last step's (decide, env, planned wake, woke, env cpu)
        self._decided = (0.0, 0.0)

    def start(self) -> None:
        """A step begins now: the period since the last step's start ends here."""
        now = time.monotonic()
        if self._start is not None:
            if self._step is None:  # no step of ours before it (a hold): parts unknown
                parts = (np.nan,) * len(LATE_PARTS)
            else:
                decide, work, planned, woke, work_cpu = self._step
                parts = (decide, work, max(0.0, woke - planned), now - woke, work_cpu)
            self.rows.append((now - self._start, *parts))
        self._start, self._step = now, None

    @property
    def periods(self) -> list[float]:
        """The kept periods' lengths, s."""
        return [row[0] for row in list(self.rows)]

    def decided(self) -> None:
        self._decided = (time.monotonic(), time.thread_time())

    def worked(self) -> tuple[float, float]:
        """(monotonic, thread CPU time) at the end of the step's work, before its sleep."""
        return time.monotonic(), time.thread_time()

    def slept(self, worked: tuple[float, float], planned: float) -> None:
        """The step's sleep ended; `planned` was when it meant to wake (the next tick; `worked` if it did not sleep)."""
        if self._start is not None:
            (decided, decided_cpu), (done, done_cpu) = self._decided, worked
            self._step = (decided - self._start, done - decided, planned, time.monotonic(), done_cpu - decided_cpu)

    def no_period(self) -> None:
        self._start = None

    def stats(self) -> dict:
        """Period p50 and jitter (|period − 1/control_hz|) p50/p99, where the late periods went, and the policy
        calls' p50/p99, in ms."""
        out: dict = {}
        rows = snapshot(self.rows)
        if len(rows) >= 2 and self.period_s is not None:
            t = rows[:, 0]
            jitter = np.abs(t - self.period_s) * 1e3
            out.update(
                period_ms_p50=float(np.median(t) * 1e3),
                jitter_ms_p50=float(np.percentile(jitter, 50)),
                jitter_ms_p99=float(np.percentile(jitter, 99)),
            )
            out.update(late_period_parts(jitter, rows[:, 1:]))
        decide = snapshot(self.decide_ms)
        if len(decide):
            p50, p99 = np.percentile(decide, [50, 99])
            out.update(inference_ms_p50=float(p50), inference_ms_p99=float(p99))
        return out


def late_period_parts(jitter_ms: np.ndarray, parts_s: np.ndarray) -> dict:
    """Where the time of the late periods went: each part's mean, ms, over the slowest 1% of the periods (by jitter;
    `late_<part>_ms`), beside its median over all of them (`<part>_ms_p50`). A loop late because its work grew shows
    it in `decide` or `env`; one the machine woke late (another process had the CPU), in `woke_late`. One row of
    `parts_s` per period of `jitter_ms`."""
    parts_ms = parts_s * 1e3
    known = ~np.isnan(parts_ms).any(axis=1)  # a period after a hold has no parts
    if known.sum() < 2:
        return {}
    jitter_ms, parts_ms = jitter_ms[known], parts_ms[known]
    late = np.argsort(jitter_ms, kind="stable")[-max(1, int(np.ceil(0.01 * len(jitter_ms)))) :]  # ties: no more
    out = {}
    for k, name in enumerate(LATE_PARTS):
        out[f"late_{name}_ms"] = float(parts_ms[late, k].mean())
        out[f"{name}_ms_p50"] = float(np.median(parts_ms[:, k]))
    return out


def snapshot(values: collections.deque) -> np.ndarray:
    """A copy of a deque the control loop appends to, from another thread; empty if an append raced the copy (the
    next call has the figures)."""
    try:
        return np.array(values)
    except RuntimeError:  # deque mutated during iteration
        return np.zeros(0)
