"""Replay memory and sampling: our episodic uint8 replay (RAM ring, and frames memory-mapped from the
segment files on disk) against LeRobot's `ReplayBuffer`, in the same run, for two 128×128 cameras.

Measures bytes per stored transition (against one raw uint8 copy of the frames) and the time to sample a
batch of 256 transitions with images. LeRobot stores float32 frames, ours uint8; two like-for-like figures stand
beside that headline: float32 out of both (each of our batches also turned into float32 image tensors in [0, 1],
what LeRobot's `sample` returns; ours hands uint8 to the encoder, which converts on the device), and uint8 in
both (LeRobot's buffer code with uint8 image storage, `_replay_lerobot_baseline.py`: bytes and plain sampling).
"disk, cold" drops the segment files from the page cache before each batch (posix_fadvise DONTNEED), so every
frame is read from the file system.

The prior-data mix: sampling a batch of 256 from demos + interventions (state only) out of a wrapped ring of
100k, 1M and 10M records, about 3% of them a human's, with the interventions partition kept as an index on every
write (ours) against the scan of the whole ring per batch that found it before (the baseline, kept here), in the
same run, batch for batch alike (the same rows drawn); also the time to find the 512 candidate rows one draw looks
at, where the two differ (10M rows take about 2 GB of RAM). Written to bench/results/replay_prior_mix.json
and the whole run to bench/results/replay.json (with --quick: under bench/results/quick/).

    python bench/replay.py                   # 2,000 transitions, 20 batches each; the prior mix at 100k, 1M, 10M
    python bench/replay.py --quick           # 500 transitions, 5 batches each; the prior mix at 50k and 500k (< 90 s)
    python bench/replay.py --prior-mix-only  # only the prior mix (with --quick: the small sizes)

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
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._replay_lerobot_baseline import lerobot_replay_figures  # noqa: E402
from bench._results import write_result  # noqa: E402
from robo_rl.data.learner_replay import LearnerReplay  # noqa: E402
from robo_rl.data.replay import DiskReplay, ReplayBuffer, concat_batches  # noqa: E402
from robo_rl.data.schema import step_fields  # noqa: E402
from robo_rl.data.storage import SegmentStore  # noqa: E402

CAMERAS = {"front": (128, 128), "wrist": (128, 128)}
STATE_DIM, ACTION_DIM, EPISODE_STEPS, BATCH = 18, 4, 50, 256
RAW_FRAMES = sum(h * w * 3 for h, w in CAMERAS.values())  # one uint8 copy of the frames of one transition
ROOT = Path(__file__).resolve().parents[1]
DEMO_RECORDS = 20_400  # 400 demonstrations of 50 steps
# a result names its commit, and any of these files it ran with uncommitted changes
MEASURED_CODE = [
    "bench/replay.py",
    *(f"robo_rl/data/{m}.py" for m in ("replay", "intervention_index", "learner_replay")),
]
HUMAN_EPISODE_SHARE, HUMAN_TAKEOVER_STEPS = 0.2, 8  # a human takes over 8 steps in 1 episode of 5: about 3%


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


# --- the prior-data mix: the interventions partition as an index against a scan of the ring ---------------------
def state_records(num_records: int, first_episode: int, rng: np.random.Generator, human: bool) -> dict:
    """50-step episodes, state only; with `human`, a takeover of a few steps in some episodes."""
    fields = step_fields(STATE_DIM, ACTION_DIM, {})
    rec = {name: np.zeros((num_records, *shape), dtype) for name, (shape, dtype) in fields.items()}
    index = np.arange(num_records)
    rec["episode_id"][:] = first_episode + index // (EPISODE_STEPS + 1)
    rec["step"][:] = index % (EPISODE_STEPS + 1)
    rec["truncated"][:] = rec["step"] == EPISODE_STEPS
    rec["state"][:] = rng.standard_normal((num_records, STATE_DIM))
    rec["action_executed"][:] = rng.uniform(-1, 1, (num_records, ACTION_DIM))
    rec["reward"][:] = rng.random(num_records)
    if human:
        episodes = index[-1] // (EPISODE_STEPS + 1) + 1
        start = rng.integers(1, EPISODE_STEPS - HUMAN_TAKEOVER_STEPS, episodes)
        start[rng.random(episodes) >= HUMAN_EPISODE_SHARE] = -HUMAN_TAKEOVER_STEPS  # nobody took over
        begin = start[index // (EPISODE_STEPS + 1)]
        rec["intervention"][:] = (rec["step"] >= begin) & (rec["step"] < begin + HUMAN_TAKEOVER_STEPS)
    return rec


def sample_prior_by_scan(replay: LearnerReplay, batch_size: int, rng: np.random.Generator, gamma: float) -> dict:
    """The baseline: `LearnerReplay.sample` as it was before the intervention index (commit 1b72148), which found
    the interventions partition by a scan of the whole ring on every batch."""
    interventions = np.flatnonzero(replay.online.data["intervention"][: replay.online.size])
    n_demo_rows = replay.demos.size if replay.demos else 0
    n_prior = int(round(batch_size * (1.0 - replay.cfg.online_fraction))) if n_demo_rows + len(interventions) else 0
    n_int = int(rng.binomial(n_prior, len(interventions) / (n_demo_rows + len(interventions)))) if n_prior else 0
    parts = [replay.online.sample(batch_size - n_prior, rng, gamma)]
    if n_int:
        parts.append(replay.online.sample(n_int, rng, gamma, among=interventions))
    if n_prior - n_int:
        parts.append(replay.demos.sample(n_prior - n_int, rng, gamma))
    return concat_batches(parts)


def prior_mix(capacity: int, repeats: int, seed: int) -> dict:
    """Batches of 256 all from the prior data (online_fraction 0), out of a ring of `capacity` records that has
    wrapped; ours and the scan alternate, each with its own generator of the same seed, so they draw alike."""
    rng = np.random.default_rng(seed)
    fields = step_fields(STATE_DIM, ACTION_DIM, {})
    cfg = OmegaConf.create(
        {
            "storage": "ram",
            "capacity": capacity,
            "persist": False,
            "online_fraction": 0.0,
            "interventions_in_prior": True,
        }
    )
    demos = state_records(DEMO_RECORDS, 0, rng, human=False)
    with tempfile.TemporaryDirectory() as tmp:
        replay = LearnerReplay(cfg, fields, Path(tmp), demos)
    written, message = capacity + capacity // 3, 51 * 200  # a wrapped ring, its cursor mid-way
    t = time.perf_counter()
    for lo in range(0, written, message):
        records = state_records(min(message, written - lo), 10**6 + lo // (EPISODE_STEPS + 1), rng, human=True)
        replay.add("actor-0", records)
    fill_s = time.perf_counter() - t
    ours_rng, scan_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    a, b = replay.sample(BATCH, ours_rng, 0.99), sample_prior_by_scan(replay, BATCH, scan_rng, 0.99)
    same = all(np.array_equal(a[k], b[k]) for k in ("reward", "discount", "action", "intervention"))
    same = same and np.array_equal(a["obs"]["state"], b["obs"]["state"])
    ours_ms, scan_ms = [], []
    for _ in range(repeats):  # alternating: the machine's load falls on both alike
        t = time.perf_counter()
        replay.sample(BATCH, ours_rng, 0.99)
        ours_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        sample_prior_by_scan(replay, BATCH, scan_rng, 0.99)
        scan_ms.append((time.perf_counter() - t) * 1000)
    ranks = np.random.default_rng(seed).integers(0, len(replay.online.interventions), 2 * BATCH)
    index = replay.online.interventions
    flags = replay.online.data["intervention"]
    locate_ours = median_ms(lambda: index[ranks], repeats)  # the rows one draw of sample_rows looks at
    locate_scan = median_ms(lambda: np.flatnonzero(flags[: replay.online.size])[ranks], repeats)
    ours, scan = statistics.median(ours_ms), statistics.median(scan_ms)
    return {
        "capacity": capacity,
        "records_written": written,
        "demo_records": DEMO_RECORDS,
        "intervention_rows": len(replay.online.interventions),
        "intervention_share": len(replay.online.interventions) / replay.online.size,
        "fill_s": round(fill_s, 2),
        "batches": repeats,
        "sample_ms_ours_index": round(ours, 4),
        "sample_ms_scan_baseline": round(scan, 4),
        "scan_over_ours": round(scan / ours, 2),
        "locate_ms_ours_index": round(locate_ours, 4),
        "locate_ms_scan_baseline": round(locate_scan, 4),
        "locate_scan_over_ours": round(locate_scan / locate_ours, 1),
        "same_batches": bool(same),
    }


def run_prior_mix(quick: bool, seed: int) -> dict:
    sizes, repeats = ((50_000, 500_000), 20) if quick else ((100_000, 1_000_000, 10_000_000), 50)
    result = {"batch_size": BATCH, "sizes": {}}
    for capacity in sizes:
        figures = prior_mix(capacity, repeats, seed)
        result["sizes"][str(capacity)] = figures
        print(
            f"prior mix, ring of {capacity:>9,}: ours (index) {figures['sample_ms_ours_index']:.3f} ms, "
            f"scan (baseline) {figures['sample_ms_scan_baseline']:.3f} ms, "
            f"scan / ours {figures['scan_over_ours']:.1f}x (finding the {2 * BATCH} candidate rows: "
            f"{figures['locate_ms_ours_index']:.4f} against {figures['locate_ms_scan_baseline']:.4f} ms, "
            f"{figures['locate_scan_over_ours']:.0f}x), "
            f"{figures['intervention_rows']:,} intervention rows, same batches: {figures['same_batches']}"
        )
    write_result("replay_prior_mix", result, quick, measured_code=MEASURED_CODE)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="500 transitions, 5 batches; the prior mix at 50k and 500k"
    )
    parser.add_argument("--prior-mix-only", action="store_true", help="only the prior-data mix's sampling")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the learner runs one torch thread on this 2-core machine
    mix = run_prior_mix(args.quick, args.seed)
    if args.prior_mix_only:
        print(json.dumps(mix))
        return
    n, repeats = (500, 5) if args.quick else (2000, 20)
    a = ours(n, repeats, args.seed)
    for k, v in a.items():
        print(f"ours     {k:<28} {v:,.2f}")
    b = lerobot_replay_figures(num_transitions=n, batch_size=BATCH, repeats=repeats, seed=args.seed)
    for k in ("bytes_per_transition", "add_per_s", "sample_ms_plain", "sample_ms_augmented"):
        print(f"lerobot  {k:<28} {b[k]:,.2f}")
    u8 = lerobot_replay_figures(
        num_transitions=n, batch_size=BATCH, repeats=repeats, seed=args.seed, image_dtype="uint8"
    )
    for k in ("bytes_per_transition", "add_per_s", "sample_ms_plain"):
        print(f"lerobot, uint8 frames (like for like) {k:<28} {u8[k]:,.2f}")
    result = {
        "transitions": n,
        "batch_size": BATCH,
        "cameras": "2 x 128x128x3",
        "raw_frame_bytes": RAW_FRAMES,
        "ours": a,
        "lerobot": {k: v for k, v in b.items() if k != "config"},
        "lerobot_config": b.get("config"),
        "lerobot_uint8": {k: v for k, v in u8.items() if k != "config"},
        "ours_ram_over_raw": a["bytes_per_transition_ram"] / RAW_FRAMES,
        "ours_disk_over_raw": a["bytes_per_transition_disk"] / RAW_FRAMES,
        "lerobot_over_ours_bytes": b["bytes_per_transition"] / a["bytes_per_transition_ram"],
        "speedup_ram_vs_lerobot_plain": b["sample_ms_plain"] / a["sample_ms_ram"],
        "speedup_ram_float_vs_lerobot_plain": b["sample_ms_plain"] / a["sample_ms_ram_float"],
        "speedup_disk_cold_float_vs_lerobot_plain": b["sample_ms_plain"] / a["sample_ms_disk_cold_float"],
        # like for like, uint8 frames stored and sampled on both sides
        "lerobot_uint8_over_ours_bytes": u8["bytes_per_transition"] / a["bytes_per_transition_ram"],
        "speedup_ram_vs_lerobot_uint8_plain": u8["sample_ms_plain"] / a["sample_ms_ram"],
        "speedup_disk_cold_vs_lerobot_uint8_plain": u8["sample_ms_plain"] / a["sample_ms_disk_cold"],
        "load": os.getloadavg()[0],
        "prior_mix": mix["sizes"],
    }
    write_result("replay", result, args.quick, measured_code=MEASURED_CODE)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
