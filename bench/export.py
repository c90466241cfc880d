"""`robo-rl data convert` to a LeRobot dataset: episodes/s of our batched writer against the converter it
replaced and against lerobot's own recording loop, on the same episodes of a state-only run, in the same run.

    before    the converter as it was before the batched writer (commit 37c3cf4): a copy of its function is
              kept below, `export_before`: one `add_frame` per frame and one `save_episode` per episode
    after     `robo_rl.data.datasets.lerobot_v3.export_lerobot` (today's code)
    lerobot   lerobot's record loop on frames prepared beforehand: `LeRobotDataset.create(...)`, `add_frame`
              per frame, `save_episode` per episode, `finalize` (what `lerobot-record` does per episode)

The run folder is written directly with the store writer (`SegmentStore`), as the learner leaves it: 6-d state,
3-d action, episodes of 5 to 20 steps (point_reach's time limit), no cameras. lerobot is imported before any
timing; the store is read once (its time is printed apart) and every writer gets the same episodes in memory.

    python bench/export.py            # a 20,000-step run (several minutes: the old paths run at a few ep/s)
    python bench/export.py --quick    # a 2,000-step run (< 60 s)

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._results import write_result  # noqa: E402
from robo_rl.data.datasets import PARTITIONS  # noqa: E402
from robo_rl.data.datasets.io import load_episodes  # noqa: E402
from robo_rl.data.datasets.lerobot_v3 import (  # noqa: E402
    ACTION,
    ACTION_BASE,
    ACTION_POLICY,
    DEFAULT_TASK,
    DONE,
    ENDED,
    IMAGES,
    INTERVENTION,
    PARTITION,
    REWARD,
    STATE,
    SUCCESS,
    TERMINATED,
    TRUNCATED,
    _features,
    export_lerobot,
)
from robo_rl.data.learner_replay import online_store_root  # noqa: E402
from robo_rl.data.schema import ENDED_BY_CODES, step_fields  # noqa: E402
from robo_rl.data.storage import SegmentStore  # noqa: E402

STATE_DIM, ACTION_DIM, MIN_STEPS, MAX_STEPS, FPS = 6, 3, 5, 20, 10
EPISODES_PER_SEGMENT = 100


def write_run(run_dir: Path, steps: int, seed: int = 0) -> int:
    """A state-only run folder of about `steps` transitions; returns the number of episodes."""
    fields, rng = step_fields(STATE_DIM, ACTION_DIM, {}), np.random.default_rng(seed)
    store = SegmentStore(online_store_root(run_dir), fields)
    episodes, total, chunk = 0, 0, []
    while total < steps:
        n = int(min(rng.integers(MIN_STEPS, MAX_STEPS + 1), max(steps - total, 1)))
        r = {k: np.zeros((n + 1, *s), d) for k, (s, d) in fields.items()}
        r["episode_id"][:], r["step"][:] = episodes, np.arange(n + 1)
        r["state"][:] = rng.standard_normal((n + 1, STATE_DIM))
        r["action_executed"][1:] = r["action_policy"][1:] = rng.uniform(-1, 1, (n, ACTION_DIM))
        r["reward"][1:] = -rng.random(n)
        success = n < MAX_STEPS
        r["terminated" if success else "truncated"][-1], r["success"][-1] = True, success
        r["ended_by"][-1] = ENDED_BY_CODES["env" if success else "time_limit"]
        r["timestamp"][:] = np.arange(n + 1) / FPS
        chunk.append(r)
        episodes, total = episodes + 1, total + n
        if len(chunk) == EPISODES_PER_SEGMENT or total >= steps:
            batch = {k: np.concatenate([c[k] for c in chunk]) for k in fields}
            store.write(batch, np.full(len(batch["step"]), "actor-0", dtype=object))
            chunk = []
    return episodes


# ---- the converter before the batched writer (robo_rl/data/datasets/lerobot_v3.py at 37c3cf4), kept to measure it ----


@contextlib.contextmanager
def _datasets_bars(show: bool):
    import datasets

    hide = not show and not datasets.are_progress_bars_disabled()
    if hide:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if hide:
            datasets.enable_progress_bars()


def _frames_before(ep, task: str):
    r = ep.records
    partition = np.array([PARTITIONS.index(ep.partition)], np.int64)
    cams = [k for k in r if k.startswith("image/")]
    for k in range(len(ep)):
        t = k + 1
        frame = {
            STATE: np.asarray(r["state"][k], np.float32),
            ACTION: np.asarray(r["action_executed"][t], np.float32),
            REWARD: np.array([r["reward"][t]], np.float32),
            DONE: np.array([r["terminated"][t] or r["truncated"][t]], bool),
            TERMINATED: np.array([r["terminated"][t]], bool),
            TRUNCATED: np.array([r["truncated"][t]], bool),
            SUCCESS: np.array([r["success"][t]], bool),
            INTERVENTION: np.array([r["intervention"][t]], bool),
            ACTION_POLICY: np.asarray(r["action_policy"][t], np.float32),
            ACTION_BASE: np.asarray(r["action_base"][t], np.float32),
            ENDED: np.array([r["ended_by"][t]], np.int64),
            PARTITION: partition,
            "task": task,
        }
        for cam in cams:
            frame[IMAGES + cam[6:]] = np.ascontiguousarray(r[cam][k], np.uint8)
        yield frame


def export_before(
    episodes, root: Path, repo_id: str = "local/robo_rl", fps: float = 10.0, task: str = "", progress: bool = False
) -> Path:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = None
    with _datasets_bars(progress):
        for ep in episodes:
            if len(ep) < 1:
                continue
            if ds is None:
                ds = LeRobotDataset.create(
                    repo_id, fps=int(fps), root=root, features=_features(ep.records), use_videos=True
                )
            for frame in _frames_before(ep, task or DEFAULT_TASK):
                ds.add_frame(frame)
            ds.save_episode(parallel_encoding=False)
        ds.finalize()
    return root


# ---- lerobot's own recording loop ----


def lerobot_record(frames_per_episode: list[list[dict]], features: dict, root: Path) -> Path:
    """What lerobot's record script does with each episode: `add_frame` per frame, `save_episode` at its end."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(
        "local/record", fps=FPS, root=root, features=features, use_videos=True, video_backend="pyav"
    )
    for frames in frames_per_episode:
        for frame in frames:
            ds.add_frame(dict(frame))  # add_frame pops "task" from the dict it is given
        ds.save_episode()
    ds.finalize()
    return root


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2,000-step run (< 60 s)")
    parser.add_argument("--steps", type=int, default=None, help="transitions in the run (default 20,000)")
    args = parser.parse_args()
    steps = args.steps or (2_000 if args.quick else 20_000)

    import datasets
    import lerobot.datasets.lerobot_dataset  # noqa: F401  (imported once, before any timing)

    datasets.disable_progress_bars()  # the old path's per-episode bars would only slow the terminal
    logging.getLogger("lerobot.utils.import_utils").setLevel(logging.ERROR)  # its torchcodec traceback, per create
    work = Path(tempfile.mkdtemp(prefix="bench_export_"))
    try:
        num_episodes = write_run(work / "run", steps)
        start = time.perf_counter()
        episodes = load_episodes(work / "run", progress=False)
        load_s = time.perf_counter() - start
        assert len(episodes) == num_episodes
        frames = [list(_frames_before(ep, DEFAULT_TASK)) for ep in episodes]  # lerobot's loop gets them ready-made
        features = _features(episodes[0].records)

        after_s = timed(lambda: export_lerobot(episodes, work / "after", fps=FPS, progress=False))
        lerobot_s = timed(lerobot_record, frames, features, work / "lerobot")
        before_s = timed(export_before, episodes, work / "before")

        import pyarrow.parquet as pq  # the three datasets hold the same frames

        def column(root: Path, name: str) -> np.ndarray:
            return np.stack(pq.read_table(root / "data", columns=[name]).column(name).to_numpy(zero_copy_only=False))

        for name in (STATE, ACTION, REWARD, "episode_index", "index"):
            ours = column(work / "after", name)
            assert np.array_equal(ours, column(work / "before", name)), name
            assert np.array_equal(ours, column(work / "lerobot", name)), name
        ours, theirs = (json.loads((work / d / "meta" / "stats.json").read_text()) for d in ("after", "lerobot"))
        for name in (STATE, ACTION, REWARD):
            for stat in ("min", "max", "mean", "std", "count"):
                assert np.allclose(ours[name][stat], theirs[name][stat], rtol=1e-5, atol=1e-6), (name, stat)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    eps = {"before": num_episodes / before_s, "after": num_episodes / after_s, "lerobot": num_episodes / lerobot_s}
    print(f"state-only run: {num_episodes} episodes, {steps} transitions; reading the store {load_s:.2f} s")
    for name, rate in eps.items():
        print(f"  {name:<8} {rate:9.1f} episodes/s")
    ratios = {
        "after_over_before": eps["after"] / eps["before"],
        "after_over_lerobot": eps["after"] / eps["lerobot"],
        "lerobot_over_before": eps["lerobot"] / eps["before"],
    }
    print("  " + ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items()))
    result = {
        "bench": "export",
        "quick": args.quick,
        "episodes": num_episodes,
        "transitions": steps,
        "episodes_per_s": {k: round(v, 2) for k, v in eps.items()},
        "ratios": {k: round(v, 2) for k, v in ratios.items()},
        "store_read_s": round(load_s, 3),
        "load": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    write_result("export", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
