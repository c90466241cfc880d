"""Residual off-policy RL on a frozen base (ResFiT): a critic ensemble scores the executed action; a deterministic
residual actor, zero at the start, learns the correction that raises it.

  critic:  Q_i(s, a_executed), target = r_n + γ^n · min_{random pair} Q'_j(s', clamp(b' + h·clip(ρ'(s', b') + ε)))
           with b' the base's action at s' (as the actor recorded it), ρ' the target residual, ε clipped noise,
           h the per-dimension half-width of the base's action range (`ResidualPolicy.compose`)
  actor:   maximise mean_i Q_i(s, clamp(b + h·ρ(s, b))), after `actor_start_updates` critic-only updates
  humans:  an intervention step's executed action is what the critic scores; optionally the residual is also
           regressed towards (executed − base), clipped to the residual's bound
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from policies.encoders import frozen_backbones, frozen_feature_cache
from policies.language import instruction_row
from policies.residual import ResidualPolicy, observation_row
from robo_rl.algos.base import Algorithm, BatchSpec, KeptPredictions, check_augmentation, prepare_images
from robo_rl.algos.sac import CriticEnsemble, soft_update
from robo_rl.configs.algo import ResidualConfig, SACConfig
from robo_rl.configs.typed import config_from
from robo_rl.precision import autocast, resolve_precision


class ResidualAlgorithm(Algorithm):
    def __init__(self, policy: ResidualPolicy, observation_space, cfg: ResidualConfig, spec: BatchSpec) -> None:
        self.policy, self.cfg, self.batch_spec = policy, cfg, spec
        check_augmentation(cfg.image_augmentation)
        critic_cfg = SACConfig(
            num_critics=cfg.num_critics, critic_hidden=cfg.critic_hidden, critic_layer_norm=cfg.critic_layer_norm
        )
        self.device = next(policy.parameters()).device  # the policy's: the learner moved it there
        self.critic = CriticEnsemble(  # it scores the action with the history it was chosen after (a delay's state)
            observation_space,
            policy.action_dim + policy.history_dim,
            critic_cfg,
            policy.encoder_config,
            share_frozen_from=policy.encoder,
        )
        self.critic.encoder.copy_state_normalisation(policy.encoder)  # the state as the residual reads it
        self.critic.to(self.device)
        shared = {id(m): m for m in frozen_backbones(self.critic, policy)}
        self.target_critic = copy.deepcopy(self.critic, shared).requires_grad_(False)
        self.target_policy = copy.deepcopy(policy, shared).requires_grad_(False)
        self.actor_optim = torch.optim.Adam(policy.parameters(), lr=cfg.lr_actor)
        self.critic_optim = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr_critic)
        self.compute_dtype = resolve_precision(cfg.precision, self.device)
        self.critic_updates = 0
        self.predicted_next_base = KeptPredictions()  # time-limit ends' b' (see next_base)
        self.set_bound_fraction(0.0 if cfg.bound_ramp_updates > 0 else 1.0)

    # --- the update ---------------------------------------------------------------------------
    def update(self, batches: list[dict]) -> dict:
        """Critic steps (one per batch), then, past `actor_start_updates`, one actor step on the last batch."""
        metrics = {}
        with frozen_feature_cache(self.policy, self.critic, self.target_critic):
            prepared = []
            for batch in batches:  # b' from the raw next observation (a fallback runs the base on it), then images
                batch = {**batch, "next_base": self.next_base(batch), **self.histories(batch)}
                prepared.append(
                    prepare_images(batch, self.policy.encoder, self.cfg.image_augmentation, self.cfg.augment_pad)
                )
            for batch in prepared:
                with autocast(self.compute_dtype, self.device):
                    metrics = self.update_critic(batch)
            self.critic_updates += len(batches)
            if self.critic_updates > self.cfg.actor_start_updates:
                with autocast(self.compute_dtype, self.device):
                    metrics.update(self.update_actor(prepared[-1]))
                self.advance_bound()
        return metrics

    @property
    def actor_updates(self) -> int:
        """Actor steps taken so far (one per `update` past `actor_start_updates`)."""
        past = self.critic_updates - self.cfg.actor_start_updates
        return max(0, -(-past // self.batch_spec.batches))

    def set_bound_fraction(self, fraction: float) -> None:
        for policy in (self.policy, self.target_policy):
            policy.bound_fraction.fill_(fraction)

    def advance_bound(self) -> None:
        """`bound_ramp_updates`: the bound grows with the actor's updates, so a young critic's errors can cost
        only small corrections; the exploration noise keeps the whole bound, so the critic still sees its range."""
        if self.cfg.bound_ramp_updates > 0:
            self.set_bound_fraction(min(1.0, self.actor_updates / self.cfg.bound_ramp_updates))

    def next_base(self, batch: dict) -> torch.Tensor:
        """b': the base's action at next_obs as the actor recorded it; where none was recorded (the step after
        an episode's last one: the batches are `settled`, so never a running episode's newest step, whose b'
        comes with its next record), the learner's copy of the base predicts it, unless the target does not bootstrap
        there (discount 0: a terminal step, whose b' is then the row's own base action, in range and unused). A
        VLA base costs ~0.1 s a prediction: asked for every terminal row of a batch it held the learner to one
        update a second. A row cut by the time limit is sampled many times: its b' is predicted once and kept
        (`predicted_next_base`, saved with the checkpoint, so a resumed run reads the same b' as one never
        stopped; the base is frozen, so a kept b' stays the base's)."""
        unrecorded = ~batch["next_extras_valid"].bool()
        base = torch.where(
            unrecorded.unsqueeze(-1), batch["extras"]["base_action"], batch["next_extras"]["base_action"]
        ).clone()
        missing = torch.nonzero(unrecorded & (batch["discount"] > 0)).flatten().tolist()
        for i in missing:
            obs = observation_row(batch["next_obs"], i)
            base[i] = torch.from_numpy(
                self.predicted_next_base.get(obs, lambda o: self.policy.base.base.predict_chunk(o)[0])
            )
        return base

    def histories(self, batch: dict) -> dict:
        """`policy.action_history`: the actions in flight at obs (as the actor recorded them) and at next_obs
        (recorded by the next decision; where there was none, the episode's end, obs's history shifted by the
        step's action: exact for 1-step returns, and its last n-1 actions missed with n-step ones, only at a
        time-limit end: a terminal one is not bootstrapped)."""
        if not self.policy.history_dim:
            return {"history": None, "next_history": None}
        history = batch["extras"]["prev_actions"]
        shifted = torch.cat([history[:, self.policy.action_dim :], batch["action"]], dim=-1)
        valid = batch["next_extras_valid"].bool().unsqueeze(-1)
        return {"history": history, "next_history": torch.where(valid, batch["next_extras"]["prev_actions"], shifted)}

    def scored(self, action: torch.Tensor, history: torch.Tensor | None) -> torch.Tensor:
        """The critic's action input: the action, and the history it was chosen after where there is one."""
        return action if history is None else torch.cat([action, history], dim=-1)

    def update_critic(self, batch: dict) -> dict:
        s = self.policy.scale
        with torch.no_grad():
            next_base = batch["next_base"]
            next_history = batch["next_history"]
            residual = self.target_policy.residual(
                self.target_policy.encoder(batch["next_obs"]), next_base, next_history
            )
            noise = (torch.randn_like(residual) * self.cfg.target_noise_std).clamp(
                -self.cfg.target_noise_clip, self.cfg.target_noise_clip
            )
            next_action = self.policy.compose(next_base, (residual + noise * s).clamp(-s, s))
            target_qs = self.target_critic(batch["next_obs"], self.scored(next_action, next_history))
            pair = torch.randperm(self.cfg.num_critics)[: self.cfg.critic_subsample]
            target_q = batch["reward"] + batch["discount"] * target_qs[pair].min(dim=0).values
            if self.cfg.target_q_clip is not None:
                target_q = target_q.clamp(*self.cfg.target_q_clip)
        # the executed action: the base's, corrected, or a human's
        qs = self.critic(batch["obs"], self.scored(batch["action"], batch["history"]))
        td_error = qs - target_q.unsqueeze(0)
        critic_loss = 0.5 * (td_error**2).mean(dim=1).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.grad_clip_norm)
        self.critic_optim.step()
        soft_update(self.target_critic, self.critic, self.cfg.tau)
        return {"critic_loss": critic_loss.item(), "q_mean": qs.mean().item(), "critic_grad_norm": grad_norm.item()}

    def update_actor(self, batch: dict) -> dict:
        base = batch["extras"]["base_action"]
        residual = self.policy.residual(self.policy.encoder(batch["obs"]), base, batch["history"])
        action = self.policy.compose(base, residual)
        self.critic.requires_grad_(False)  # the actor step must not move the critic
        q = self.critic(batch["obs"], self.scored(action, batch["history"])).mean(dim=0)
        self.critic.requires_grad_(True)
        actor_loss = -q.mean()
        if self.cfg.residual_l2 > 0:  # a correction must gain more Q than this costs, or it stays at the base
            actor_loss = actor_loss + self.cfg.residual_l2 * ((residual / self.policy.scale) ** 2).mean()
        human = batch["intervention"].bool()
        if self.cfg.intervention_bc_weight > 0 and human.any():
            wanted = self.policy.residual_of(batch["action"][human], base[human])
            actor_loss = actor_loss + self.cfg.intervention_bc_weight * F.mse_loss(residual[human], wanted)
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.grad_clip_norm)
        self.actor_optim.step()
        soft_update(self.target_policy, self.policy, self.cfg.tau)
        return {
            "actor_loss": actor_loss.item(),
            "residual_abs_mean": residual.detach().abs().mean().item(),
            "bound_fraction": float(self.policy.bound_fraction),
        }

    # --- prior data -----------------------------------------------------------------------------
    def relabel_prior(self, batch: dict) -> dict:
        """Demonstrations carry no base actions: the frozen base recomputes them, episode by episode in order
        (its chunk queue reset at each episode start), as an actor running it would have recorded them."""
        base = np.zeros_like(batch["action_executed"])
        self.policy.base.reset()
        n = len(batch["step"])
        for i in range(n - 1):
            if batch["step"][i] == 0:
                self.policy.base.reset()
            if batch["terminated"][i] or batch["truncated"][i] or batch["step"][i + 1] != batch["step"][i] + 1:
                continue  # the episode ends here: no decision at this observation
            obs = {
                "state": np.asarray(batch["state"][i]),
                "images": {k[len("image/") :]: np.asarray(v[i]) for k, v in batch.items() if k.startswith("image/")},
                **instruction_row(batch, i),  # the record's instruction, where the learner added them
            }
            base[i + 1] = self.policy.base.act(obs)  # the decision at obs_i chose record i + 1's action
        self.policy.base.reset()
        return {**batch, "extra/base_action": base, **self.prior_histories(batch)}

    def prior_histories(self, batch: dict) -> dict:
        """Demonstrations carry no history either: the decision at obs_i (record i + 1's extras) came after the
        actions of records i-k+1 .. i of its episode (record 0's zero action included), zeros before its start."""
        k = self.policy.history_dim // self.policy.action_dim
        if not k:
            return {}
        actions, dim = np.asarray(batch["action_executed"], np.float32), self.policy.action_dim
        history = np.zeros((len(actions), k * dim), np.float32)
        for i in range(len(actions) - 1):
            for j in range(k):  # slot j holds the action j - k + 1 records back from i (oldest first)
                back = i - (k - 1 - j)
                if back >= 0 and batch["step"][i] - batch["step"][back] == i - back:  # the same episode
                    history[i + 1, j * dim : (j + 1) * dim] = actions[back]
        return {"extra/prev_actions": history}

    # --- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "target_policy": self.target_policy.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "critic_updates": self.critic_updates,
            "predicted_next_base": self.predicted_next_base.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.target_policy.load_state_dict(state["target_policy"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.critic_updates = int(state["critic_updates"])
        # absent from checkpoints written before b' was kept
        self.predicted_next_base.load_state_dict(state.get("predicted_next_base", {}))


def build_residual(
    policy: ResidualPolicy, observation_space, action_dim: int, state_names: tuple = (), **keys
) -> ResidualAlgorithm:
    """`algo=residual`: needs `policy=residual` (a frozen base and a residual head); keys: ResidualConfig's."""
    if not isinstance(policy, ResidualPolicy):
        raise ValueError("algo=residual needs policy=residual (a frozen base and a residual head)")
    cfg = config_from(ResidualConfig, keys, "algo")
    spec = BatchSpec(
        batch_size=cfg.batch_size,
        batches=cfg.critic_updates_per_actor,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        extras=("base_action", "prev_actions") if policy.history_dim else ("base_action",),
        settled=True,  # b' at the newest step of a running episode arrives with its next record: not predicted
    )
    return ResidualAlgorithm(policy, observation_space, cfg, spec)
