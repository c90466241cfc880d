"""Episodes in and out of robo_rl: LeRobotDataset v3 (`lerobot_v3`), robomimic HDF5 (`robomimic`).

An `Episode` is one episode as a step batch (see `robo_rl.data.schema`): record 0 holds the reset observation
with zero actions; record t holds obs_t and the action, reward and end flags of the step that led to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PARTITIONS = ("online", "demos", "interventions")


@dataclass
class Episode:
    records: dict[str, np.ndarray]  # a step batch holding exactly one episode, in step order
    partition: str = "online"  # where it belongs in the replay: one of PARTITIONS
    source: str = ""  # the actor, file or dataset it came from

    def __len__(self) -> int:
        """Number of transitions (records after the reset record)."""
        return int(len(self.records["step"]) - 1)

    @property
    def success(self) -> bool:
        return bool(self.records["success"][-1])

    @property
    def interventions(self) -> int:
        return int(self.records["intervention"].sum())


def split_episodes(
    batch: dict[str, np.ndarray], sources: np.ndarray | None = None, partition: str = "online"
) -> list[Episode]:
    """Group a step batch (records of several episodes, possibly interleaved) into episodes, in order of
    first appearance. `sources` (one label per record) keeps apart equal episode ids of different actors.
    An episode whose first record is not its reset record (step 0) is kept as it is."""
    n = len(batch["step"])
    labels = np.zeros(n, np.int64) if sources is None else np.unique(sources, return_inverse=True)[1]
    keys = np.stack([labels, batch["episode_id"].astype(np.int64)], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    episodes = []
    for group in np.argsort(first, kind="stable"):
        rows = np.flatnonzero(inverse.ravel() == group)
        src = "" if sources is None else str(sources[rows[0]])
        episodes.append(Episode({k: v[rows] for k, v in batch.items()}, partition, src))
    return episodes


def join_episodes(episodes: list[Episode]) -> dict[str, np.ndarray]:
    """Concatenate episodes back into one step batch."""
    return {k: np.concatenate([e.records[k] for e in episodes]) for k in episodes[0].records}
