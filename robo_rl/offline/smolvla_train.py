"""Train a SmolVLA with lerobot's own trainer (`lerobot-train`) on a LeRobot dataset robo_rl exported.

lerobot-train does the training: its `TrainPipelineConfig`, its SmolVLA processors (the instruction tokenised, the
state and action normalised by the dataset's statistics), its optimiser and schedule, its checkpoint. This module
only chooses its arguments and lays out a run folder:

    <out>/vlm/                                      a SmolVLM architecture (a size of policies/smolvlm_backbone.py)
    <out>/lerobot/                                  lerobot-train's output_dir (its checkpoints, train_config.json)
    <out>/lerobot/checkpoints/last/pretrained_model  the trained policy: policy.base.kind=lerobot policy.base.path=<it>
    <out>/vla_train.json, <out>/lerobot_train.log   the arguments, wall time and peak memory; lerobot-train's output

The VLM comes from a local folder, never the hub unless named: `vlm=tiny|reduced|smolvlm2_500m` writes that
architecture (random init, `load_vlm_weights=false`); `vlm=<folder or hub id>` loads its weights
(`load_vlm_weights=true`, e.g. HuggingFaceTB/SmolVLM2-500M-Video-Instruct); `policy_path=lerobot/smolvla_base` (or
its folder) fine-tunes the whole pretrained SmolVLA instead.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from robo_rl.errors import UserError

LAST_MODEL = Path("lerobot") / "checkpoints" / "last" / "pretrained_model"
SUMMARY, LOG = "vla_train.json", "lerobot_train.log"
# lerobot-train's own entry point, after hiding the torchcodec traceback lerobot prints on its working PyAV fallback
LEROBOT_TRAIN = (
    "import sys; from robo_rl.quiet import quiet_library_noise; quiet_library_noise(); sys.argv[0] = 'lerobot-train'; "
    "from lerobot.scripts.lerobot_train import main; main()"
)
# SmolVLA's own default where the VLM is a folder or hub id of ours to keep: lerobot's config field
DEFAULT_TOKENIZER_MAX_LENGTH = 48


class VLATrainError(UserError, ValueError):
    """A dataset, VLM or output folder `robo-rl vla train` cannot use; the text names it."""


def dataset_layout(root: Path) -> dict:
    """A LeRobot v3 dataset's cameras (name -> (H, W)), state and action sizes and instructions, from its meta/."""
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise VLATrainError(
            f"dataset={root} is not a LeRobot v3 dataset (no meta/info.json): export one with "
            "robo-rl data convert <run or store> <folder> to=lerobot"
        )
    features = json.loads(info_path.read_text())["features"]
    cameras = {
        key.removeprefix("observation.images."): tuple(f["shape"][:2])
        for key, f in features.items()
        if key.startswith("observation.images.") and f["dtype"] in ("video", "image")
    }
    if not cameras:
        raise VLATrainError(f"dataset={root} has no camera (observation.images.*): SmolVLA needs at least one")
    if "action" not in features or "observation.state" not in features:
        raise VLATrainError(f"dataset={root} lacks 'action' or 'observation.state': SmolVLA needs both")
    import pandas as pd

    tasks = [str(t) for t in pd.read_parquet(root / "meta" / "tasks.parquet").index]
    return {
        "cameras": cameras,
        "state_dim": features["observation.state"]["shape"][0],
        "action_dim": features["action"]["shape"][0],
        "tasks": tasks,
    }


