"""Behaviour cloning of a base policy (`robo-rl bc`): demonstrations → (observation, action chunk) pairs →
a `policies.bc.BCPolicy` trained by regression, early-stopped on held-out episodes, written to
`<run>/bc/policy.pt` and evaluated open-loop-in-chunks on the sim env.

Chunks come from the replay's own chunker (`ReplayBuffer.gather(chunk=K)`): K actions from each step inside its
episode, padded past the end with the last action and masked out of the loss.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from policies.base import ChunkedBase
from policies.bc import BCBase, BCPolicy
from policies.flow import ChunkGenerator, GenerativeBase
from robo_rl.config import ConfigError, make_env
from robo_rl.configs.eval import BCConfig
from robo_rl.configs.typed import config_from
from robo_rl.data.demos import load_or_make_demos, rollout_episode
from robo_rl.data.replay import ReplayBuffer
from robo_rl.data.schema import step_fields
from robo_rl.data.tasks import INSTRUCTIONS, decode_instructions
from robo_rl.eval.episodes import wilson_interval
from robo_rl.runs import MetricsWriter


@dataclass
class BCData:
    """Demonstrations in a replay buffer, split into training and validation rows by whole episodes."""

    buffer: ReplayBuffer
    train_rows: np.ndarray  # rows that end a transition: obs at `prev[row]`, actions from `row` on
    val_rows: np.ndarray
    episodes: int
    val_episodes: int
    source: str  # where the demonstrations came from
    instructions: list[str] = field(default_factory=list)  # the task table the records' `task` codes index


def episode_index(batch: dict[str, np.ndarray]) -> np.ndarray:
    """0, 1, 2 ... per record: a new episode starts at a reset record or where the episode id changes."""
    ids = batch["episode_id"]
    starts = (batch["step"] == 0) | np.concatenate([[True], ids[1:] != ids[:-1]])
    return np.cumsum(starts) - 1


def demos_dataset(batch: dict[str, np.ndarray], val_fraction: float, seed: int, source: str = "") -> BCData:
    """The step batch in a replay buffer (each episode its own stream), with validation episodes held out."""
    if not len(batch.get("step", ())):
        raise ConfigError(f"demonstrations {source}: no records to learn from")
    labels = episode_index(batch)
    episodes = int(labels[-1]) + 1
    cameras = {k[len("image/") :]: v.shape[1:3] for k, v in batch.items() if k.startswith("image/")}
    fields = step_fields(batch["state"].shape[1], batch["action_executed"].shape[1], cameras)
    buffer = ReplayBuffer(len(labels), fields)
    try:
        buffer.add({k: batch[k] for k in fields}, source=labels)
    except ValueError as e:
        raise ConfigError(f"demonstrations {source}: {e}") from None
    rows = np.flatnonzero(buffer.prev[: len(buffer)] >= 0)  # nothing is overwritten: every link is valid
    n_val = 0 if val_fraction == 0 else max(1, round(val_fraction * episodes))
    if n_val >= episodes:
        raise ConfigError(
            f"bc.val_fraction={val_fraction} holds out {n_val} of {episodes} demonstration episodes, "
            "leaving none to train on: record more (demos.num_episodes) or lower it"
        )
    val_eps = np.random.default_rng(seed).permutation(episodes)[:n_val]
    held_out = np.isin(labels[rows], val_eps)
    instructions = decode_instructions(batch[INSTRUCTIONS]) if INSTRUCTIONS in batch else []
    return BCData(buffer, rows[~held_out], rows[held_out], episodes, n_val, source, instructions)


def chunk_batch(data: BCData, rows: np.ndarray, chunk: int, device) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """(obs, actions [B, K, A], mask [B, K]) as tensors on `device`."""
    b = data.buffer.gather(rows, gamma=1.0, chunk=chunk)
    action = b["action"] if chunk > 1 else b["action"][:, None]
    mask = b["action_mask"] if chunk > 1 else np.ones((len(rows), 1), bool)
    to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    obs = {"state": to(b["obs"]["state"]), "images": {k: to(v) for k, v in b["obs"]["images"].items()}}
    if data.instructions:  # each row's instruction, for a task-conditioned policy (the others ignore it)
        names = [None, *data.instructions]
        obs["instruction"] = [names[c] for c in data.buffer.data["task"][rows].tolist()]
    return obs, to(action), to(mask).float()


def chunk_loss(
    policy: BCPolicy | ChunkGenerator,
    obs: dict,
    action: torch.Tensor,
    mask: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Over the real actions of each chunk (padding past the episode end is masked out): the mean squared error of
    an MLP, the flow-matching or denoising loss of a generative policy."""
    if isinstance(policy, ChunkGenerator):
        return policy.loss(obs, action, mask, generator)
    error = (policy(obs) - action).pow(2).mean(-1)
    return (error * mask).sum() / mask.sum().clamp_min(1.0)


