"""Read episodes from any place robo_rl data lives, write them as a replay store or a LeRobot dataset,
and summarise them (`robo-rl data inspect`)."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np

from robo_rl.data.datasets import Episode, join_episodes, split_episodes
from robo_rl.data.learner_replay import online_store_root
from robo_rl.data.storage import SegmentStore, fields_spec
from robo_rl.data.tasks import INSTRUCTIONS, TaskTable
from robo_rl.envs.base import ENDED_BY


def detect_format(path: str | Path) -> str:
    """Which kind of data `path` holds: a replay store (or a run folder), a LeRobot dataset, a robomimic
    HDF5 file or a demonstration cache (.npz)."""
    path = Path(path)
    if (path / "manifest.jsonl").is_file() or (online_store_root(path) / "manifest.jsonl").is_file():
        return "store"
    if (path / "meta" / "info.json").is_file():
        return "lerobot"
    if path.is_file() and path.suffix in (".hdf5", ".h5"):
        return "robomimic"
    if path.is_file() and path.suffix == ".npz":
        return "npz"
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    raise ValueError(
        f"{path} is not robo_rl data: expected a replay store or run folder, a LeRobot dataset folder "
        "(meta/info.json), a robomimic .hdf5 file or a demonstration .npz"
    )


def _store_root(path: Path) -> Path:
    return path if (path / "manifest.jsonl").is_file() else online_store_root(path)


# A cache of demonstrations (robo_rl.data.demos) is one step batch in an .npz file, "/" in field names written as "__".
def save_step_batch(path: Path, batch: dict[str, np.ndarray]) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **{k.replace("/", "__"): v for k, v in batch.items()})
    os.replace(tmp, path)


def load_step_batch(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k.replace("__", "/"): f[k] for k in f.files}


def load_episodes(path: str | Path, progress: bool = True, **options) -> list[Episode]:
    """Every episode at `path`, whatever its format (`options` go to the format's importer).

    Episodes of a replay store keep the store's partition, except that online episodes a human took
    over at some step are marked `interventions`."""
    path = Path(path)
    kind = detect_format(path)
    if kind == "lerobot":
        from robo_rl.data.datasets.lerobot_v3 import import_lerobot

        return import_lerobot(path, progress=progress, **options)
    if kind == "robomimic":
        from robo_rl.data.datasets.robomimic import import_robomimic

        return import_robomimic(path, progress=progress, **options)
    if kind == "npz":
        return split_episodes(load_step_batch(path), partition="demos")
    store = SegmentStore.open(_store_root(path))
    parts = [(batch, sources) for _, batch, sources in store.iter_segments(mmap=False)]
    for problem in store.problems:
        print(f"warning: {problem} (skipped)")
    if not parts:
        return []
    batch = {k: np.concatenate([b[k] for b, _ in parts]) for k in parts[0][0]}
    episodes = split_episodes(batch, np.concatenate([s for _, s in parts]), store.partition, store.tasks)
    for ep in episodes:
        if ep.partition == "online" and ep.interventions:
            ep.partition = "interventions"
    return episodes


def load_some_episodes(path: str | Path, progress: bool = True) -> list[Episode]:
    """`load_episodes`, refusing in one line (a ValueError that starts with the path) data it cannot read or that
    holds no episodes: each command that trains or labels from data wraps it in its own error."""
    try:
        episodes = load_episodes(path, progress=progress)
    except (ValueError, OSError) as e:
        raise ValueError(f"{path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not episodes:
        raise ValueError(f"{path} holds no episodes")
    return episodes


def fields_of(records: dict[str, np.ndarray]) -> dict[str, tuple]:
    """The record layout of a step batch (a self-describing batch's own instructions are not a record field)."""
    return {k: (v.shape[1:], v.dtype) for k, v in records.items() if k != INSTRUCTIONS}


def save_store(
    episodes: list[Episode],
    dst: str | Path,
    partition: str = "demos",
    records_per_segment: int = 5000,
    progress: bool = True,
) -> Path:
    """Write episodes as a replay store (one segment per `records_per_segment` records)."""
    from tqdm import tqdm

    dst = Path(dst)
    if dst.exists() and any(dst.iterdir()):
        raise FileExistsError(f"{dst} exists and is not empty: choose a new folder")
    store = SegmentStore(dst, fields_of(episodes[0].records), partition=partition)
    tasks = TaskTable([e.instruction for e in episodes if e.instruction is not None])
    store.save_tasks(tasks.names)
    chunk: list[Episode] = []
    for i, ep in enumerate(tqdm(episodes, desc="writing", unit="ep", disable=not progress)):
        chunk.append(ep)
        if sum(len(e.records["step"]) for e in chunk) >= records_per_segment or i == len(episodes) - 1:
            sources = np.concatenate([np.full(len(e.records["step"]), e.source or "data", dtype=object) for e in chunk])
            store.write(join_episodes(chunk, tasks), sources)
            chunk = []
    return dst


def summarize(episodes: list[Episode]) -> dict:
    """Counts, lengths, success, interventions and episodes per instruction, per partition."""
    out = {}
    by_partition = collections.defaultdict(list)
    for ep in episodes:
        by_partition[ep.partition].append(ep)
    for partition, eps in by_partition.items():
        lengths = np.array([len(e) for e in eps])
        ended = collections.Counter(
            ENDED_BY[c - 1] if c else "running" for c in (int(e.records["ended_by"][-1]) for e in eps)
        )
        out[partition] = {
            "episodes": len(eps),
            "transitions": int(lengths.sum()),
            "length_mean": float(lengths.mean()) if len(eps) else 0.0,
            "length_min": int(lengths.min()) if len(eps) else 0,
            "length_max": int(lengths.max()) if len(eps) else 0,
            "success_rate": float(np.mean([e.success for e in eps])) if eps else 0.0,
            "episodes_with_interventions": sum(1 for e in eps if e.interventions),
            "intervention_steps": sum(e.interventions for e in eps),
            "terminated": sum(1 for e in eps if e.records["terminated"][-1]),
            "truncated": sum(1 for e in eps if e.records["truncated"][-1]),
            "ended_by": dict(ended),
            "instructions": dict(collections.Counter(e.instruction for e in eps if e.instruction is not None)),
        }
    return out


def same_layout(a: dict[str, tuple], b: dict[str, tuple]) -> bool:
    """Whether two field layouts (name → (shape, dtype)) hold the same fields, shapes and dtypes."""
    return fields_spec(a) == fields_spec(b)


def describe_fields(fields: dict[str, tuple]) -> str:
    """A field layout (name → (shape, dtype)) in a few words: state and action sizes, cameras."""
    cams = [f"{k[len('image/') :]} {s[0]}×{s[1]}" for k, (s, _) in fields.items() if k.startswith("image/")]
    return (
        f"state {fields['state'][0][0]}-d, action {fields['action_executed'][0][0]}-d, "
        f"cameras: {', '.join(cams) or 'none'}"
    )
