"""PA-RL's acting policy: a stochastic base proposes N chunks, a chunk critic picks the one it values most.

Policy-Agnostic RL (Sobol Mark, Gao, Sampaio, Srirama, Sharma, Finn and Kumar, 2024, arXiv:2412.06685) improves
any policy class without taking gradients through it: at each decision

    c_1 .. c_N ~ π_base(·|s)                         N chunks from the base (a flow's N initial noises; a VLA's sampler;
                                                     their std `noise_scale`: 1 the base's own, < 1 nearer its mode)
    c_i[:E] ← c_i[:E] + η ∇_a Q(s, a)  (k times)     optional local steps on the executed part, kept in [-1, 1]
    c* = argmax_i mean_j Q_j(s, c_i[:E])             the critic's pick; its first E actions run open-loop

and the learner (robo_rl/algos/parl.py) trains Q by TD on the executed chunks and distils the picked chunks back
into the base with the base's own supervised loss. Both the base (which learning changes) and the critic (which the
actor needs to rank) are this module's weights, so actors receive them as they receive any policy.

Every record carries `extra/decision` (1 on the step that opened a chunk) and `extra/chosen` (the picked chunk,
whole, held over it): what the learner distils. Our flow and diffusion checkpoints sample N chunks in one batched
call and are distilled by their flow-matching / denoising loss; a LeRobot policy whose sampler starts from noise
(SmolVLA, π0, diffusion) ranks the same way and stays frozen (no distillation: `algo.distill_every=0`). A base that
gives one chunk per observation has nothing to rank and is refused.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from policies.acting import ActingPolicy
from policies.base import BasePolicy, copy_sharing, obs_rows
from policies.chunking import CHUNK_EXTRA, ChunkExecutor
from policies.encoders import encoder_for_space
from policies.mlp import EnsembleMLP
from policies.residual import load_base, normalise_state_like_base

DETERMINISTIC_SEED = 0  # evaluation ranks the same N noises at every decision: the same observation, the same chunk
DETERMINISTIC = (
    "PA-RL ranks several samples of a stochastic base; this base ({name}) gives one chunk per observation: use a flow "
    "or diffusion base (`robo-rl bc policy=flow`) or a LeRobot policy whose sampler starts from noise "
    "(smolvla, pi0, pi05, diffusion)"
)


class ChunkCritic(nn.Module):
    """Q_j(s, c) for j in 1..M over the E executed actions of a chunk, flattened; one observation encoder."""

    def __init__(self, observation_space, chunk_dim: int, critics: int, hidden, layer_norm: bool, encoder) -> None:
        super().__init__()
        self.encoder = encoder_for_space(observation_space, config=encoder)
        self.q = EnsembleMLP(critics, self.encoder.out_dim + chunk_dim, list(hidden), 1, layer_norm)

    def from_features(self, features: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """[M, B] Q-values of encoded observations [B, F] and flattened chunks [B, E·A]."""
        return self.q(torch.cat([features, chunk], dim=-1)).squeeze(-1)

    def forward(self, obs: dict, chunk: torch.Tensor) -> torch.Tensor:
        return self.from_features(self.encoder(obs), chunk)


class GeneratorSampler(nn.Module):
    """Our flow/diffusion `ChunkGenerator` as PA-RL's base: N chunks per observation from N noises, and trainable."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.requires_grad_(True)
        self.chunk_size, self.action_dim = model.chunk_size, model.action_dim
        self.noise_scale = 1.0  # the initial noise's std (policy.noise_scale)

    def candidates(self, obs: dict, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """[B, n, chunk, A] in [-1, 1]: each observation's chunks from n independent N(0, I) noises."""
        features = self.model.features(obs).repeat_interleave(n, dim=0)
        noise = self.noise_scale * torch.randn(len(features), *self.model.noise_shape, generator=generator)
        chunks = self.model.sample(features, noise.to(features.device))
        return chunks.view(-1, n, self.chunk_size, self.action_dim)

    def distill_loss(self, obs: dict, chunks: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The base's own training loss (flow matching or denoising) towards `chunks` [B, chunk, A], rows weighted."""
        mask = weight[:, None].expand(-1, self.chunk_size)
        return self.model.loss(obs, chunks, mask)


class LeRobotSampler:
    """A LeRobot policy whose sampler starts from noise, as PA-RL's base: N chunks per observation in one batched
    call; frozen (a plain object, so its weights are neither in the state dict nor sent)."""

    distill_loss = None  # distilling into a LeRobot policy is not built: algo.distill_every=0 (the learner says so)

    def __init__(self, base) -> None:
        self.base = base
        self.chunk_size, self.action_dim = base.chunk_size, base.action_dim
        self.noise_scale = 1.0  # the initial noise's std (policy.noise_scale)

    def candidates(self, obs: dict, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        b = self.base
        rows = torch.arange(len(obs["state"])).repeat_interleave(n)
        cfg, param = b.policy.config, next(b.policy.parameters())
        noise = self.noise_scale * torch.randn(len(rows), *b.noise_shape, generator=generator)
        dtype = torch.float32 if cfg.type in ("smolvla", "pi0", "pi05") else param.dtype
        with torch.inference_mode():
            batch = b.preprocessor(b.batch_of(obs_rows(obs, rows)))
            if b.time_axis:
                batch = {k: v[:, None] if k in b.inputs else v for k, v in batch.items()}
            actions = b.policy.predict_action_chunk(batch, noise=noise.to(param.device, dtype))[:, : self.chunk_size]
            actions = b.postprocessor(actions).to("cpu", torch.float32).clamp(-1.0, 1.0)
        return actions.view(-1, n, self.chunk_size, self.action_dim)


def sampler_for(base: BasePolicy) -> GeneratorSampler | LeRobotSampler:
    """The sampler of a loaded base, or a one-line ValueError for a base with a single chunk per observation."""
    model = getattr(base, "model", None)
    if model is not None and hasattr(model, "sample") and hasattr(model, "loss"):
        return GeneratorSampler(model)
    if getattr(base, "noise_shape", None) is not None and hasattr(base, "preprocessor"):
        return LeRobotSampler(base)
    raise ValueError(DETERMINISTIC.format(name=getattr(base, "name", "") or type(base).__name__))


class RankedChunkPolicy(nn.Module, ActingPolicy):
    def __init__(
        self,
        observation_space,
        action_dim: int,
        base: dict | BasePolicy,
        samples: int = 16,
        execute_steps: int | None = None,
        action_grad_steps: int = 0,
        action_grad_lr: float = 0.01,
        critics: int = 2,
        critic_hidden: list[int] = (256, 256),
        critic_layer_norm: bool = True,
        encoder: dict | None = None,
        state_norm: str = "none",
        record_candidates: int = 0,
        noise_scale: float = 1.0,
    ) -> None:
        super().__init__()
        if not 0 <= noise_scale <= 4:
            raise ValueError(
                f"policy.noise_scale must be in [0, 4] (the std of the base's initial noise), got {noise_scale}"
            )
        if not 1 <= samples <= 4096:
            raise ValueError(f"policy.samples must be in [1, 4096] (chunks ranked per decision), got {samples}")
        if not 0 <= record_candidates <= samples:
            raise ValueError(
                f"policy.record_candidates must be in [0, policy.samples={samples}] (the base's chunks kept with each "
                f"decision for the learner's targets), got {record_candidates}"
            )
        if action_grad_steps < 0 or action_grad_lr <= 0:
            raise ValueError(
                f"policy.action_grad_steps must be >= 0 and action_grad_lr > 0, got {action_grad_steps}, "
                f"{action_grad_lr}"
            )
        spec = dict(base) if isinstance(base, dict) else {}
        spec.pop("model", None)  # what `robo-rl train` behaviour-clones when no path is given
        if spec.get("noise_scale") is not None:
            raise ValueError("policy.base.noise_scale is for a residual's base: PA-RL's is policy.noise_scale")
        loaded = load_base(spec or base, observation_space, action_dim)
        if loaded.action_dim != action_dim:
            raise ValueError(f"the base acts in {loaded.action_dim} dimensions, the task in {action_dim}")
        self.sampler = sampler_for(loaded)
        self.sampler.noise_scale = float(noise_scale)
        chunk = self.sampler.chunk_size
        execute = execute_steps or spec.get("execute_steps") or getattr(loaded, "execute_steps", None) or chunk
        if not 1 <= execute <= chunk:
            raise ValueError(f"policy.execute_steps={execute} must be in [1, {chunk}] (the base's chunk)")
        self.action_dim, self.execute_steps, self.chunk_size = action_dim, int(execute), chunk
        self.samples, self.action_grad_steps, self.action_grad_lr = int(samples), int(action_grad_steps), action_grad_lr
        self.critic = ChunkCritic(
            observation_space, self.execute_steps * action_dim, critics, critic_hidden, critic_layer_norm, encoder
        )
        normalise_state_like_base(self.critic.encoder, loaded, state_norm)
        self.executor = ChunkExecutor(self.execute_steps)  # sync: each chunk picked on the loop, from its step's obs
        self.extras_spec = {
            "decision": ((1,), np.float32),
            "chosen": ((chunk * action_dim,), np.float32),
            **CHUNK_EXTRA,
        }
        # the first K of each decision's raw base samples, their executed parts: the learner's TD target at the
        # previous decision ranks these (algo.target_from=recorded) instead of sampling the base again
        self.record_candidates = int(record_candidates)
        self.held_candidates = np.zeros(self.record_candidates * self.execute_steps * action_dim, np.float32)
        if self.record_candidates:
            self.extras_spec["candidates"] = (self.held_candidates.shape, np.float32)

    def __deepcopy__(self, memo):  # the episode's chunk goes on whichever weights act; a LeRobot base is shared
        shared = [self.executor] + ([self.sampler] if isinstance(self.sampler, LeRobotSampler) else [])
        return copy_sharing(self, memo, *shared)

    def reset(self, slot: int | None = None) -> None:
        self.executor.reset()

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        if mode != "sync":
            raise ValueError(
                f"actor.chunking={mode}: policy=parl picks each chunk on the control loop, its critic ranking the "
                "candidates from that step's observation (async picking is not built): use actor.chunking=sync"
            )

    def chunk_stats(self) -> dict:
        return self.executor.stats()

    # --- ranking ----------------------------------------------------------------------------------
    def rank(self, obs: dict, candidates: torch.Tensor, critic: ChunkCritic | None = None) -> tuple:
        """The best of each observation's candidates [B, N, chunk, A] by the critic's ensemble mean, after the
        optional gradient steps on their executed parts: (chunks [B, chunk, A], their Q [B], every Q [B, N])."""
        critic = critic or self.critic
        b, n = candidates.shape[:2]
        e, a = self.execute_steps, self.action_dim
        with torch.no_grad():
            features = critic.encoder(obs).repeat_interleave(n, dim=0)
        executed = candidates[:, :, :e].reshape(b * n, e * a)
        if self.action_grad_steps:
            executed = self.improve(critic, features, executed)
        with torch.no_grad():
            q = critic.from_features(features, executed).mean(dim=0).view(b, n)
        chunks = candidates.clone()
        chunks[:, :, :e] = executed.view(b, n, e, a)
        best = q.argmax(dim=1)
        rows = torch.arange(b, device=q.device)
        return chunks[rows, best], q[rows, best], q

    def improve(self, critic: ChunkCritic, features: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
        """`action_grad_steps` steps of size `action_grad_lr` up the ensemble-mean Q's gradient in the actions,
        each clipped back to [-1, 1] (PA-RL's local improvement); the critic itself is not changed."""
        x = executed.detach().clone()
        with torch.enable_grad():
            for _ in range(self.action_grad_steps):
                x.requires_grad_(True)
                q = critic.from_features(features.detach(), x).mean(dim=0).sum()
                (grad,) = torch.autograd.grad(q, x)
                x = (x.detach() + self.action_grad_lr * grad).clamp(-1.0, 1.0)
        return x.detach()

    def choose(self, obs: dict, deterministic: bool) -> torch.Tensor:
        """The picked chunk [B, chunk, A] for a batch of observations."""
        generator = torch.Generator().manual_seed(DETERMINISTIC_SEED) if deterministic else None
        with torch.no_grad():
            candidates = self.sampler.candidates(obs, self.samples, generator)
        self.hold(candidates)
        return self.rank(obs, candidates)[0]

    def hold(self, candidates: torch.Tensor) -> None:
        """Keep the first `record_candidates` raw samples' executed parts of one decision [1, N, chunk, A] for its
        record (before any gradient step on them: they stand for the base's own samples at this observation)."""
        if self.record_candidates:
            kept = candidates[0, : self.record_candidates, : self.execute_steps]
            self.held_candidates = kept.reshape(-1).to("cpu", torch.float32).numpy().copy()

    # --- acting -----------------------------------------------------------------------------------
    def _step(self, obs: dict, pick) -> tuple[torch.Tensor, dict]:
        ex = self.executor
        action = ex.step(obs, lambda row, guide, context: context, choose=lambda _: pick())
        chosen = ex.context  # the chunk this step's action came from
        extras = {
            "decision": torch.tensor([[float(ex.requested)]]),
            "chosen": torch.from_numpy(np.asarray(chosen, np.float32).reshape(1, -1)),
            "chunk": torch.from_numpy(ex.record()),
        }
        if self.record_candidates:
            extras["candidates"] = torch.from_numpy(self.held_candidates)[None]
        return torch.from_numpy(np.asarray(action, np.float32))[None], extras

    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:  # one env: `slots` is [0] or None
        return self._step(obs, lambda: self.choose(obs, deterministic)[0].cpu().numpy())

    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        return self.act_with_extras(obs, deterministic)[0]

    @torch.no_grad()
    def explore_step(self, obs: dict) -> tuple[torch.Tensor, dict]:
        """Warm-up (train.random_steps): one sample of the base, unranked (a young critic's pick is noise); with
        `record_candidates`, that many samples, the first executed and all of them recorded."""

        def pick():
            candidates = self.sampler.candidates(obs, max(1, self.record_candidates))
            self.hold(candidates)
            return candidates[0, 0].cpu().numpy()

        return self._step(obs, pick)
