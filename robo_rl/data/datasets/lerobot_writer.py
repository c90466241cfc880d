"""A LeRobotDataset v3 written in batches: the layout lerobot's own recorder produces, without its per-frame
and per-episode round trips (a `datasets.Dataset`, a PNG per image, a stats and info.json rewrite per episode).

The files are lerobot's v3 layout, built with lerobot's own helpers where they exist:

    meta/info.json                        features, fps, totals, file templates (`LeRobotDatasetMetadata.create`)
    meta/tasks.parquet                    task → task_index
    meta/stats.json                       `aggregate_stats` of the per-episode stats
    meta/episodes/chunk-*/file-*.parquet  one row per episode: tasks, length, file and frame ranges, stats/*
    data/chunk-*/file-*.parquet           the frames, many episodes per write
    videos/<key>/chunk-*/file-*.mp4       one stream per camera; episode e spans [from_timestamp, to_timestamp)

Per-episode stats are lerobot's (min, max, mean, std, count, quantiles), computed for a whole write batch at
once; images use lerobot's own sampling and downsampling. Min/max/mean/std/count equal those lerobot's recorder
writes; quantiles are exact where it estimates them from a histogram.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MB = 2**20
# an episode's metadata row holds ~10 stats per feature (a few kB): this keeps a file well under lerobot's 100 MB
EPISODES_PER_META_FILE = 10_000


class _VideoStream:
    """One camera's frames encoded as a growing sequence of mp4 files, rolled at the size lerobot allows."""

    def __init__(self, root: Path, key: str, meta, fps: int, encoder) -> None:
        self.root, self.key, self.meta, self.fps, self.encoder = root, key, meta, fps, encoder
        self.chunk, self.file, self.frames, self.bytes = 0, 0, 0, 0
        self.container = self.stream = None

    def _path(self) -> Path:
        return self.root / self.meta.video_path.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)

    def _open(self, height: int, width: int) -> None:
        import av

        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its configuration per file otherwise: errors only
        path = self._path()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(path), "w")
        self.stream = self.container.add_stream(
            self.encoder.vcodec, self.fps, options=self.encoder.get_codec_options(as_strings=True)
        )
        self.stream.pix_fmt, self.stream.height, self.stream.width = self.encoder.pix_fmt, height, width
        self.frames = self.bytes = 0

    def close(self) -> None:
        if self.container is not None:
            self.container.mux(self.stream.encode())  # flush the encoder's delayed frames
            self.container.close()
            self.container = None

    def add(self, frames: np.ndarray) -> dict:
        """Encode one episode's frames (n, H, W, 3 uint8); return its `videos/<key>/*` metadata."""
        import av
        from lerobot.datasets.utils import update_chunk_file_indices

        if self.container is not None and self.bytes >= self.meta.video_files_size_in_mb * MB:
            self.close()
            self.chunk, self.file = update_chunk_file_indices(self.chunk, self.file, self.meta.chunks_size)
        if self.container is None:
            self._open(*frames.shape[1:3])
        start = self.frames
        for img in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames  # the stream's time base is 1/fps: pts counts frames
            packets = self.stream.encode(frame)
            self.bytes += sum(p.size for p in packets)  # what the file holds (the encoder keeps a few frames back)
            self.container.mux(packets)
            self.frames += 1
        prefix = f"videos/{self.key}/"
        return {
            prefix + "chunk_index": self.chunk,
            prefix + "file_index": self.file,
            prefix + "from_timestamp": start / self.fps,
            prefix + "to_timestamp": self.frames / self.fps,
        }


def _image_stats(frames: np.ndarray) -> dict:
    """Per-channel stats of an episode's frames, sampled and normalised to [0, 1] as lerobot's recorder does."""
    from lerobot.datasets.compute_stats import auto_downsample_height_width, get_feature_stats, sample_indices

    picks = sample_indices(len(frames))
    sampled = np.stack([auto_downsample_height_width(frames[i].transpose(2, 0, 1)) for i in picks])
    stats = get_feature_stats(sampled, axis=(0, 2, 3), keepdims=True)
    return {k: v if k == "count" else np.squeeze(v / 255.0, axis=0) for k, v in stats.items()}