def prepare_vlm(vlm: str, out: Path, tasks: list[str]) -> tuple[str, bool, int | None, int | None]:
    """(vlm_model_name, load_vlm_weights, image size, VLM layers SmolVLA keeps) for `vlm`: a size of
    policies.smolvlm_backbone written to <out>/vlm (random init), else a local folder or hub id with weights."""
    from policies.smolvlm_backbone import SIZES, image_size_of, write_smolvlm

    if vlm in SIZES:
        folder = write_smolvlm(out / "vlm", vlm, tasks).resolve()
        layers = SIZES[vlm]["text"]["num_hidden_layers"]
        return str(folder), False, SIZES[vlm]["image_size"], min(layers, 16)  # SmolVLA keeps 16 of the 500M's 32
    path = Path(vlm).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise VLATrainError(f"vlm={vlm} is a folder without config.json: not a SmolVLM (transformers) folder")
        return str(path.resolve()), True, image_size_of(path), None
    if path.exists() or vlm.count("/") != 1:
        raise VLATrainError(f"vlm={vlm} is neither a size ({', '.join(SIZES)}), a local VLM folder, nor a hub id")
    return vlm, True, None, None  # a hub id: lerobot reads it from the Hugging Face cache or downloads it


def check_instructions(tasks: list[str], vlm_name: str, max_length: int) -> None:
    """Refuse an instruction longer than SmolVLA's `tokenizer_max_length`: lerobot's tokenizer step would cut it
    silently. Counted with the VLM's own tokenizer, the instruction ending in a newline as SmolVLA's processor does."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(vlm_name, local_files_only=True)
    except OSError:  # a hub id not downloaded yet: lerobot will fetch it, and its tokenizer step truncates
        return
    for task in tasks:
        n = len(tokenizer(task if task.endswith("\n") else task + "\n")["input_ids"])
        if n > max_length:
            raise VLATrainError(
                f"instruction '{task[:60]}' is {n} tokens, SmolVLA's tokenizer_max_length is {max_length}: shorten "
                f"it or set tokenizer_max_length={n}"
            )


def widths_that_fit(layout: dict, extra: list[str]) -> list[str]:
    """SmolVLA pads the state and action to `max_state_dim` / `max_action_dim` (32 each by default) and passes a wider
    one on uncut, to fail in its projection at the first step: a new SmolVLA on a wider dataset (Meta-World's 39-d
    state) gets widths that fit, unless the command line sets them."""
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig

    fields = SmolVLAConfig.__dataclass_fields__
    out = []
    for key, width in (("max_state_dim", layout["state_dim"]), ("max_action_dim", layout["action_dim"])):
        if width > fields[key].default and not any(a.startswith(f"--policy.{key}=") for a in extra):
            out.append(f"--policy.{key}={width}")
    return out


def lerobot_train_args(
    dataset: Path,
    out: Path,
    vlm_name: str,
    load_vlm_weights: bool,
    image_size: int | None,
    vlm_layers: int | None,
    steps: int,
    batch_size: int,
    device: str,
    seed: int,
    workers: int,
    policy_path: str | None = None,
    extra: list[str] = (),
) -> list[str]:
    """lerobot-train's command-line arguments for SmolVLA on `dataset`, everything local and offline."""
    args = [f"--policy.path={policy_path}"] if policy_path else ["--policy.type=smolvla"]
    if not policy_path:
        args += [f"--policy.vlm_model_name={vlm_name}", f"--policy.load_vlm_weights={str(load_vlm_weights).lower()}"]
        if image_size:  # the vision tower's own size: SmolVLA pads and resizes every camera to it
            args.append(f"--policy.resize_imgs_with_padding=[{image_size},{image_size}]")
        if vlm_layers:
            args.append(f"--policy.num_vlm_layers={vlm_layers}")
        if not load_vlm_weights:  # SmolVLA trains its action expert alone by default: a random VLM must learn too
            args += ["--policy.train_expert_only=false", "--policy.freeze_vision_encoder=false"]
    args += [
        f"--dataset.repo_id=local/{dataset.name}",
        f"--dataset.root={dataset}",
        "--dataset.video_backend=pyav",  # torchcodec's libraries do not load everywhere; pyav always does
        "--policy.push_to_hub=false",
        f"--policy.device={device}",
        "--wandb.enable=false",
        f"--output_dir={out / 'lerobot'}",
        f"--steps={steps}",
        f"--batch_size={batch_size}",
        f"--num_workers={workers}",
        f"--save_freq={steps}",  # one checkpoint, the last
        f"--log_freq={max(1, min(200, steps // 10))}",
        f"--seed={seed}",
    ]
    return args + list(extra)


