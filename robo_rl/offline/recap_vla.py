"""RECAP on a SmolVLA: the advantage indicator as text in its prompt, the fine-tune by lerobot's own trainer, and
acting with classifier-free guidance over two prompts.

π*0.6 conditions its VLA on the indicator as text ("Advantage: positive"); so does this (policies/advantage.py).

- `finetune_vla`: the labelled episodes exported as a LeRobot dataset whose every frame has its own task: the
  instruction with its action's label appended, or the plain instruction with probability `recap.cfg_dropout` (drawn
  once per frame at export, seeded by `recap.seed`; the flow policy redraws it every step instead). lerobot-train
  then fine-tunes the base (`--policy.path=<base>`, its own config, processors, normalisation statistics, optimiser
  and cosine schedule, the warm-up a tenth of the steps) for `recap.updates` steps of `recap.batch_size`. As with the
  flow policy, each iteration starts again from the base. The result is lerobot-train's `pretrained_model` folder
  with `recap.json` in it: the marker that it is advantage-conditioned, and its guidance scale.
- `GuidedVLA`: a SmolVLA acting for `recap collect` and `recap tune`. A base (no marker) samples as lerobot does,
  from noise this object draws (reseeded per episode, as the flow policy's is). A fine-tuned one integrates SmolVLA's
  own Euler steps over the velocity (1 − w)·v(plain prompt) + w·v(prompt + "Advantage: positive")
  (policies/advantage.py's `PromptGuidance` on policies/vla_flow.py's `LeRobotFlowExpert`). At w = 1 that is the
  conditional policy alone, one VLM pass a chunk; other scales take two.

Only SmolVLA: π0 and π0.5 keep their expert inside a PaliGemma stack that `LeRobotFlowExpert` cannot step.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from policies.advantage import PromptGuidance, labelled_prompts
from policies.vla_flow import is_lerobot_folder_or_hub_id
from robo_rl.config import ConfigError

MARKER = "recap.json"  # in a fine-tuned pretrained_model folder: {"advantage": "prompt", "guidance": w, "train": ...}
VLA_DIR = "vla"  # <labels>/vla/: the fine-tune's lerobot-train run


def fine_tuned_vla(labels: Path) -> Path:
    """Where `recap finetune base=<VLA>` leaves its policy for labels at `labels` (<run>/recap by default)."""
    from robo_rl.offline.smolvla_train import LAST_MODEL

    return Path(labels) / VLA_DIR / LAST_MODEL


def is_vla(path: str | Path) -> bool:
    """Whether `path` names a LeRobot policy (a pretrained_model folder or a hub id) rather than a .pt checkpoint."""
    return is_lerobot_folder_or_hub_id(str(path))


def read_marker(folder: Path) -> dict | None:
    """The fine-tune's marker of a pretrained_model folder, None for a VLA RECAP has not fine-tuned."""
    path = Path(folder) / MARKER
    return json.loads(path.read_text()) if path.is_file() else None


def write_guidance(folder: Path, guidance: float, **more) -> None:
    """Set a fine-tuned VLA's own guidance scale (and any more fields) in its marker."""
    marker = read_marker(folder)
    if marker is None:
        raise ConfigError(f"recap tune: {folder} is not advantage-conditioned (run recap finetune base=<it> first)")
    path = Path(folder) / MARKER
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**marker, **more, "guidance": float(guidance)}, indent=2))
    tmp.replace(path)


def frame_prompts(episodes, labels, task: str | None, rate: float, seed: int) -> list[list[str]]:
    """Per episode, the prompt of each of its frames (records 0..T−1: the observations an action was taken from):
    its instruction (else `task`) with that action's label, the label dropped with probability `rate`."""
    generator = torch.Generator().manual_seed(int(seed))
    out = []
    for ep, ids in zip(episodes, labels, strict=True):
        text = ep.instruction or task
        if not text:
            raise ConfigError(
                f"recap finetune: episode {int(ep.records['episode_id'][0])} of {ep.source or 'the data'} has no "
                "instruction: give the VLA's task text, task=<text>"
            )
        frames = ids[: len(ep)]  # the final record starts no action and is no frame
        out.append(labelled_prompts([text] * len(frames), frames, rate, generator))
    return out


