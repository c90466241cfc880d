"""The interventions partition of a replay ring as an index kept on every write, so sampling it costs O(batch).

A ring overwrites its oldest rows first, so the rows holding an intervention step, in write order, form a
FIFO: a write pops from the front as many entries as it overwrote intervention rows, and pushes its own
intervention rows at the back. In that order the rows still from the previous lap (row ≥ cursor) come first,
each part ascending; rotating by their count gives ascending row order, the order a scan of the ring lists them
in, so position k here is the same row that `np.flatnonzero(intervention)[k]` was.
"""

from __future__ import annotations

import numpy as np


class InterventionIndex:
    """Rows of a ring of `capacity` rows whose record a human took over; `index[k]` is the k-th smallest."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue = np.empty(0, np.int64)  # a circular buffer, grown by doubling: interventions are a few percent
        self._head = 0
        self._len = 0
        self._cursor = 0  # the ring's next row to write
        self._split: int | None = None  # how many entries are from the previous lap (row ≥ cursor); None: unknown

    def __len__(self) -> int:
        return self._len

    def update(self, rows: np.ndarray, was: np.ndarray, now: np.ndarray) -> None:
        """The ring just wrote `rows` (consecutive, in write order, at most `capacity`); `was` and `now` are their
        intervention flags before and after."""
        overwritten = int(np.count_nonzero(was))  # the ring's oldest rows, so the oldest entries: the queue's front
        self._head = (self._head + overwritten) % max(len(self._queue), 1)
        self._len -= overwritten
        self._push(rows[now])
        self._cursor = int((rows[-1] + 1) % self.capacity)
        self._split = None

    def _push(self, new: np.ndarray) -> None:
        if not len(new):
            return
        need = self._len + len(new)
        if need > len(self._queue):
            grown = np.empty(min(self.capacity, max(need, 2 * len(self._queue), 64)), np.int64)
            grown[: self._len] = self._at(np.arange(self._len))
            self._queue, self._head = grown, 0
        self._queue[(self._head + self._len + np.arange(len(new))) % len(self._queue)] = new
        self._len = need

    def _at(self, positions: np.ndarray) -> np.ndarray:
        """Entries by position in write order."""
        return self._queue[(self._head + positions) % max(len(self._queue), 1)]

    def _previous_lap(self) -> int:
        """How many entries (a prefix in write order) hold a row at or past the cursor; binary search."""
        if self._split is None:
            lo, hi = 0, self._len
            while lo < hi:
                mid = (lo + hi) // 2
                if self._queue[(self._head + mid) % len(self._queue)] >= self._cursor:
                    lo = mid + 1
                else:
                    hi = mid
            self._split = lo
        return self._split

    def __getitem__(self, k: np.ndarray) -> np.ndarray:
        """The rows at ranks `k` in ascending row order."""
        return self._at((self._previous_lap() + np.asarray(k, np.int64)) % max(self._len, 1))

    def rows(self) -> np.ndarray:
        """All of them, ascending (what a scan of the ring's intervention flags returns)."""
        return self[np.arange(self._len)]