@torch.no_grad()
def validation_loss(policy: BCPolicy | ChunkGenerator, data: BCData, chunk: int, batch_size: int, device) -> float:
    """The held-out loss; a generative policy's draws its noise and times from one fixed seed (comparable from
    epoch to epoch)."""
    policy.eval()
    total, weight = 0.0, 0.0
    generator = torch.Generator(device=device).manual_seed(0)
    for lo in range(0, len(data.val_rows), batch_size):
        obs, action, mask = chunk_batch(data, data.val_rows[lo : lo + batch_size], chunk, device)
        total += float(chunk_loss(policy, obs, action, mask, generator)) * float(mask.sum())
        weight += float(mask.sum())
    policy.train()
    return total / weight if weight else math.nan


def generative_spec(cfg) -> dict | None:
    """The flow/diffusion architecture `robo-rl bc` trains, or None for the MLP: `policy=flow|diffusion` itself, or
    the `model` block (`base.model`) of a policy whose (base) checkpoint is trained first (`policy=reinflow|dppo`,
    `policy=dsrl`)."""
    from omegaconf import OmegaConf

    policy = cfg.get("policy") or {}
    if str(policy.get("_target_", "")).endswith("GenerativePolicy"):
        spec = OmegaConf.to_container(policy, resolve=True)
    elif "base" in policy and policy.base.get("model"):
        spec = OmegaConf.to_container(policy.base.model, resolve=True)
    elif "path" in policy and policy.get("model"):
        spec = OmegaConf.to_container(policy.model, resolve=True)
    else:
        return None
    keys = (
        "kind",
        "chunk_size",
        "execute_steps",
        "steps",
        "hidden",
        "time_features",
        "diffusion_timesteps",
        "task_embedding",
    )
    return {k: spec[k] for k in keys if spec.get(k) is not None}


def build_policy(
    bc_cfg, env, encoder: dict | None, generative: dict | None = None, tasks: list[str] | None = None
) -> BCPolicy | ChunkGenerator:
    """A fresh policy for this env (an MLP, or the flow/diffusion model of `generative`): state only, or with its
    cameras when `bc.images` is on; a flow/diffusion model with `task_embedding` learns a vector per entry of `tasks`
    (the demonstrations' instructions)."""
    space = env.observation_space
    cameras = {n: list(s.shape[:2]) for n, s in space["images"].spaces.items()} if bc_cfg.images else {}
    if bc_cfg.images and not cameras:
        raise ConfigError("bc.images=true but this env has no cameras (e.g. env.cameras=[front] or env.camera=true)")
    if generative is not None:
        arch = {k: v for k, v in generative.items() if k != "execute_steps"}
        if arch.get("task_embedding") and not tasks:
            raise ConfigError(
                f"policy task_embedding={arch['task_embedding']} learns a vector per instruction, and these "
                "demonstrations carry none: record them from an env with instructions, or set it to 0"
            )
        try:
            return ChunkGenerator(
                space["state"].shape[0],
                env.action_space.shape[0],
                cameras=cameras,
                encoder=encoder,
                state_names=list(getattr(env, "state_names", ())),
                tasks=list(tasks or []) if arch.get("task_embedding") else None,
                **arch,
            )
        except ValueError as e:
            raise ConfigError(f"policy: {e}") from None
    return BCPolicy(
        space["state"].shape[0],
        env.action_space.shape[0],
        bc_cfg.chunk_size,
        list(bc_cfg.hidden),
        cameras,
        encoder,
        list(getattr(env, "state_names", ())),
    )