def _batch_stats(values: np.ndarray, lengths: np.ndarray) -> list[dict]:
    """lerobot's per-episode stats of one feature (min, max, mean, std, count, q01 … q99) for several episodes
    at once; `values` holds their rows back to back. Quantiles are exact (linear), where lerobot's recorder
    estimates them from a histogram."""
    from lerobot.datasets.compute_stats import DEFAULT_QUANTILES

    x = values.reshape(len(values), -1).astype(np.float64)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    episode = np.repeat(np.arange(len(lengths)), lengths)
    count = lengths[:, None].astype(np.float64)
    mean = np.add.reduceat(x, starts) / count
    stats = {
        "min": np.minimum.reduceat(x, starts),
        "max": np.maximum.reduceat(x, starts),
        "mean": mean,
        "std": np.sqrt(np.add.reduceat((x - mean[episode]) ** 2, starts) / count),
    }
    ordered = np.stack([x[np.lexsort((x[:, d], episode)), d] for d in range(x.shape[1])], axis=1)
    last = starts + lengths - 1
    for q in DEFAULT_QUANTILES:
        pos = starts + q * (lengths - 1)
        lo = np.floor(pos).astype(np.int64)
        frac = (pos - lo)[:, None]
        stats[f"q{int(q * 100):02d}"] = ordered[lo] * (1 - frac) + ordered[np.minimum(lo + 1, last)] * frac
    return [{**{k: v[e] for k, v in stats.items()}, "count": np.array([n])} for e, n in enumerate(lengths)]


