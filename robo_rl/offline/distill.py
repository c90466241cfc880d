"""One-step distillation (`robo-rl distill`): a K-step flow/diffusion policy, as trained or as DSRL fine-tuned it,
copied into a flow policy that makes the same chunk in one step, for an actor at the control rate.

The teacher is a deterministic map of its input noise z ~ N(0, I) [chunk, A]:

    a base (a `robo-rl bc policy=flow|diffusion` checkpoint)   a = π_K(s, z)
    a DSRL run (its noise actor on its base)                 a = π_K(s, w(s, z)),  w = b·tanh(μ(s) + σ(s)·z)

The student is a flow of the same network, warm-started from the teacher's weights where it is one (else fresh),
sampled in one Euler step, and regressed onto the teacher's chunks for the same (s, z): a = π_1(s, z) ≈ teacher.
Being a map of the same noise, it keeps the teacher's distribution (not only its mean), and it loads wherever a
flow policy does (a DSRL or residual base, `policy=flow` for `robo-rl eval`). States come from the demonstrations
and from the teacher's own rollouts in the sim (`distill.rollout_episodes`), where it will act.
Writes `<run>/distill/policy.pt` and `report.json` (the teacher's and the student's success and latency).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from policies.flow import ChunkGenerator, GenerativeBase
from robo_rl.config import ConfigError
from robo_rl.configs.eval import DistillConfig
from robo_rl.configs.typed import config_from
from robo_rl.offline.bc import evaluate_base, save_atomic


class DSRLTeacher(GenerativeBase):
    """A DSRL run's policy as a map of z: its noise actor's reparameterised noise, denoised by its base."""

    def __init__(self, policy) -> None:
        super().__init__(policy.base.model, execute_steps=policy.execute_steps, action_range=policy.base.action_range)
        self.noise_policy = policy.eval()

    def cpu_sampler(self):
        return None  # its chunks are the noise actor's, not the bare sampler's

    def chunks(self, obs: dict, z: torch.Tensor) -> torch.Tensor:
        p = self.noise_policy
        mean, log_std = p.actor.distribution_params(p.encoder(obs))
        w = p.noise_bound * torch.tanh(mean + log_std.exp() * z.flatten(1))
        return self.model.sample(self.model.features(obs), w.view(len(w), *p.noise_shape))


def base_chunks(base: GenerativeBase, obs: dict, z: torch.Tensor) -> torch.Tensor:
    """The teacher's chunks for a batch of observations and noises (no gradients)."""
    with torch.no_grad():
        return base.chunks(obs, z)


def is_run_folder(path: Path) -> bool:
    """A training run's folder (a DSRL teacher), not a checkpoint file or a bc run's folder."""
    return path.is_dir() and (path / "checkpoints").is_dir() and (path / "config.yaml").is_file()


def dsrl_run_config(path: Path):
    """A DSRL run folder's saved config, or a ConfigError naming the run it is instead."""
    from robo_rl.config import load_saved_config

    cfg = load_saved_config(path / "config.yaml")
    if not str(cfg.policy.get("_target_", "")).endswith("NoisePolicy"):
        raise ConfigError(
            f"{path} is a {cfg.algo.get('name', '?')} run: distill takes a flow/diffusion "
            "checkpoint (bc/policy.pt) or a DSRL run"
        )
    return cfg


def check_teacher(path: Path) -> None:
    """What `checkpoint=` names can be distilled, or a ConfigError saying why not: asked before a run folder is made
    (no env, no model built)."""
    if is_run_folder(path):
        dsrl_run_config(path)
    else:
        teacher_payload(path)


def teacher_payload(path: Path) -> dict:
    """A flow/diffusion checkpoint's payload (a file, or a bc run folder's bc/policy.pt), or a ConfigError naming why
    it cannot be distilled; needs no env, so `robo-rl distill` asks before it makes a run folder."""
    from policies.bc import BCCheckpointError, read_bc_checkpoint

    try:
        payload = read_bc_checkpoint(path)
    except BCCheckpointError as e:
        raise ConfigError(str(e)) from None
    if payload["kind"] == "bc_policy":
        raise ConfigError(
            f"{payload['path']} is an MLP policy (one step already): distill takes a flow or diffusion "
            "policy, or a DSRL run"
        )
    return payload


def load_teacher(path: str | Path, env) -> tuple[GenerativeBase, dict]:
    """The teacher of `checkpoint=`: a generative checkpoint (a file, or a run folder's bc/policy.pt), or a DSRL
    run folder (its latest checkpoint's noise actor on its base). Returns it with what it is, for the report."""
    path = Path(path)
    if is_run_folder(path):
        from robo_rl.config import make_policy
        from robo_rl.runs import load_resume_checkpoint

        cfg = dsrl_run_config(path)
        policy = make_policy(cfg, env)
        payload, _ = load_resume_checkpoint(str(path))
        if payload is None:
            raise ConfigError(f"{path} has no readable checkpoint to distil")
        policy.load_state_dict(payload["algo"]["policy"])
        if not isinstance(getattr(policy.base, "model", None), ChunkGenerator):
            raise ConfigError(f"{path}: only a DSRL run on a robo_rl flow/diffusion base can be distilled")
        return DSRLTeacher(policy), {"kind": "dsrl", "path": str(payload["path"]), "base": str(cfg.policy.base.path)}
    from policies.bc import BCCheckpointError
    from policies.flow import load_generative_base

    payload = teacher_payload(path)

    try:
        base = load_generative_base(
            payload, env.observation_space, env.action_space.shape[0], list(getattr(env, "state_names", ()))
        )
    except BCCheckpointError as e:
        raise ConfigError(str(e)) from None
    return base, {"kind": base.model.kind, "path": payload["path"], "steps": base.model.steps}