def check_base(folder: Path) -> dict:
    """A SmolVLA's config.json; another policy refused in one line."""
    config = json.loads((folder / "config.json").read_text())
    if config.get("type") != "smolvla":
        raise ConfigError(
            f"recap finetunes a SmolVLA through its prompt; {folder} is a {config.get('type')} policy (pi0 and pi05 "
            "keep their action expert inside a PaliGemma stack this cannot sample with guidance)"
        )
    return config


def finetune_vla(
    sidecar: Path,
    base: str | Path,
    out: Path,
    settings,
    task: str | None = None,
    fps: int = 10,
    device: str = "cpu",
    progress: bool = True,
    in_process: bool = False,
    threads: int | None = None,
    extra: list[str] = (),
) -> tuple[Path, dict]:
    """Fine-tune the SmolVLA `base` on the labels at `sidecar` with lerobot-train, in `out` (replaced: it is made
    from the labels); returns the fine-tuned pretrained_model folder and the summary kept in its marker. `extra`:
    more lerobot-train arguments."""
    from policies.lerobot_base import resolve_pretrained
    from robo_rl.data.datasets.lerobot_v3 import export_lerobot
    from robo_rl.offline.recap_train import labelled_episodes
    from robo_rl.offline.smolvla_train import LAST_MODEL, LOG, check_instructions, lerobot_train_args, run_lerobot_train

    folder = resolve_pretrained(base)
    config = check_base(folder)
    episodes, labels, meta = labelled_episodes(sidecar, progress)
    prompts = frame_prompts(episodes, labels, task, settings.cfg_dropout, settings.seed)
    texts = sorted({p for rows in prompts for p in rows})
    check_instructions(texts, config.get("vlm_model_name", ""), int(config.get("tokenizer_max_length", 48)))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    dataset = export_lerobot(episodes, out / "dataset", fps=fps, frame_tasks=lambda i, _: prompts[i], progress=progress)
    # the base's own optimiser and cosine schedule, its warm-up and decay fitted to this fine-tune's steps (SmolVLA's
    # are 1,000 and 30,000: a short fine-tune would run at warm-up rates throughout)
    schedule = [
        f"--policy.scheduler_warmup_steps={max(1, settings.updates // 10)}",
        f"--policy.scheduler_decay_steps={settings.updates}",
    ]
    use_base_statistics(dataset, folder)
    args = lerobot_train_args(
        dataset, out, "", False, None, None, settings.updates, settings.batch_size, device, settings.seed, 0,
        policy_path=str(folder), extra=[*schedule, *extra],
    )  # fmt: skip
    start = time.perf_counter()
    wall, peak_gb = run_lerobot_train(args, out / LOG, in_process=in_process, threads=threads)
    model = out / LAST_MODEL
    given = np.concatenate([np.asarray([p.endswith("Advantage: positive") for p in rows]) for rows in prompts])
    plain = np.concatenate([np.asarray(["Advantage:" not in p for p in rows]) for rows in prompts])
    summary = {
        "updates": settings.updates,
        "batch_size": settings.batch_size,
        "train_s": time.perf_counter() - start,
        "lerobot_train_wall_s": wall,
        "peak_rss_gb": peak_gb,
        "frames": int(len(given)),
        "episodes": len(episodes),
        "positive_frames": float(given.mean()),
        "dropout_rate": float(plain.mean()),
        "value_version": meta.get("value_version"),
        "base": str(folder),
        "labels": str(sidecar),
        "dataset": str(dataset),
        "guidance": settings.guidance,
    }
    (model / MARKER).write_text(json.dumps({"advantage": "prompt", "guidance": settings.guidance, "train": summary}))
    return model, summary