class LeRobotV3Writer:
    """Write episodes (column arrays, one row per frame) as a new LeRobotDataset v3 at `root`.

    `add(columns, videos, task)` takes one episode; `finish()` writes what is buffered and the metadata. Frames
    are buffered and written `frames_per_write` at a time."""

    def __init__(self, root: str | Path, repo_id: str, fps: int, features: dict, frames_per_write: int = 50_000):
        import pyarrow.parquet as pq  # noqa: F401  (fail here, not half-way, if pyarrow is missing)
        from lerobot.configs import rgb_encoder_defaults
        from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
        from lerobot.datasets.feature_utils import get_hf_features_from_features

        self.meta = LeRobotDatasetMetadata.create(
            repo_id=repo_id, fps=fps, features=features, root=root, use_videos=True
        )
        self.root, self.fps, self.frames_per_write = Path(root), fps, frames_per_write
        self.hf_features = get_hf_features_from_features(self.meta.features)
        self.schema = self.hf_features.arrow_schema
        self.encoder = rgb_encoder_defaults()
        self.videos = {key: _VideoStream(self.root, key, self.meta, fps, self.encoder) for key in self.meta.video_keys}
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict] = []
        self.stats: list[dict] = []
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_frames = self.total_frames = 0
        self.data_chunk = self.data_file = self.frames_in_file = 0
        self.data_writer = None
        row_bytes = sum(
            np.dtype(self.meta.features[k]["dtype"]).itemsize * int(np.prod(self.meta.features[k]["shape"]))
            for k in self.hf_features
        )
        # raw bytes over-estimate the compressed parquet, so a file stays under lerobot's size limit
        self.frames_per_file = max(1, self.meta.data_files_size_in_mb * MB // max(row_bytes, 1))

    def add(self, columns: dict[str, np.ndarray], videos: dict[str, np.ndarray], task: str | Sequence[str]) -> None:
        """One episode: `columns` maps every non-video feature of ours to an array with one row per frame;
        `videos` maps each video feature to its frames (n, H, W, 3 uint8); `task` is the episode's task, or one per
        frame (a LeRobot frame has its own task_index: RECAP's prompts carry each action's label)."""
        from lerobot.datasets.utils import update_chunk_file_indices

        n = len(next(iter(columns.values())))
        index = len(self.episodes)
        per_frame = [task] * n if isinstance(task, str) else [str(t) for t in task]
        if len(per_frame) != n:
            raise ValueError(f"an episode of {n} frames was given {len(per_frame)} tasks")
        task_index = np.asarray([self.tasks.setdefault(t, len(self.tasks)) for t in per_frame], np.int64)
        episode_tasks = list(dict.fromkeys(per_frame))  # each once, in order of first use
        frame_index = np.arange(n, dtype=np.int64)
        cols = {
            **columns,
            "timestamp": (frame_index / self.fps).astype(np.float32),
            "frame_index": frame_index,
            "episode_index": np.full(n, index, np.int64),
            "index": np.arange(self.total_frames, self.total_frames + n, dtype=np.int64),
            "task_index": task_index,
        }
        if self.frames_in_file and self.frames_in_file + n > self.frames_per_file:
            self._write_pending()
            self._close_data_file()
            self.data_chunk, self.data_file = update_chunk_file_indices(
                self.data_chunk, self.data_file, self.meta.chunks_size
            )
        stats = {}
        row = {
            "episode_index": index,
            "tasks": episode_tasks,
            "length": n,
            "data/chunk_index": self.data_chunk,
            "data/file_index": self.data_file,
            "dataset_from_index": self.total_frames,
            "dataset_to_index": self.total_frames + n,
        }
        for key, frames in videos.items():
            row.update(self.videos[key].add(frames))
            stats[key] = _image_stats(frames)
        self.episodes.append(row)
        self.stats.append(stats)
        self.pending.append(cols)
        self.pending_frames += n
        self.frames_in_file += n
        self.total_frames += n
        if self.pending_frames >= self.frames_per_write:
            self._write_pending()

    def _write_pending(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.pending:
            return
        lengths = np.array([len(c["index"]) for c in self.pending])
        first = len(self.stats) - len(self.pending)  # the stats of pending episodes hold only their images yet
        for key in self.pending[0]:
            for e, ep_stats in enumerate(_batch_stats(np.concatenate([c[key] for c in self.pending]), lengths)):
                self.stats[first + e][key] = ep_stats
        arrays = []
        for field in self.schema:
            values = np.concatenate([c[field.name] for c in self.pending])
            if pa.types.is_fixed_size_list(field.type) or pa.types.is_list(field.type):
                flat = pa.array(values.reshape(-1), type=field.type.value_type)
                arrays.append(pa.FixedSizeListArray.from_arrays(flat, values.shape[1]).cast(field.type))
            else:
                arrays.append(pa.array(values.reshape(len(values)), type=field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if self.data_writer is None:
            path = self.root / self.meta.data_path.format(chunk_index=self.data_chunk, file_index=self.data_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.data_writer = pq.ParquetWriter(path, schema=self.schema, compression="snappy", use_dictionary=True)
        self.data_writer.write_table(table)
        self.pending, self.pending_frames = [], 0

    def _close_data_file(self) -> None:
        if self.data_writer is not None:
            self.data_writer.close()
            self.data_writer = None
        self.frames_in_file = 0

    def close(self) -> None:
        """Release open files (after an error too); `finish` calls it."""
        self._close_data_file()
        for video in self.videos.values():
            video.close()

    def finish(self) -> None:
        """Write the buffered frames and the metadata lerobot reads: episodes, tasks, stats, info."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq
        from lerobot.datasets.compute_stats import aggregate_stats
        from lerobot.datasets.io_utils import write_info, write_stats, write_tasks
        from lerobot.datasets.utils import DEFAULT_EPISODES_PATH, flatten_dict, update_chunk_file_indices

        if not self.episodes:
            raise ValueError("no episode with at least one transition to export")
        self._write_pending()
        self.close()
        for key in self.videos:
            self.meta.update_video_info(key, video_encoder=self.encoder)
        chunk, file = 0, 0
        for start in range(0, len(self.episodes), EPISODES_PER_META_FILE):
            rows = [
                {
                    **row,
                    **flatten_dict({"stats": stats}),
                    "meta/episodes/chunk_index": chunk,
                    "meta/episodes/file_index": file,
                }
                for row, stats in zip(
                    self.episodes[start : start + EPISODES_PER_META_FILE],
                    self.stats[start : start + EPISODES_PER_META_FILE],
                    strict=True,
                )
            ]
            table = pa.Table.from_pylist(
                [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in row.items()} for row in rows]
            )
            path = self.root / DEFAULT_EPISODES_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path, compression="snappy")
            chunk, file = update_chunk_file_indices(chunk, file, self.meta.chunks_size)
        write_tasks(
            pd.DataFrame({"task_index": list(self.tasks.values())}, index=pd.Index(list(self.tasks), name="task")),
            self.root,
        )
        write_stats(aggregate_stats(self.stats), self.root)
        info = self.meta.info
        info.total_episodes, info.total_frames = len(self.episodes), self.total_frames
        info.total_tasks = len(self.tasks)
        info.splits = {"train": f"0:{info.total_episodes}"}
        write_info(info, self.root)
