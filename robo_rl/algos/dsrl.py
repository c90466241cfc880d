"""DSRL: SAC over the initial noise of a frozen flow/diffusion policy (Wagenmaker et al., 2025).

One transition per decision: obs s where a chunk was chosen, its noise w, the E executed actions a (E =
`policy.execute_steps`), r = Σ_{k<E} γ^k r_k, s' where the next chunk is chosen (`BatchSpec.where="decision"`).

  form: noise     a critic Q(s, w), target r + γ^E · (min Q'(s', w') − α log π(w'|s')), w' ~ π_W(s');
                  the actor maximises Q(s, w) − α log π(w|s). The learner never runs the base: any base whose
                  sampler takes noise (a VLA included) works, its size bounded only by the actor's control period.
  form: aliased   (noise aliasing, the paper's default) an action critic Q^A(s, a) on the executed actions, by TD
                  with a' = π_base(s', w'); a noise critic Q^W(s, w) regressed onto min Q^A(s, π_base(s, w)) for
                  noises from N(0, I) and from π_W; the actor maximises Q^W − α log π. Demonstrations and human
                  interventions train Q^A with the actions that were really executed; the learner runs the base
                  (batched) on every update, so it needs a base that samples batches of torch tensors (ours).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from policies.dsrl import NoisePolicy
from policies.encoders import frozen_backbones, frozen_feature_cache
from policies.language import instruction_subset, instructions_repeated
from robo_rl.algos.base import Algorithm, BatchSpec, check_augmentation, prepare_images
from robo_rl.algos.sac import CriticEnsemble, soft_update
from robo_rl.configs.algo import DSRLConfig
from robo_rl.configs.typed import config_from
from robo_rl.precision import autocast, resolve_precision


class DSRL(Algorithm):
    def __init__(self, policy: NoisePolicy, observation_space, cfg: DSRLConfig, spec: BatchSpec) -> None:
        self.policy, self.cfg, self.batch_spec = policy, cfg, spec
        check_augmentation(cfg.image_augmentation)
        self.device = next(policy.parameters()).device
        enc = policy.encoder_config
        self.noise_critic = CriticEnsemble(
            observation_space, policy.noise_dim, cfg, enc, share_frozen_from=policy.encoder
        )
        critics = [self.noise_critic]
        self.action_critic = self.base_model = None
        if cfg.form == "aliased":
            model = getattr(policy.base, "model", None)
            if model is None or not hasattr(model, "sample"):
                raise ValueError(
                    f"algo.form=aliased runs the base on the learner, in batches; this base "
                    f"({type(policy.base).__name__}) cannot: use algo.form=noise"
                )
            self.base_model = copy.deepcopy(model).to(self.device).requires_grad_(False).eval()
            self.action_critic = CriticEnsemble(
                observation_space, policy.execute_steps * policy.action_dim, cfg, enc, share_frozen_from=policy.encoder
            )
            critics.append(self.action_critic)
        for critic in critics:  # the state as the noise actor reads it (policy.state_norm)
            critic.encoder.copy_state_normalisation(policy.encoder)
            critic.to(self.device)
        self.td_critic = self.action_critic if cfg.form == "aliased" else self.noise_critic
        shared = {id(m): m for m in frozen_backbones(*critics, policy)}
        self.target_critic = copy.deepcopy(self.td_critic, shared).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(cfg.init_temperature)), device=self.device, requires_grad=True)
        self.actor_optim = torch.optim.Adam(policy.actor.parameters(), lr=cfg.lr_actor)
        self.critic_optims = {id(c): torch.optim.Adam(c.parameters(), lr=cfg.lr_critic) for c in critics}
        self.alpha_optim = torch.optim.Adam([self.log_alpha], lr=cfg.lr_alpha)
        self.compute_dtype = resolve_precision(cfg.precision, self.device)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    # --- the base on the learner ----------------------------------------------------------------
    def executed(self, obs: dict, noise: torch.Tensor) -> torch.Tensor:
        """The first E actions the base makes of `noise` at `obs`, flattened: [B, E·A] (the action critic's input)."""
        model, p = self.base_model, self.policy
        with torch.no_grad():
            chunk = model.sample(model.features(obs), noise.view(len(noise), *p.noise_shape))
        return chunk[:, : p.execute_steps].flatten(1)

    # --- the update -----------------------------------------------------------------------------
    def update(self, batches: list[dict]) -> dict:
        metrics = {}
        critics = [c for c in (self.noise_critic, self.action_critic, self.target_critic) if c is not None]
        with frozen_feature_cache(self.policy, *critics):
            batches = [
                prepare_images(b, self.policy.encoder, self.cfg.image_augmentation, self.cfg.augment_pad)
                for b in batches
            ]
            for batch in batches:
                with autocast(self.compute_dtype, self.device):
                    metrics = self.update_td(batch)
            if self.cfg.form == "aliased":  # once per round, like the actor: it follows Q^A, which moved
                with autocast(self.compute_dtype, self.device):
                    metrics.update(self.update_noise_critic(batches[-1]))
            with autocast(self.compute_dtype, self.device):
                metrics.update(self.update_actor(batches[-1]))
        return metrics

    def _step(self, critic: nn.Module, loss: torch.Tensor) -> float:
        optim = self.critic_optims[id(critic)]
        optim.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(critic.parameters(), self.cfg.grad_clip_norm)
        optim.step()
        return float(norm)

    def update_td(self, batch: dict) -> dict:
        """The TD critic: Q^A on executed actions (aliased) or Q on the recorded noise (noise)."""
        with torch.no_grad():
            next_noise, next_log_prob = self.policy.sample_noise(self.policy.encoder(batch["next_obs"]))
            next_in = self.executed(batch["next_obs"], next_noise) if self.cfg.form == "aliased" else next_noise
            target_qs = self.target_critic(batch["next_obs"], next_in)
            pair = torch.randperm(self.cfg.num_critics)[: self.cfg.critic_subsample]
            next_v = target_qs[pair].min(dim=0).values - self.alpha * next_log_prob * self.cfg.backup_entropy
            target_q = batch["reward"] + batch["discount"] * next_v
            if self.cfg.target_q_clip is not None:
                target_q = target_q.clamp(*self.cfg.target_q_clip)
        if self.cfg.form == "aliased":  # what really ran: the base's chunk, or a human's actions
            qs = self.action_critic(batch["obs"], batch["action"].flatten(1))
            weight = torch.ones_like(target_q)
        else:  # a human's steps were not the noise's doing: they do not train Q(s, w)
            qs = self.noise_critic(batch["obs"], batch["extras"]["noise"])
            weight = 1.0 - batch["intervention"].float()
        td_error = qs - target_q.unsqueeze(0)
        loss = 0.5 * ((td_error**2) * weight).sum(dim=1).sum() / weight.sum().clamp_min(1.0)
        norm = self._step(self.td_critic, loss)
        soft_update(self.target_critic, self.td_critic, self.cfg.tau)
        return {"critic_loss": loss.item(), "q_mean": qs.mean().item(), "critic_grad_norm": norm}

    def update_noise_critic(self, batch: dict) -> dict:
        """Aliased: Q^W(s, w) ← min_i Q^A_i(s, π_base(s, w)), w half from N(0, I) in the box, half from π_W."""
        n, obs = self.cfg.alias_samples, batch["obs"]
        repeat = lambda x: x.repeat_interleave(n, dim=0)  # noqa: E731
        images = {k: repeat(v) for k, v in obs["images"].items()}
        obs_n = {"state": repeat(obs["state"]), "images": images, **instructions_repeated(obs, n)}
        with torch.no_grad():
            b = len(obs["state"])
            prior = torch.randn(b * n, self.policy.noise_dim, device=self.device).clamp(
                -self.policy.noise_bound, self.policy.noise_bound
            )
            actor = self.policy.sample_noise(self.policy.encoder(obs_n))[0]
            half = (torch.arange(b * n, device=self.device) % n) < (n + 1) // 2
            noise = torch.where(half[:, None], prior, actor)
            target = self.action_critic(obs_n, self.executed(obs_n, noise)).min(dim=0).values
        qs = self.noise_critic(obs_n, noise)
        loss = F.mse_loss(qs, target.unsqueeze(0).expand_as(qs), reduction="none").mean(dim=1).sum()
        norm = self._step(self.noise_critic, loss)
        return {"noise_critic_loss": loss.item(), "noise_critic_grad_norm": norm}

    def update_actor(self, batch: dict) -> dict:
        noise, log_prob = self.policy.sample_noise(self.policy.encoder(batch["obs"]))
        self.noise_critic.requires_grad_(False)
        q = self.noise_critic(batch["obs"], noise).mean(dim=0)
        self.noise_critic.requires_grad_(True)
        actor_loss = (self.alpha.detach() * log_prob - q).mean()
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        nn.utils.clip_grad_norm_(self.policy.actor.parameters(), self.cfg.grad_clip_norm)
        self.actor_optim.step()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + (self.cfg.target_entropy or 0.0))).mean()
        self.alpha_optim.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optim.step()
        return {
            "actor_loss": actor_loss.item(),
            "alpha": self.alpha.item(),
            "entropy": -log_prob.mean().item(),
            "noise_abs_mean": noise.detach().abs().mean().item(),
            "actor_moved": self._actor_moved(),
        }

    @torch.no_grad()
    def _actor_moved(self) -> float:
        """How far the noise actor's weights are from where this process's first update found them (relative L2):
        the guards' sign of an actor that never leaves its base (robo_rl/algos/guards.py)."""
        now = torch.cat([p.detach().flatten() for p in self.policy.actor.parameters()])
        if getattr(self, "_actor_start", None) is None or self._actor_start.shape != now.shape:
            self._actor_start = now.clone()
        return float((now - self._actor_start).norm() / self._actor_start.norm().clamp_min(1e-12))

    # --- prior data -----------------------------------------------------------------------------
    def relabel_prior(self, batch: dict) -> dict:
        """Demonstrations as decisions: a chunk opens at every E-th step of an episode (as an actor running the
        policy would have opened them), and its noise is the base run backwards from the demonstrated actions
        (`invert`; a noise-space critic learns from it, an action critic needs none). A base that cannot be
        inverted leaves the noise at zero, for the action critic only."""
        p, n = self.policy, len(batch["step"])
        steps = np.asarray(batch["step"])
        decision = ((steps >= 1) & ((steps - 1) % p.execute_steps == 0)).astype(np.float32)
        noise = np.zeros((n, p.noise_dim), np.float32)
        model = getattr(p.base, "model", None)
        if model is not None and hasattr(model, "invert"):
            chunk_len = p.noise_shape[0]
            rows = np.flatnonzero(decision)
            for lo in range(0, len(rows), 512):
                part = rows[lo : lo + 512]
                chunks = np.stack([_following_actions(batch, i, chunk_len) for i in part])
                obs = {
                    "state": torch.as_tensor(np.asarray(batch["state"][part - 1]), dtype=torch.float32),
                    "images": {
                        k[len("image/") :]: torch.as_tensor(np.asarray(v[part - 1]))
                        for k, v in batch.items()
                        if k.startswith("image/")
                    },
                    **instruction_subset(batch, part - 1),  # each record's instruction (the learner adds them)
                }
                with torch.no_grad():
                    features = model.features(obs)
                w = model.invert(features, torch.as_tensor(chunks), bound=p.noise_bound)
                noise[part] = w.flatten(1).numpy()
        return {**batch, "extra/decision": decision[:, None], "extra/noise": noise}

    # --- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "noise_critic": self.noise_critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optim": self.actor_optim.state_dict(),
            "alpha_optim": self.alpha_optim.state_dict(),
            "critic_optims": [o.state_dict() for o in self.critic_optims.values()],
        }
        if self.action_critic is not None:
            state["action_critic"] = self.action_critic.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.noise_critic.load_state_dict(state["noise_critic"])
        if self.action_critic is not None:
            self.action_critic.load_state_dict(state["action_critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.alpha_optim.load_state_dict(state["alpha_optim"])
        for optim, saved in zip(self.critic_optims.values(), state["critic_optims"], strict=True):
            optim.load_state_dict(saved)


def _following_actions(batch: dict, row: int, length: int) -> np.ndarray:
    """The `length` actions from record `row` on inside its episode, the last repeated past the episode's end."""
    out, i = [], row
    for _ in range(length):
        out.append(np.asarray(batch["action_executed"][i], np.float32))
        ends = batch["terminated"][i] or batch["truncated"][i]
        if not ends and i + 1 < len(batch["step"]) and batch["step"][i + 1] == batch["step"][i] + 1:
            i += 1
    return np.stack(out)


def build_dsrl(policy: NoisePolicy, observation_space, action_dim: int, state_names: tuple = (), **keys) -> DSRL:
    """`algo=dsrl`: needs `policy=dsrl` (a frozen flow/diffusion base steered by a noise actor); keys: DSRLConfig's.
    A decision spans the E executed steps of its chunk (E-step returns); with E = 1, `n_step` sets the returns."""
    if not isinstance(policy, NoisePolicy):
        raise ValueError("algo=dsrl needs policy=dsrl (a frozen flow or diffusion base and a noise actor)")
    cfg = config_from(DSRLConfig, keys, "algo")
    if cfg.intervention_bc_weight > 0:
        raise ValueError(
            "algo.intervention_bc_weight: DSRL's actor chooses noise, not actions, so there is no human "
            "action to regress it on (interventions train its action critic); leave it at 0"
        )
    e = policy.execute_steps
    spec = BatchSpec(
        batch_size=cfg.batch_size,
        batches=cfg.critic_updates_per_actor,
        n_step=e if e > 1 else cfg.n_step,
        gamma=cfg.gamma,
        chunk=e,
        extras=("noise",),
        where="decision",
    )
    return DSRL(policy, observation_space, cfg, spec)
