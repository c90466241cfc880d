"""SAC with prior data (RLPD): a LayerNorm critic ensemble with a random-pair min target.

The actor process holds only `policy`; critics, target networks, temperature and optimisers live here.
Quantities keep the paper's names: `target_q`, `td_error`, `log_prob`, `alpha`.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from policies.encoders import (
    EncoderConfig,
    ObservationEncoder,
    encoder_for_space,
    frozen_backbones,
    frozen_feature_cache,
)
from policies.gaussian import TanhGaussianPolicy
from policies.mlp import EnsembleMLP
from robo_rl.algos.base import Algorithm, BatchSpec, check_augmentation, prepare_images
from robo_rl.configs.algo import SACConfig
from robo_rl.configs.typed import config_from
from robo_rl.precision import autocast, resolve_precision


def polyak_pairs(target: nn.Module, source: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The target's parameters and their sources, without any tensor both share (a frozen backbone)."""
    pairs = [(tp, p) for tp, p in zip(target.parameters(), source.parameters(), strict=True) if tp is not p]
    return [tp for tp, _ in pairs], [p for _, p in pairs]


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: target ← (1 − τ)·target + τ·source, parameter by parameter."""
    targets, sources = polyak_pairs(target, source)
    if targets:  # one fused call instead of one per tensor
        torch._foreach_lerp_(targets, sources, tau)


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """`nn.utils.clip_grad_norm_` for one device's float32 gradients, bit for bit: the norm of the per-tensor norms,
    every gradient scaled by min(1, max_norm / (norm + 1e-6)). The same kernels without its per-call grouping of
    tensors by device and dtype, which costs more than the arithmetic on a small network; `None`: measure only."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