def train_policy(
    policy: BCPolicy | ChunkGenerator, data: BCData, bc_cfg, seed: int, device, progress: bool = True, log=None
) -> dict:
    """Adam on the chunk loss; after each epoch the held-out loss, stopping after `bc.patience` epochs without a
    better one. A flow or diffusion policy trains for at least `bc.flow_updates` / `bc.diffusion_updates` gradient
    steps whatever epochs and patience say. The policy ends with the weights of its best validation epoch. Returns the
    training summary."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    chunk, batch_size = int(policy.chunk_size), int(bc_cfg.batch_size)
    kind = getattr(policy, "kind", None)  # "flow" | "diffusion" for a generative policy, None for an MLP
    least = int(getattr(bc_cfg, f"{kind}_updates")) if kind in ("flow", "diffusion") else 0
    least_epochs = math.ceil(least / max(1, math.ceil(len(data.train_rows) / batch_size)))
    policy.set_normalisation(data.buffer.data["state"][data.buffer.prev[data.train_rows]])
    policy.to(device).train()
    optimiser = torch.optim.Adam(
        [p for p in policy.parameters() if p.requires_grad],
        lr=float(bc_cfg.lr),
        weight_decay=float(bc_cfg.weight_decay),
    )
    best = {"val_loss": math.inf, "epoch": -1, "weights": None}
    train_loss, val_loss, epoch = math.nan, math.nan, -1
    start = time.perf_counter()
    bar = tqdm(
        range(max(int(bc_cfg.epochs), least_epochs)), desc="behaviour cloning", unit="epoch", disable=not progress
    )
    updates = 0
    for epoch in bar:
        order = rng.permutation(data.train_rows)
        losses = []
        for lo in range(0, len(order), batch_size):
            obs, action, mask = chunk_batch(data, order[lo : lo + batch_size], chunk, device)
            loss = chunk_loss(policy, obs, action, mask)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
            updates += 1
        train_loss = float(np.mean(losses))
        val_loss = validation_loss(policy, data, chunk, batch_size, device)
        watched = val_loss if len(data.val_rows) else train_loss  # no held-out episodes: keep the last weights
        if watched < best["val_loss"] or not len(data.val_rows):
            best = {"val_loss": watched, "epoch": epoch, "weights": copy.deepcopy(policy.state_dict())}
        bar.set_postfix(train=f"{train_loss:.4f}", val=f"{val_loss:.4f}", best=f"{best['val_loss']:.4f}")
        if log is not None:
            log.write({"kind": "bc_epoch", "epoch": epoch, "train_loss": train_loss, "val_loss": val_loss})
        if epoch - best["epoch"] >= int(bc_cfg.patience) and updates >= least:
            break
    bar.close()
    policy.load_state_dict(best["weights"])
    policy.eval()
    return {
        "epochs": epoch + 1,
        "updates": updates,
        "best_epoch": best["epoch"],
        "train_loss": train_loss,
        "val_loss": best["val_loss"] if len(data.val_rows) else None,
        "train_s": time.perf_counter() - start,
        "train_transitions": int(len(data.train_rows)),
        "val_transitions": int(len(data.val_rows)),
        "episodes": data.episodes,
        "val_episodes": data.val_episodes,
    }


def evaluate_base(
    env,
    base: BCBase | GenerativeBase,
    episodes: int,
    seed: int,
    execute_steps: int | None = None,
    progress: bool = False,
) -> dict:
    """Success rate (Wilson 95% interval) over seeds seed..seed+episodes-1, each episode starting from an empty
    chunk queue and, for a generative base, from its noise seeded by the episode's seed (the same file on the same
    seeds scores the same, whatever it drew before); with the base's inference time."""
    chunked = ChunkedBase(base, execute_steps)
    reseed = getattr(base, "reseed", None)
    results = []
    for i in tqdm(range(episodes), desc="evaluation", unit="ep", disable=not progress):
        chunked.reset()
        if reseed is not None:
            reseed(seed + i)
        records, success = rollout_episode(env, chunked.act, seed + i, i)
        results.append(
            {
                "episode": i,
                "seed": seed + i,
                "success": success,
                "length": len(records) - 1,
                "return": float(sum(r["reward"] for r in records[1:])),
            }
        )
    k = sum(r["success"] for r in results)
    return {
        "episodes": episodes,
        "successes": k,
        "success_rate": k / episodes,
        "success_ci95": list(wilson_interval(k, episodes)),
        "chunk_size": base.chunk_size,
        "execute_steps": chunked.execute_steps,
        "mean_length": float(np.mean([r["length"] for r in results])),
        **chunked.timing(),
        "per_episode": results,
    }