def run_lerobot_train(
    args: list[str], log: Path, in_process: bool = False, threads: int | None = None
) -> tuple[float, float]:
    """Run lerobot-train with `args`: in a child process (its memory returned when it ends; its output shown and
    kept in `log`), or in this one (a test that has imported SmolVLA already saves its import). `threads`: torch's
    CPU threads (None: its default, every core). Returns (wall seconds, peak resident memory of the largest process,
    GB)."""
    start = time.perf_counter()
    if in_process:
        import torch
        from lerobot.scripts import lerobot_train

        argv, sys.argv, own_threads = sys.argv, ["lerobot-train", *args], torch.get_num_threads()
        torch.set_num_threads(threads or own_threads)
        try:
            lerobot_train.main()
        finally:
            sys.argv = argv
            torch.set_num_threads(own_threads)
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    else:
        child = subprocess.Popen(
            [sys.executable, "-c", LEROBOT_TRAIN, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else None,  # torch's intra-op threads
        )
        with open(log, "wb") as kept:
            while chunk := os.read(child.stdout.fileno(), 65536):  # raw bytes: tqdm's carriage returns kept
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                kept.write(chunk)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest of all children so far
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            raise VLATrainError(f"lerobot-train failed (exit {child.returncode}): its output is in {log}")
        peak_kb = usage.ru_maxrss
    return time.perf_counter() - start, peak_kb / 2**20


def train_smolvla(
    dataset: str | Path,
    out: str | Path,
    vlm: str = "reduced",
    steps: int = 6000,  # vlm=reduced: about an hour on a 2-core CPU (bench/results/vla_train.json)
    batch_size: int = 8,
    device: str = "cpu",
    seed: int = 1000,
    workers: int = 2,
    policy_path: str | None = None,
    tokenizer_max_length: int = DEFAULT_TOKENIZER_MAX_LENGTH,
    extra: list[str] = (),
    in_process: bool = False,
    threads: int | None = None,
) -> Path:
    """Train SmolVLA on the LeRobot dataset `dataset` into the run folder `out`; return its pretrained_model."""
    dataset, out = Path(dataset).expanduser().resolve(), Path(out).expanduser().resolve()
    layout = dataset_layout(dataset)
    if out.exists() and any(out.iterdir()):
        raise VLATrainError(f"out={out} exists and is not empty: name a new run folder")
    out.mkdir(parents=True, exist_ok=True)
    vlm_name, load_weights, image_size, layers = (None, False, None, None)
    if not policy_path:
        vlm_name, load_weights, image_size, layers = prepare_vlm(vlm, out, layout["tasks"])
        check_instructions(layout["tasks"], vlm_name, tokenizer_max_length)
    if not policy_path:
        extra = [f"--policy.tokenizer_max_length={tokenizer_max_length}", *widths_that_fit(layout, extra), *extra]
    args = lerobot_train_args(
        dataset,
        out,
        vlm_name,
        load_weights,
        image_size,
        layers,
        steps,
        batch_size,
        device,
        seed,
        workers,
        policy_path,
        extra,
    )
    wall_s, peak_gb = run_lerobot_train(args, out / LOG, in_process, threads)
    model = out / LAST_MODEL
    summary = {
        "dataset": str(dataset),
        "layout": layout,
        "vlm": vlm if not policy_path else None,
        "policy_path": policy_path,
        "steps": steps,
        "batch_size": batch_size,
        "device": device,
        "threads": threads,
        "lerobot_train_args": args,
        "wall_s": round(wall_s, 1),
        "peak_rss_gb": round(peak_gb, 2),
        "in_process": in_process,
        "pretrained_model": str(model),
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return model
