"""Episodes in and out of robo_rl: LeRobotDataset v3 (`lerobot_v3`), robomimic HDF5 (`robomimic`).

An `Episode` is one episode as a step batch (see `robo_rl.data.schema`): record 0 holds the reset observation
with zero actions; record t holds obs_t and the action, reward and end flags of the step that led to it. An episode
names its instruction; its records' `task` column is an index whose table depends on where they are (see tasks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robo_rl.data.tasks import INSTRUCTIONS, NO_TASK, TaskTable, decode_instructions, pack_instructions

PARTITIONS = ("online", "demos", "interventions")


@dataclass
class Episode:
    records: dict[str, np.ndarray]  # a step batch holding exactly one episode, in step order
    partition: str = "online"  # where it belongs in the replay: one of PARTITIONS
    source: str = ""  # the actor, file or dataset it came from
    instruction: str | None = None  # the task's instruction, None where it has none

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
    batch: dict[str, np.ndarray],
    sources: np.ndarray | None = None,
    partition: str = "online",
    tasks: list[str] | None = None,
) -> list[Episode]:
    """Group a step batch (records of several episodes, possibly interleaved) into episodes, in order of
    first appearance. `sources` (one label per record) keeps apart equal episode ids of different actors.
    An episode whose first record is not its reset record (step 0) is kept as it is. Its instruction is its `task`
    in `tasks` (a store's table), else in the batch's own instructions."""
    batch = dict(batch)
    raw = batch.pop(INSTRUCTIONS, None)
    if tasks is None:
        tasks = [] if raw is None else decode_instructions(raw)
    n = len(batch["step"])
    labels = np.zeros(n, np.int64) if sources is None else np.unique(sources, return_inverse=True)[1]
    keys = np.stack([labels, batch["episode_id"].astype(np.int64)], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    episodes = []
    for group in np.argsort(first, kind="stable"):
        rows = np.flatnonzero(inverse.ravel() == group)
        src = "" if sources is None else str(sources[rows[0]])
        task = int(batch["task"][rows[0]]) if "task" in batch else NO_TASK
        instruction = None if task == NO_TASK else tasks[task - 1]
        episodes.append(Episode({k: v[rows] for k, v in batch.items()}, partition, src, instruction))
    return episodes


def join_episodes(episodes: list[Episode], table: TaskTable | None = None) -> dict[str, np.ndarray]:
    """Concatenate episodes back into one step batch, each record's `task` the index of its episode's instruction in
    `table` (given a table, which gains what it lacks); without one, the batch carries its own instructions."""
    own = TaskTable() if table is None else table
    batch = {k: np.concatenate([e.records[k] for e in episodes]) for k in episodes[0].records}
    if "task" in batch:
        index = [own.code(e.instruction) for e in episodes]
        batch["task"] = np.repeat(np.asarray(index, np.int32), [len(e.records["step"]) for e in episodes])
    return batch if table is not None else pack_instructions(batch, own.names)