def save_atomic(payload: dict, path: Path) -> Path:
    """torch.save via a temp file, fsync and rename: a kill never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_bc_data(cfg, progress: bool = True) -> BCData:
    """The demonstrations of this config (scripted and cached, or `demos.path`), split for training."""
    batch, path, cached = load_or_make_demos(cfg, progress=progress)
    if batch is None:
        raise ConfigError("behaviour cloning needs demonstrations: demos.num_episodes > 0 or demos.path")
    return demos_dataset(batch, bc_settings(cfg).val_fraction, int(cfg.seed), str(path))


def bc_settings(cfg) -> BCConfig:
    """The config's `bc` block as its dataclass."""
    from omegaconf import OmegaConf

    return config_from(BCConfig, OmegaConf.to_container(cfg.bc, resolve=True), "bc")


def train_bc(cfg, run_dir: str | Path, data: BCData | None = None, progress: bool = True) -> dict:
    """Train a BC base on this config's demonstrations, write `<run>/bc/policy.pt`, evaluate it on the env
    (`bc.eval_episodes`, seeds from `eval.seed`) into `<run>/bc/eval.json`; return the summary."""
    from omegaconf import OmegaConf

    from robo_rl.algos.base import resolve_device

    torch.set_num_threads(int(cfg.torch_threads))  # more threads than cores slows small MLPs tenfold
    out = Path(run_dir) / "bc"
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(str(cfg.device))
    data = data if data is not None else load_bc_data(cfg, progress)
    bc = bc_settings(cfg)
    encoder = OmegaConf.to_container(cfg.policy.encoder, resolve=True) if bc.images else None
    env = make_env(cfg)
    try:
        torch.manual_seed(int(cfg.seed))  # the initial weights too: one config, one policy
        generative = generative_spec(cfg)
        policy = build_policy(bc, env, encoder, generative, data.instructions)
        if policy.state_dim != data.buffer.fields["state"][0][0] or (
            policy.action_dim != data.buffer.fields["action_executed"][0][0]
        ):
            raise ConfigError(
                f"demonstrations {data.source} have state/action sizes "
                f"{data.buffer.fields['state'][0]}/{data.buffer.fields['action_executed'][0]}, "
                f"the env has {policy.state_dim}/{policy.action_dim}"
            )
        log = MetricsWriter(out / "metrics.jsonl")
        try:
            summary = train_policy(policy, data, bc, int(cfg.seed), device, progress, log)
        finally:
            log.close()
        execute_steps = (generative or {}).get("execute_steps", bc.execute_steps)
        summary["demonstrations"] = data.source
        actions = data.buffer.data["action_executed"][data.train_rows]
        action_range = {"low": actions.min(0).tolist(), "high": actions.max(0).tolist()}  # a residual's units
        save_atomic(
            policy.cpu().checkpoint(execute_steps=execute_steps, action_range=action_range, train=summary),
            out / "policy.pt",
        )
        if bc.eval_episodes > 0:
            base = GenerativeBase(policy) if generative else BCBase(policy)
            result = evaluate_base(env, base, bc.eval_episodes, int(cfg.eval.seed), execute_steps, progress)
            (out / "eval.json").write_text(json.dumps(result, indent=2))
            summary["eval"] = {k: v for k, v in result.items() if k != "per_episode"}
    finally:
        env.close()
    summary["checkpoint"] = str(out / "policy.pt")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