def use_base_statistics(dataset: Path, folder: Path) -> dict:
    """Write the base's own normalisation statistics (its saved normaliser's) into the exported dataset's
    meta/stats.json, for the state and the action. lerobot-train normalises a fine-tune by its dataset's
    statistics; RECAP's data (one task, the policy's own actions) has others (Meta-World pick-place: action mean 0.47
    against the base's 0.20, std 0.41 against 0.60), so the fine-tune would start from a policy that reads its state
    and writes its actions on another scale, not from the base. Returns the features replaced."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
    if not files:
        raise ConfigError(f"recap finetune: the base {folder} has no saved normaliser (policy_preprocessor_*)")
    base = load_file(files[0])
    path = dataset / "meta" / "stats.json"
    stats = json.loads(path.read_text())
    replaced = {}
    for feature, values in stats.items():
        mine = {k: base[f"{feature}.{k}"] for k in values if f"{feature}.{k}" in base}
        if feature in ("observation.state", "action") and mine:
            stats[feature] = {**values, **{k: v.tolist() for k, v in mine.items()}}
            replaced[feature] = sorted(mine)
    path.write_text(json.dumps(stats, indent=4))
    return replaced


class GuidedVLA:
    """A SmolVLA as `recap collect` acts with it: a `policies.base.BasePolicy` whose chunks are sampled from noise
    it draws itself (`reseed` per episode), with guidance `w` where it is advantage-conditioned. `model` is itself:
    the attribute the flow policy's callers read and set `guidance` and `advantage` on."""

    def __init__(self, base, conditioned: bool, guidance: float = 1.0) -> None:
        from policies.vla_flow import LeRobotFlowExpert

        self.base, self.name = base, base.name
        self.chunk_size, self.action_dim, self.execute_steps = base.chunk_size, base.action_dim, base.chunk_size
        self.action_range = base.action_range
        self.advantage = "prompt" if conditioned else None
        self.expert = LeRobotFlowExpert(base) if conditioned else None
        self.guidance = float(guidance)
        self.rng = np.random.default_rng(0)
        if base.noise_shape is None:
            raise ConfigError(f"recap acts with a SmolVLA from its own noise; {base.name} takes none")

    @property
    def model(self) -> GuidedVLA:
        return self

    def reset(self) -> None:
        self.base.reset()

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(int(seed))

    def predict_chunk(self, obs: dict) -> np.ndarray:
        noise = self.rng.standard_normal(self.base.noise_shape).astype(np.float32)
        if self.expert is None:
            return self.base.predict_chunk(obs, noise=noise)
        from policies.lerobot_base import one_row

        batch = one_row({**obs, "instruction": obs.get("instruction") or self.base.task})
        sampler = PromptGuidance(self.expert, self.guidance)
        x = sampler.sample(batch, torch.from_numpy(noise)[None], self.expert.steps)
        return self.expert.to_actions(x[0])[: self.chunk_size].numpy()


def load_guided_vla(path: str | Path, env, guidance: float | None = None, task: str | None = None) -> GuidedVLA:
    """The VLA at `path` acting on `env` for RECAP: advantage-conditioned (sampled at its marker's guidance, or
    `guidance`) where `recap finetune` made it, else as it is (guidance 1 only). `task`: its task text where the
    env's observation has no instruction."""
    from policies.lerobot_base import LeRobotBase, resolve_pretrained

    folder = resolve_pretrained(path)
    check_base(folder)
    marker = read_marker(folder)
    if marker is None and guidance not in (None, 1.0):
        raise ConfigError(f"guidance={guidance}: {path} is not advantage-conditioned (run recap finetune first)")
    if task is None:  # the env's own instruction, where it gives one
        obs, _ = env.reset(seed=0)
        task = obs.get("instruction")
    try:
        base = LeRobotBase.load(folder, env.observation_space, env.action_space.shape[0], task=task)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    w = guidance if guidance is not None else (marker or {}).get("guidance", 1.0)
    return GuidedVLA(base, marker is not None, w)
