"""`robo-rl vla train` on this machine: seconds per lerobot-train step of the bench-size SmolVLA (`vlm=reduced`), its
peak memory, and how many steps an hour buys; against the tiny test-size SmolVLA measured in the same run.

Data: scripted pick_cube demonstrations with one front camera, exported as a LeRobot dataset (robo_rl's own demo and
export code). Each size trains once through the command's own code (a child lerobot-train process, as a user runs
it) with lerobot logging every step: a step's time is lerobot's own update + data time (the median after the first,
which also starts the data loader); start-up (imports, dataset, model build, checkpoint) is the rest of the wall
time, reported apart. An hour's steps: (3600 s - start-up) / step time. Peak memory: the largest process's resident
set. The measured size runs with torch's threads (every core) and with one (`threads=1`): on a 2-core machine shared
with other work, threads spinning on busy cores can cost more than they add.

    python bench/vla_train.py                 # reduced, 50 steps, torch's threads and one; tiny, 10 steps
    python bench/vla_train.py --quick         # tiny only (about a minute)
    python bench/vla_train.py --vlm smolvlm2_500m --device cuda   # SmolVLM2-500M's architecture on a GPU

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

TASK = "pick up the cube"
CHUNK = 10  # actions per chunk: pick_cube's episodes are 50 steps; SmolVLA's default of 50 would span them whole
HOUR_S = 3600.0


def export_demos(folder: Path, episodes: int, image_size: int) -> Path:
    from robo_rl.config import load_config
    from robo_rl.data.datasets import split_episodes
    from robo_rl.data.datasets.lerobot_v3 import export_lerobot
    from robo_rl.data.demos import load_or_make_demos

    cfg = load_config(
        [
            "env=pick_cube",
            "env.cameras=[front]",
            f"env.image_size={image_size}",
            f"demos.num_episodes={episodes}",
            f"cache_dir={folder / 'cache'}",
        ]
    )
    batch, _, _ = load_or_make_demos(cfg, progress=False)
    return export_lerobot(split_episodes(batch, partition="demos"), folder / "ds", task=TASK, progress=False)


STEP_LINE = re.compile(r"step:(\d+) .*?updt_s:([\d.]+) data_s:([\d.]+)")  # lerobot-train's log at log_freq=1
PARAMS_LINE = re.compile(r"num_(learnable|total)_params=(\d+)")


def timed_training(dataset: Path, work: Path, vlm: str, steps: int, args, threads: int | None = None) -> dict:
    """One `robo-rl vla train` run in a child process: lerobot's own time of each step (update and data), the run's
    wall time, the rest of it (start-up: imports, dataset, model build, checkpoint) and the child's peak memory."""
    from robo_rl.offline.smolvla_train import LOG, SUMMARY, train_smolvla

    out = work / f"{vlm}_{threads or 'all'}_threads"
    extra = [f"--policy.chunk_size={CHUNK}", f"--policy.n_action_steps={CHUNK}", "--log_freq=1"]
    train_smolvla(
        dataset,
        out,
        vlm=vlm,
        steps=steps,
        batch_size=args.batch_size,
        device=args.device,
        workers=args.workers,
        extra=extra,
        threads=threads,
    )
    summary = json.loads((out / SUMMARY).read_text())
    config = json.loads((out / "lerobot" / "checkpoints" / "last" / "pretrained_model" / "config.json").read_text())
    text = (out / LOG).read_text()
    logged = {int(m[1]): (float(m[2]), float(m[3])) for m in STEP_LINE.finditer(text)}
    params = {m[1]: int(m[2]) for m in PARAMS_LINE.finditer(text)}
    if len(logged) < steps:
        raise SystemExit(f"lerobot-train logged {len(logged)} of {steps} steps: its log format changed?")
    later = [logged[k] for k in sorted(logged)[1:]]  # the first step also starts the data loader's workers
    update_s = float(np.median([u for u, _ in later]))
    step_s = float(np.median([u + d for u, d in later]))
    startup = summary["wall_s"] - sum(u + d for u, d in logged.values())
    steps_per_hour = int((HOUR_S - startup) / step_s)
    return {
        "vlm": vlm,
        "threads": threads or os.cpu_count(),
        "steps": steps,
        "wall_s": summary["wall_s"],
        "s_per_step_median": round(step_s, 3),
        "update_s_median": round(update_s, 3),
        "startup_s": round(startup, 1),
        "steps_per_hour": steps_per_hour,
        "samples_per_hour": steps_per_hour * args.batch_size,
        "peak_rss_gb": summary["peak_rss_gb"],
        "params": params.get("total"),
        "params_trained": params.get("learnable"),
        "image_size": config["resize_imgs_with_padding"],
        "chunk_size": config["chunk_size"],
        "text_layers_kept": config["num_vlm_layers"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny size only, a few steps")
    parser.add_argument("--vlm", default="reduced", help="the size measured: reduced | smolvlm2_500m")
    parser.add_argument("--steps", type=int, default=50, help="lerobot-train steps of the measured size")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1, help="lerobot's data loader processes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, default=20, help="pick_cube demonstrations in the dataset")
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_vla_train_") as tmp:
        work = Path(tmp)
        image_size = 32 if args.quick else 64
        dataset = export_demos(work, 3 if args.quick else args.episodes, image_size)
        sizes = [timed_training(dataset, work, "tiny", 10, args)]
        if not args.quick:
            sizes.append(timed_training(dataset, work, args.vlm, args.steps, args))
            sizes.append(timed_training(dataset, work, args.vlm, args.steps, args, threads=1))
        frames = json.loads((dataset / "meta" / "info.json").read_text())["total_frames"]
    result = {
        "device": args.device,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "dataset_frames": frames,
        "camera_px": image_size,
        "sizes": sizes,
        "bench_wall_s": round(time.perf_counter() - start, 1),
        "children_peak_rss_gb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2),
    }
    tiny = sizes[0]
    for size in sizes:
        ratio = size["s_per_step_median"] / tiny["s_per_step_median"]
        print(
            f"{size['vlm']:>14}, {size['threads']} thread(s): {size['s_per_step_median']:.2f} s/step "
            f"({ratio:.1f}x tiny), start-up {size['startup_s']} s, "
            f"{size['steps_per_hour']} steps/hour at batch {args.batch_size}, peak RSS {size['peak_rss_gb']} GB, "
            f"{size['params'] / 1e6:.1f}M parameters ({size['params_trained'] / 1e6:.1f}M trained)"
        )
    measured = ["robo_rl/offline/smolvla_train.py", "policies/smolvlm_backbone.py", "bench/vla_train.py"]
    path = write_result("vla_train", result, quick=args.quick, measured_code=measured)
    print(f"wrote {path}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
