"""Replay memory and sampling: our episodic uint8 replay (RAM ring, and frames memory-mapped from the
segment files on disk) against LeRobot's `ReplayBuffer`, in the same run, for two 128×128 cameras.

Measures bytes per stored transition (against one raw uint8 copy of the frames) and the time to sample a
batch of 256 transitions with images. For a like-for-like figure, each sampler's batch is also turned into
float32 image tensors in [0, 1], which is what LeRobot's `sample` returns (ours hands uint8 to the encoder,
which converts on the device). "disk, cold" drops the segment files from the page cache before each batch
(posix_fadvise DONTNEED), so every frame is read from the file system.

    python bench/replay.py            # 2,000 transitions, 20 batches each
    python bench/replay.py --quick    # 500 transitions, 5 batches each (< 60 s)

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._replay_lerobot_baseline import lerobot_replay_figures  # noqa: E402
from robo_rl.data.replay import DiskReplay, ReplayBuffer  # noqa: E402
from robo_rl.data.schema import step_fields  # noqa: E402
from robo_rl.data.storage import SegmentStore  # noqa: E402

CAMERAS = {"front": (128, 128), "wrist": (128, 128)}
STATE_DIM, ACTION_DIM, EPISODE_STEPS, BATCH = 18, 4, 50, 256
RAW_FRAMES = sum(h * w * 3 for h, w in CAMERAS.values())  # one uint8 copy of the frames of one transition


def make_episodes(num_transitions: int, rng: np.random.Generator) -> list[dict]:
    fields = step_fields(STATE_DIM, ACTION_DIM, CAMERAS)
    episodes = []
    for ep in range(num_transitions // EPISODE_STEPS):
        n = EPISODE_STEPS + 1
        rec = {name: np.zeros((n, *shape), dtype) for name, (shape, dtype) in fields.items()}
        rec["episode_id"][:] = ep
        rec["step"][:] = np.arange(n)
        rec["state"][:] = rng.standard_normal((n, STATE_DIM))
        rec["action_executed"][1:] = rng.uniform(-1, 1, (n - 1, ACTION_DIM))
        rec["reward"][1:] = rng.random(n - 1)
        rec["truncated"][-1] = True
        for cam in CAMERAS:
            rec[f"image/{cam}"][:] = rng.integers(0, 256, rec[f"image/{cam}"].shape, dtype=np.uint8)
        episodes.append(rec)
    return episodes


def as_float_images(batch: dict) -> list[torch.Tensor]:
    """uint8 HWC frames → float32 tensors in [0, 1], viewed as NCHW (channels-last memory, which conv2d takes),
    as LeRobot's sampler hands them out. numpy's uint8→float32 is several times faster than torch's on one thread."""
    return [
        torch.from_numpy(np.multiply(v, np.float32(1 / 255), dtype=np.float32)).permute(0, 3, 1, 2)
        for obs in (batch["obs"], batch["next_obs"])
        for v in obs["images"].values()
    ]


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up, not counted
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def evict(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def ours(num_transitions: int, repeats: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    episodes = make_episodes(num_transitions, rng)
    fields = step_fields(STATE_DIM, ACTION_DIM, CAMERAS)
    records = sum(len(e["step"]) for e in episodes)
    transitions = records - len(episodes)
    ring = ReplayBuffer(records, fields)
    t = time.perf_counter()
    for ep in episodes:
        for lo in range(0, len(ep["step"]), 10):  # as the learner receives them: messages of 10 records
            ring.add({k: v[lo : lo + 10] for k, v in ep.items()}, "actor-0")
    add_per_s = records / (time.perf_counter() - t)
    ram_bytes = sum(a.nbytes for a in ring.data.values()) + sum(
        getattr(ring, n).nbytes for n in ("row_uid", "prev", "prev_uid", "next", "next_uid")
    )

    with tempfile.TemporaryDirectory() as tmp:
        store = SegmentStore(Path(tmp) / "online", fields)
        per_segment = max(1, len(episodes) // 8)
        for i in range(0, len(episodes), per_segment):
            chunk = episodes[i : i + per_segment]
            batch = {k: np.concatenate([e[k] for e in chunk]) for k in fields}
            store.write(batch, np.full(len(batch["step"]), "actor-0", dtype=object))
        disk_bytes = store.nbytes
        disk = DiskReplay(records, fields)
        for seg, batch, sources in store.iter_segments(verify=False):
            disk.add_segment(seg.index, batch, sources)
        files = [store.root / s.name for s in store.segments]

        def cold():
            evict(files)
            return disk.sample(BATCH, rng, 0.99)

        figures = {
            "bytes_per_transition_ram": ram_bytes / transitions,
            "bytes_per_transition_disk": disk_bytes / transitions,
            "add_records_per_s": add_per_s,
            "sample_ms_ram": median_ms(lambda: ring.sample(BATCH, rng, 0.99), repeats),
            "sample_ms_ram_float": median_ms(lambda: as_float_images(ring.sample(BATCH, rng, 0.99)), repeats),
            "sample_ms_disk_warm": median_ms(lambda: disk.sample(BATCH, rng, 0.99), repeats),
            "sample_ms_disk_cold": median_ms(cold, repeats),
            "sample_ms_disk_cold_float": median_ms(lambda: as_float_images(cold()), repeats),
            "sample_ms_ram_nstep3": median_ms(lambda: ring.sample(BATCH, rng, 0.99, n_step=3), repeats),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 transitions, 5 batches (< 60 s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the learner runs one torch thread on this 2-core machine
    n, repeats = (500, 5) if args.quick else (2000, 20)
    a = ours(n, repeats, args.seed)
    for k, v in a.items():
        print(f"ours     {k:<28} {v:,.2f}")
    b = lerobot_replay_figures(num_transitions=n, batch_size=BATCH, repeats=repeats, seed=args.seed)
    for k in ("bytes_per_transition", "add_per_s", "sample_ms_plain", "sample_ms_augmented"):
        print(f"lerobot  {k:<28} {b[k]:,.2f}")
    result = {
        "transitions": n,
        "batch_size": BATCH,
        "cameras": "2 x 128x128x3",
        "raw_frame_bytes": RAW_FRAMES,
        "ours": a,
        "lerobot": {k: v for k, v in b.items() if k != "config"},
        "lerobot_config": b.get("config"),
        "ours_ram_over_raw": a["bytes_per_transition_ram"] / RAW_FRAMES,
        "ours_disk_over_raw": a["bytes_per_transition_disk"] / RAW_FRAMES,
        "lerobot_over_ours_bytes": b["bytes_per_transition"] / a["bytes_per_transition_ram"],
        "speedup_ram_vs_lerobot_plain": b["sample_ms_plain"] / a["sample_ms_ram"],
        "speedup_ram_float_vs_lerobot_plain": b["sample_ms_plain"] / a["sample_ms_ram_float"],
        "speedup_disk_cold_float_vs_lerobot_plain": b["sample_ms_plain"] / a["sample_ms_disk_cold_float"],
        "load": os.getloadavg()[0],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