def read_metrics(metrics: dict) -> dict[str, float]:
    """Tensor metrics to floats in one read-back (one device sync on a GPU instead of one per metric)."""
    tensors = {k: v for k, v in metrics.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        return dict(metrics)
    values = torch.stack([v.detach().float().reshape(()) for v in tensors.values()]).tolist()
    return {**metrics, **dict(zip(tensors, values, strict=True))}


class CriticEnsemble(nn.Module):
    """Q_i(s, a) for i in 1..E, sharing one observation encoder (of the policy's kind, its own weights;
    a frozen backbone may be the policy's own module)."""

    def __init__(
        self,
        observation_space,
        action_dim: int,
        cfg: SACConfig,
        encoder: EncoderConfig | None = None,
        share_frozen_from: ObservationEncoder | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder_for_space(observation_space, config=encoder, share_frozen_from=share_frozen_from)
        self.q = EnsembleMLP(
            cfg.num_critics, self.encoder.out_dim + action_dim, list(cfg.critic_hidden), 1, cfg.critic_layer_norm
        )

    def forward(self, obs: dict, action: torch.Tensor) -> torch.Tensor:
        """[E, B] Q-values."""
        return self.q(torch.cat([self.encoder(obs), action], dim=-1)).squeeze(-1)


class SAC(Algorithm):
    """One update step reads top to bottom like the paper: critic, then actor, then temperature."""

    def __init__(
        self, policy: TanhGaussianPolicy, observation_space, cfg: SACConfig, batch_spec: BatchSpec | None = None
    ) -> None:
        self.cfg = cfg
        self.policy = policy
        self.batch_spec = batch_spec or BatchSpec(
            batch_size=cfg.batch_size, batches=cfg.critic_updates_per_actor, n_step=cfg.n_step, gamma=cfg.gamma
        )
        action_dim = policy.action_dim
        check_augmentation(cfg.image_augmentation)
        clip = cfg.target_q_clip
        if clip is not None and (len(clip) != 2 or clip[0] >= clip[1]):
            raise ValueError(f"algo.target_q_clip must be [low, high] with low < high, got {list(clip)}")
        self.device = next(policy.parameters()).device  # the policy's: the learner moved it there
        self.critic = CriticEnsemble(
            observation_space,
            action_dim,
            cfg,
            getattr(policy, "encoder_config", None),
            share_frozen_from=policy.encoder,
        ).to(self.device)
        if cfg.share_encoder:  # one encoder module: the critic's loss trains it, the actor reads it detached
            self.critic.encoder = policy.encoder
        shared = {id(m): m for m in frozen_backbones(self.critic)}  # a frozen backbone is not copied
        self.target_critic = copy.deepcopy(self.critic, shared).requires_grad_(False)
        self.log_alpha = torch.tensor(
            float(torch.tensor(cfg.init_temperature).log()), device=self.device, requires_grad=True
        )
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -action_dim / 2
        self.actor_optim = torch.optim.Adam(policy.parameters(), lr=cfg.lr_actor, fused=True)
        self.critic_optim = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr_critic, fused=True)
        self.alpha_optim = torch.optim.Adam([self.log_alpha], lr=cfg.lr_alpha, fused=True)
        self.compute_dtype = resolve_precision(cfg.precision, self.device)
        # listed once, not walked through the modules at every step (load_state_dict copies into these tensors)
        self.critic_params, self.policy_params = list(self.critic.parameters()), list(policy.parameters())
        self.target_pairs = polyak_pairs(self.target_critic, self.critic)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def update_critic(self, batch: dict) -> dict:
        with torch.no_grad():
            next_action, next_log_prob = self.policy.sample(self.policy.encoder(batch["next_obs"]))
            target_qs = self.target_critic(batch["next_obs"], next_action)
            pair = torch.randperm(self.cfg.num_critics)[: self.cfg.critic_subsample]
            next_v = target_qs[pair].min(dim=0).values - self.alpha * next_log_prob * self.cfg.backup_entropy
            # `discount` is γ^n on a live step and 0 after a true termination; truncation still bootstraps
            target_q = batch["reward"] + batch["discount"] * next_v
            if self.cfg.target_q_clip is not None:
                target_q = target_q.clamp(*self.cfg.target_q_clip)
        qs = self.critic(batch["obs"], batch["action"])
        td_error = qs - target_q.unsqueeze(0)
        critic_loss = 0.5 * (td_error**2).mean(dim=1).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        grad_norm = clip_grad_norm(self.critic_params, self.cfg.grad_clip_norm)
        self.critic_optim.step()
        self._soft_update_target()
        # tensors: `update` reads every metric back at once
        return {"critic_loss": critic_loss.detach(), "q_mean": qs.detach().mean(), "critic_grad_norm": grad_norm}

    def update_actor(self, batch: dict) -> dict:
        features = self.policy.encoder(batch["obs"])
        if self.cfg.share_encoder:
            features = features.detach()  # the encoder belongs to the critic's loss
        action, log_prob = self.policy.sample(features)
        for p in self.critic_params:  # the actor step must not move the critic
            p.requires_grad_(False)
        q = self.critic(batch["obs"], action).mean(dim=0)
        for p in self.critic_params:
            p.requires_grad_(True)
        actor_loss = (self.alpha.detach() * log_prob - q).mean()
        metrics = {}
        human = batch.get("intervention")
        if self.cfg.intervention_bc_weight > 0 and human is not None and bool(human.any()):
            human = human.bool()
            # the deterministic action (what evaluation runs) towards the human's, on the steps a human commanded
            mean_action = torch.tanh(self.policy.distribution_params(features[human])[0])
            bc_loss = F.mse_loss(mean_action.float(), batch["action"][human].float())
            actor_loss = actor_loss + self.cfg.intervention_bc_weight * bc_loss
            metrics["intervention_bc_loss"] = bc_loss.detach()
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        clip_grad_norm(self.policy_params, self.cfg.grad_clip_norm)
        self.actor_optim.step()

        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optim.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optim.step()
        return {
            **metrics,
            "actor_loss": actor_loss.detach(),
            "alpha": self.alpha.detach(),
            "entropy": -log_prob.detach().mean(),
        }

    def update(self, critic_batches: list[dict]) -> dict:
        """Several critic steps (one per batch), then one actor and temperature step on the last batch."""
        metrics = {}
        with frozen_feature_cache(self.policy, self.critic, self.target_critic):
            critic_batches = [self.prepare_batch(batch) for batch in critic_batches]
            # one autocast region per optimiser step: autocast caches the low-precision copy of each weight for
            # the life of the region, so a region spanning a step would run the next step on the old weights
            for batch in critic_batches:
                with autocast(self.compute_dtype, self.device):
                    metrics = self.update_critic(batch)
            with autocast(self.compute_dtype, self.device):
                metrics.update(self.update_actor(critic_batches[-1]))
        return read_metrics(metrics)

    def prepare_batch(self, batch: dict) -> dict:
        """Images cropped/resized once and augmented (`prepare_images`); the actor step reuses the last critic
        batch as prepared here, so a frozen backbone's features of it are computed once per update."""
        return prepare_images(batch, self.policy.encoder, self.cfg.image_augmentation, self.cfg.augment_pad)

    @torch.no_grad()
    def _soft_update_target(self) -> None:
        targets, sources = self.target_pairs  # as soft_update(target_critic, critic), the pairs listed once
        if targets:
            torch._foreach_lerp_(targets, sources, self.cfg.tau)

    # --- checkpoints: everything needed to resume exactly ---------------------------------------
    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "alpha_optim": self.alpha_optim.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.alpha_optim.load_state_dict(state["alpha_optim"])


def build_sac(policy: nn.Module, observation_space, action_dim: int, state_names: tuple = (), **keys) -> SAC:
    """`algo=sac`: SAC/RLPD from the block's keys, each a field of SACConfig (an unknown one is refused by name)."""
    from policies.flow import GenerativePolicy
    from policies.hybrid import HybridGripperPolicy

    if isinstance(policy, GenerativePolicy):
        raise ValueError(
            "policy=flow|diffusion is trained by `robo-rl bc`; to fine-tune it with RL use "
            "experiment=dsrl_pick_cube (policy=dsrl), policy=reinflow|dppo with algo=ppo, or a residual"
        )
    if isinstance(policy, HybridGripperPolicy):
        raise ValueError("policy=hybrid_gripper learns its gripper with a discrete critic: use algo=sac_gripper")
    return SAC(policy, observation_space, config_from(SACConfig, keys, "algo"))