def collect_states(cfg, env, teacher: GenerativeBase, episodes: int, progress: bool) -> dict[str, np.ndarray]:
    """Observations to distil on: the demonstrations' and the teacher's own rollouts' (`episodes` in the sim)."""
    from policies.base import ChunkedBase
    from robo_rl.data.demos import load_or_make_demos, rollout_episode

    states, images = [], {}
    demos, _, _ = load_or_make_demos(cfg, progress=False)
    if demos is not None:
        states.append(np.asarray(demos["state"], np.float32))
        for k, v in demos.items():
            if k.startswith("image/"):
                images.setdefault(k[6:], []).append(np.asarray(v))
    chunked = ChunkedBase(teacher)
    for i in tqdm(range(episodes), desc="teacher rollouts", unit="ep", disable=not progress):
        chunked.reset()
        records, _ = rollout_episode(env, chunked.act, int(cfg.seed) + 7_000_000 + i, i)
        states.append(np.stack([r["state"] for r in records]).astype(np.float32))
        for cam in env.observation_space["images"].spaces:
            images.setdefault(cam, []).append(np.stack([r[f"image/{cam}"] for r in records]))
    if not states:
        raise ConfigError(
            "distill needs states: demonstrations (demos.num_episodes or demos.path) or distill.rollout_episodes > 0"
        )
    return {"state": np.concatenate(states), "images": {k: np.concatenate(v) for k, v in images.items()}}


DEFAULT_ITERATIONS = DistillConfig.iterations  # what distill.iterations: null (an older run's config) means


def make_student(teacher: GenerativeBase) -> ChunkGenerator:
    """A one-step flow of the teacher's network, warm-started from a flow teacher's weights (a one-step flow's
    already)."""
    config = {**teacher.model.config, "kind": "flow", "steps": 1}
    student = ChunkGenerator(**config)
    if teacher.model.kind == "flow":
        student.load_state_dict(teacher.model.state_dict())
    else:
        student.state_mean.copy_(teacher.model.state_mean)
        student.state_std.copy_(teacher.model.state_std)
    return student


def train_student(
    student: ChunkGenerator, teacher: GenerativeBase, data: dict, dcfg, seed: int, progress: bool
) -> dict:
    """Regress the student onto the teacher's chunks for `distill.iterations` steps (null, as run folders saved
    before it had a number hold: DEFAULT_ITERATIONS)."""
    iterations = int(dcfg.iterations or DEFAULT_ITERATIONS)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    n = len(data["state"])
    optim = torch.optim.Adam(student.parameters(), lr=float(dcfg.lr))
    student.train()
    losses = []
    start = time.perf_counter()
    bar = tqdm(range(iterations), desc="distilling", unit="it", disable=not progress)
    for _ in bar:
        rows = rng.integers(0, n, int(dcfg.batch_size))
        obs = {
            "state": torch.from_numpy(data["state"][rows]),
            "images": {k: torch.from_numpy(v[rows]) for k, v in data["images"].items()},
        }
        z = torch.randn(len(rows), *student.noise_shape)
        target = base_chunks(teacher, obs, z)
        loss = (student.sample(student.features(obs), z, steps=1) - target).pow(2).mean()
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        losses.append(loss.item())
        if len(losses) % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.5f}")
    bar.close()
    student.eval()
    return {
        "iterations": iterations,
        "final_loss": float(np.mean(losses[-50:])),
        "train_s": time.perf_counter() - start,
        "states": int(n),
    }


def distill(cfg, run_dir: str | Path, progress: bool = True) -> dict:
    """`robo-rl distill checkpoint=<teacher>`: train the one-step student, evaluate both, write the report."""
    from omegaconf import OmegaConf

    from robo_rl.config import make_env

    if not cfg.checkpoint:
        raise ConfigError("distill needs checkpoint=<a flow/diffusion bc/policy.pt, its run folder, or a DSRL run>")
    torch.set_num_threads(int(cfg.torch_threads))
    out = Path(run_dir) / "distill"
    out.mkdir(parents=True, exist_ok=True)
    dcfg = config_from(DistillConfig, OmegaConf.to_container(cfg.distill, resolve=True), "distill")
    env = make_env(cfg)
    try:
        teacher, about = load_teacher(cfg.checkpoint, env)
        data = collect_states(cfg, env, teacher, dcfg.rollout_episodes, progress)
        student = make_student(teacher)
        trained = train_student(student, teacher, data, dcfg, int(cfg.seed), progress)
        summary = {"distilled_from": about, "train": trained}
        payload = student.checkpoint(
            execute_steps=teacher.execute_steps, distilled_from=about, action_range=_range_dict(teacher.action_range)
        )
        save_atomic(payload, out / "policy.pt")
        episodes = dcfg.eval_episodes
        if episodes > 0:
            one_step = GenerativeBase(copy.deepcopy(student), execute_steps=teacher.execute_steps)
            for name, base in (("teacher", teacher), ("student", one_step)):
                result = evaluate_base(env, base, episodes, int(cfg.eval.seed), base.execute_steps, progress)
                summary[name] = {k: v for k, v in result.items() if k != "per_episode"}
            t, s = summary["teacher"], summary["student"]
            summary["speedup_p50"] = t["base_inference_ms_p50"] / s["base_inference_ms_p50"]
            summary["success_points"] = 100 * (s["success_rate"] - t["success_rate"])
    finally:
        env.close()
    summary["checkpoint"] = str(out / "policy.pt")
    (out / "report.json").write_text(json.dumps(summary, indent=2))
    return summary


def _range_dict(rng) -> dict | None:
    if rng is None:
        return None
    low, high = (np.asarray(v, np.float32).tolist() for v in rng)
    return {"low": low, "high": high}
