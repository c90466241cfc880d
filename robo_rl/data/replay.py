"""Episodic replay: each frame stored once as uint8, next observations rebuilt by index.

Rows are step records (see `schema.py`). A row `j` with `step > 0` ends a transition whose start is the
row written just before it for the same episode (`prev[j]`); `next` is the reverse link. Both links
survive interleaved actors and are checked against the write that filled the row, so an overwritten
row never serves as a neighbour. Nothing bootstraps across an episode boundary: a transition's discount
is 0 after `terminated`, and n-step returns and action chunks stop at `terminated` or `truncated`.
"""

from __future__ import annotations

import numpy as np

from robo_rl.data.intervention_index import InterventionIndex
from robo_rl.data.schema import check_step_batch
from robo_rl.data.tasks import NO_TASK


class ReplayBuffer:
    """A fixed-capacity ring of step records from any number of sources (actors, demo files)."""

    def __init__(self, capacity: int, fields: dict[str, tuple]) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.fields = fields
        self.data = {name: np.zeros((capacity, *shape), dtype) for name, (shape, dtype) in fields.items()}
        self.cameras = [name[len("image/") :] for name in fields if name.startswith("image/")]
        self.row_uid = np.full(capacity, -1, np.int64)  # which write filled the row, to detect overwrite
        self.prev = np.full(capacity, -1, np.int64)  # row of the previous record of the same episode
        self.prev_uid = np.full(capacity, -1, np.int64)
        self.next = np.full(capacity, -1, np.int64)  # row of the next record of the same episode
        self.next_uid = np.full(capacity, -1, np.int64)
        self.cursor = 0
        self.size = 0
        self.writes = 0
        self._last: dict[tuple, tuple[int, int]] = {}  # (source, episode_id) → (row, uid) of its latest record
        self.interventions = InterventionIndex(capacity)  # the interventions partition, kept on every write
        # the run's task table's instructions (shared, append-only): once it names any, sampled observations carry
        # each row's instruction (`obs["instruction"]`, one per row, None where its record has none)
        self.instructions: list[str] = []

    def __len__(self) -> int:
        return self.size

    def add(self, batch: dict[str, np.ndarray], source: str | np.ndarray = "") -> int:
        """Append a validated step batch (records in episode order per episode); returns records added.
        `source` names the stream (an actor), or gives one label per record."""
        n = check_step_batch(batch, self.fields)
        for lo in range(0, n, self.capacity):  # more records than rows: the ring keeps the last ones
            hi = min(n, lo + self.capacity)
            part = {k: v[lo:hi] for k, v in batch.items()}
            src = source if isinstance(source, str) else source[lo:hi]
            self._add(part, hi - lo, src)
        return n

    def _add(self, batch: dict[str, np.ndarray], n: int, source) -> None:
        rows = (self.cursor + np.arange(n)) % self.capacity
        uids = self.writes + np.arange(n)
        was_intervention = self.data["intervention"][rows]
        for name, arr in self.data.items():
            arr[rows] = batch[name]
        self.interventions.update(rows, was_intervention, self.data["intervention"][rows])
        prev = np.full(n, -1, np.int64)
        prev_uid = np.full(n, -1, np.int64)
        steps, episodes = batch["step"].tolist(), batch["episode_id"].tolist()
        ends = (batch["terminated"] | batch["truncated"]).tolist()
        same = isinstance(source, str)
        for i in range(n):
            key = (source if same else source[i], episodes[i])
            if steps[i] > 0 and key in self._last:
                prev[i], prev_uid[i] = self._last[key]
            if ends[i]:
                self._last.pop(key, None)
            else:
                self._last[key] = (int(rows[i]), int(uids[i]))
        self.row_uid[rows] = uids
        self.prev[rows], self.prev_uid[rows] = prev, prev_uid
        self.next[rows] = -1
        linked = prev >= 0
        self.next[prev[linked]], self.next_uid[prev[linked]] = rows[linked], uids[linked]
        self.cursor = int((rows[-1] + 1) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.writes += n

    # --- links --------------------------------------------------------------------------------
    def _valid(self, rows: np.ndarray) -> np.ndarray:
        """Rows that end a transition whose start is still stored."""
        prev = self.prev[rows]
        return (prev >= 0) & (self.row_uid[np.maximum(prev, 0)] == self.prev_uid[rows])

    def _has_next(self, rows: np.ndarray) -> np.ndarray:
        nxt = self.next[rows]
        return (nxt >= 0) & (self.row_uid[np.maximum(nxt, 0)] == self.next_uid[rows])

    @property
    def num_transitions(self) -> int:
        return int(self._valid(np.arange(self.size)).sum())

    # --- sampling -----------------------------------------------------------------------------
    def sample_rows(
        self,
        batch_size: int,
        rng: np.random.Generator,
        among: np.ndarray | InterventionIndex | None = None,
        where: str | None = None,
        settled_horizon: int = 0,
    ) -> np.ndarray:
        """Rows that end a valid transition, uniformly over `among` (rows, or an index of them; default: all filled
        rows); with `where` (a policy extra's name), only rows where that extra is nonzero (e.g. the steps where a
        chunk was decided); with `settled_horizon` h > 0, only rows whose transition of up to h steps does not end
        at the newest record of an episode still going (see `pending`)."""
        pool = self.size if among is None else len(among)
        if pool == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if where is not None and f"extra/{where}" not in self.data:
            raise ValueError(f"this replay's records have no extra '{where}' to sample by")
        out = np.empty(0, np.int64)
        for _ in range(100):
            rows = rng.integers(0, pool, size=2 * batch_size)
            rows = rows if among is None else among[rows]
            keep = self._valid(rows)
            if where is not None:
                keep &= self.data[f"extra/{where}"][rows].reshape(len(rows), -1)[:, 0] != 0
            if settled_horizon:
                keep &= ~self.pending(rows, settled_horizon)
            out = np.concatenate([out, rows[keep]])
            if len(out) >= batch_size:
                return out[:batch_size]
        raise ValueError("replay buffer holds no complete transition yet" + (f" with extra '{where}'" if where else ""))

    def pending(self, rows: np.ndarray, horizon: int) -> np.ndarray:
        """Which of `rows` start a transition (of up to `horizon` steps, as `gather` follows it) that ends at a
        record with no successor that is not an episode's end: the newest step of an episode still going, whose
        next decision (the extras at next_obs) is not recorded yet. It will be once the next step arrives; an
        algorithm that reads those extras need not make them up meanwhile (residual RL's b')."""
        end = np.asarray(rows, np.int64)
        going = np.ones(len(end), bool)
        for _ in range(1, horizon):
            end, going = self._advance(end, going)
        return ~self._ended(end) & ~self._has_next(end)

    def _ended(self, rows: np.ndarray) -> np.ndarray:
        """Rows that are an episode's last step (terminated or truncated)."""
        return self._field("terminated", rows) | self._field("truncated", rows)

    def _advance(self, end: np.ndarray, going: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One step further along each transition still `going`: never past an episode's last step or the newest
        stored record of its episode (`gather` and `pending` follow a transition the same way)."""
        going = going & ~self._ended(end) & self._has_next(end)
        return np.where(going, self.next[end], end), going

    def intervention_rows(self) -> np.ndarray:
        """Rows whose transition a human took over (the interventions partition, a view of this buffer), ascending."""
        return self.interventions.rows()

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator,
        gamma: float,
        n_step: int = 1,
        chunk: int = 1,
        extras: tuple[str, ...] = (),
        among: np.ndarray | InterventionIndex | None = None,
        where: str | None = None,
        rejected: bool = False,
        settled: bool = False,
    ) -> dict:
        """A batch of transitions as numpy arrays (see `gather`; `where`: see `sample_rows`; `settled`: none whose
        next decision is still to come, see `pending`)."""
        horizon = max(n_step, chunk) if settled else 0
        rows = self.sample_rows(batch_size, rng, among, where, settled_horizon=horizon)
        return self.gather(rows, gamma, n_step, chunk, extras, rejected)

    def _field(self, name: str, rows: np.ndarray) -> np.ndarray:
        return self.data[name][rows]

    def _obs(self, rows: np.ndarray) -> dict:
        images = {c: self._field(f"image/{c}", rows) for c in self.cameras}
        obs = {"state": self._field("state", rows), "images": images}
        if self.instructions and "task" in self.data:  # as a policy's batched observation carries them
            obs["instruction"] = instructions_of(self._field("task", rows), self.instructions)
        return obs

    def gather(
        self,
        rows: np.ndarray,
        gamma: float,
        n_step: int = 1,
        chunk: int = 1,
        extras: tuple[str, ...] = (),
        rejected: bool = False,
    ) -> dict:
        """Transitions that end at `rows` (their first step), extended to n-step returns or action chunks.

        From obs_t, up to h = max(n_step, chunk) steps are followed inside the episode, stopping after a
        `terminated` or `truncated` step or at the newest stored record. With m steps taken:
        reward = Σ_{k<m} γ^k r_{t+k}, discount = γ^m · (1 − terminated at the last step), next_obs = obs_{t+m}.
        With chunk > 1, `action` is (batch, chunk, action_dim), padded with the last executed action past
        the episode's end, and `action_mask` marks the real ones.
        With `extras` (names of policy extras): `extras` holds those of the decision at obs_t (that chose
        `action`), `next_extras` those of the decision at next_obs, where one was taken (`next_extras_valid`;
        not after the episode's last step, where they are zero).
        With `rejected` (intervention as the reward, RLIF): a transition whose step is a human's takeover (the first
        step of an intervention) is the policy's rejected proposal instead, the one the person stepped in against:
        `action` is that step's `action_policy`, its reward the takeover's alone, and it ends there (discount 0: what
        the policy's action would have led to was never seen), and it is not flagged `intervention` (no algorithm
        imitates it as the person's). The human's correction steps after it are unchanged.
        """
        if n_step < 1 or chunk < 1 or (n_step > 1 and chunk > 1 and n_step != chunk):
            raise ValueError(f"n_step ({n_step}) and chunk ({chunk}) must be ≥ 1, and equal if both exceed 1")
        horizon = max(n_step, chunk)
        end = np.asarray(rows, np.int64)
        reward = self._field("reward", end).astype(np.float64)
        took = np.zeros(len(end), bool)
        actions = [self._field("action_executed", end)]
        if rejected:
            took = self._field("intervention", end) & ~self._field("intervention", self.prev[end])
            actions[0] = np.where(took[:, None], self._field("action_policy", end), actions[0])
        mask = [np.ones(len(end), bool)]
        taken = np.ones(len(end), np.int64)
        going = ~took
        for k in range(1, horizon):
            end, going = self._advance(end, going)
            reward += np.where(going, gamma**k * self._field("reward", end), 0.0)
            taken += going
            actions.append(np.where(going[:, None], self._field("action_executed", end), actions[-1]))
            mask.append(going)
        discount = gamma**taken * (1.0 - self._field("terminated", end)) * ~took
        out = {
            "obs": self._obs(self.prev[rows]),
            "action": actions[0] if chunk == 1 else np.stack(actions, axis=1),
            "reward": reward.astype(np.float32),
            "discount": discount.astype(np.float32),
            "next_obs": self._obs(end),
            "intervention": self._field("intervention", rows) & ~took,  # a rejected proposal is the policy's
        }
        if chunk > 1:
            out["action_mask"] = np.stack(mask, axis=1)
        if extras:
            after = ~self._ended(end) & self._has_next(end) & ~took
            nxt = np.where(after, self.next[end], end)
            out["extras"], out["next_extras"] = {}, {}
            for name in extras:
                out["extras"][name] = self._field(f"extra/{name}", rows)
                following = self._field(f"extra/{name}", nxt)
                following[~after] = 0
                out["next_extras"][name] = following
            out["next_extras_valid"] = after
        return out


class DiskReplay(ReplayBuffer):
    """Replay whose frames stay in the segment files (memory-mapped; the OS page cache is the RAM tier).

    Only the small fields live in RAM, so `capacity` may far exceed what the frames would take in memory.
    Segments are added whole, in write order; rows past `capacity` recycle the oldest."""

    def __init__(self, capacity: int, fields: dict[str, tuple]) -> None:
        small = {k: v for k, v in fields.items() if not k.startswith("image/")}
        super().__init__(capacity, small)
        self.cameras = [name[len("image/") :] for name in fields if name.startswith("image/")]
        self.full_fields = fields
        self.row_segment = np.full(capacity, -1, np.int64)
        self.row_offset = np.zeros(capacity, np.int64)
        self.segments: dict[int, dict[str, np.ndarray]] = {}

    def add_segment(self, index: int, batch: dict[str, np.ndarray], sources: np.ndarray) -> None:
        n = len(batch["step"])
        rows = (self.cursor + np.arange(n)) % self.capacity
        self.add({k: v for k, v in batch.items() if k in self.fields}, sources)
        self.row_segment[rows], self.row_offset[rows] = index, np.arange(n)
        self.segments[index] = {k: v for k, v in batch.items() if k.startswith("image/")}
        live = set(np.unique(self.row_segment[: self.size]).tolist())
        for old in [i for i in self.segments if i not in live]:
            del self.segments[old]  # every row of it was recycled: drop the memory map

    def _field(self, name: str, rows: np.ndarray) -> np.ndarray:
        if not name.startswith("image/"):
            return self.data[name][rows]
        shape, dtype = self.full_fields[name]
        out = np.empty((len(rows), *shape), dtype)
        seg = self.row_segment[rows]
        for index in np.unique(seg):
            hit = seg == index
            out[hit] = self.segments[int(index)][name][self.row_offset[rows[hit]]]
        return out


def instructions_of(codes: np.ndarray, names: list[str]) -> list[str | None]:
    """The instruction of each `task` code (None for NO_TASK), from the run's table's `names`."""
    return [None if c == NO_TASK else names[c - 1] for c in np.asarray(codes).tolist()]


def concat_batches(batches: list[dict]) -> dict:
    """Concatenate transition batches (nested dicts of arrays; lists, such as the instructions, joined) along the
    first axis."""
    first = batches[0]
    if isinstance(first, dict):
        return {k: concat_batches([b[k] for b in batches]) for k in first}
    if isinstance(first, list):
        return [x for b in batches for x in b]
    return np.concatenate(batches, axis=0)
