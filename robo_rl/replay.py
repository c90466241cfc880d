"""Episodic replay: each frame stored once as uint8, next observations rebuilt by index.

Rows are step records (see `schema.py`). A row `j` with `step > 0` ends a transition whose start is the
row written just before it for the same episode (`prev[j]`); that link survives interleaved actors.
Nothing bootstraps across an episode boundary: a transition's discount is 0 after `terminated`,
and the row after a `truncated` step is a new episode's reset record, never a next observation.
"""

from __future__ import annotations

import numpy as np

from robo_rl.schema import check_step_batch


class ReplayBuffer:
    """A fixed-capacity ring of step records from any number of sources (actors, demo files)."""

    def __init__(self, capacity: int, fields: dict[str, tuple]) -> None:
        self.capacity = capacity
        self.fields = fields
        self.data = {name: np.zeros((capacity, *shape), dtype) for name, (shape, dtype) in fields.items()}
        self.prev = np.full(capacity, -1, np.int64)  # row of the previous record of the same episode
        self.row_uid = np.full(capacity, -1, np.int64)  # which write filled the row, to detect overwrite
        self.prev_uid = np.full(capacity, -1, np.int64)
        self.cursor = 0
        self.size = 0
        self.writes = 0
        self._last_row: dict[tuple, int] = {}  # (source, episode_id) → row of its latest record

    def __len__(self) -> int:
        return self.size

    def add(self, batch: dict[str, np.ndarray], source: str = "") -> int:
        """Append a validated step batch (records in episode order per episode); returns records added."""
        n = check_step_batch(batch, self.fields)
        for i in range(n):
            j = self.cursor
            for name, arr in self.data.items():
                arr[j] = batch[name][i]
            key = (source, int(batch["episode_id"][i]))
            step = int(batch["step"][i])
            last = self._last_row.get(key, -1) if step > 0 else -1
            self.prev[j] = last
            self.prev_uid[j] = self.row_uid[last] if last >= 0 else -1
            self.row_uid[j] = self.writes
            self.writes += 1
            if batch["terminated"][i] or batch["truncated"][i]:
                self._last_row.pop(key, None)
            else:
                self._last_row[key] = j
            self.cursor = (j + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
        return n

    @property
    def num_transitions(self) -> int:
        return int(self._valid(np.arange(self.size)).sum())

    def _valid(self, rows: np.ndarray) -> np.ndarray:
        prev = self.prev[rows]
        return (prev >= 0) & (self.row_uid[np.maximum(prev, 0)] == self.prev_uid[rows])

    def sample_rows(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Rows that end a valid transition, uniformly (rejection sampling over the filled rows)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        out = np.empty(0, np.int64)
        for _ in range(100):
            rows = rng.integers(0, self.size, size=2 * batch_size)
            out = np.concatenate([out, rows[self._valid(rows)]])
            if len(out) >= batch_size:
                return out[:batch_size]
        raise ValueError("replay buffer holds no complete transition yet")

    def sample(self, batch_size: int, rng: np.random.Generator, gamma: float) -> dict:
        """A batch of transitions as numpy arrays: obs, action, reward, discount, next_obs."""
        return self.gather(self.sample_rows(batch_size, rng), gamma)

    def gather(self, rows: np.ndarray, gamma: float) -> dict:
        prev = self.prev[rows]
        cams = [name[len("image/") :] for name in self.data if name.startswith("image/")]

        def obs_at(r: np.ndarray) -> dict:
            return {"state": self.data["state"][r], "images": {c: self.data[f"image/{c}"][r] for c in cams}}

        return {
            "obs": obs_at(prev),
            "action": self.data["action_executed"][rows],
            "reward": self.data["reward"][rows],
            "discount": (gamma * (1.0 - self.data["terminated"][rows])).astype(np.float32),
            "next_obs": obs_at(rows),
            "intervention": self.data["intervention"][rows],
        }


def concat_batches(batches: list[dict]) -> dict:
    """Concatenate transition batches (nested dicts of arrays) along the first axis."""
    first = batches[0]
    if isinstance(first, dict):
        return {k: concat_batches([b[k] for b in batches]) for k in first}
    return np.concatenate(batches, axis=0)
