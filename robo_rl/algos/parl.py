"""PA-RL's learner (Sobol Mark et al., 2024, arXiv:2412.06685): a chunk critic by TD, the picks distilled into the base.

One transition per decision (`BatchSpec.where="decision"`): s where a chunk was picked, its E executed actions
a = a_{t..t+E-1}, r = Σ_{k<E} γ^k r_{t+k}, s' where the next chunk is picked.

    critic      Q_j(s, a) ← r + γ^E · min_{j ∈ pair} Q'_j(s', c'),  c' = the target critic's best of
                `target_samples` base chunks at s' (the policy PA-RL acts with, without the local gradient steps);
                every executed chunk trains it, a human's included (what really ran). `target_from=recorded`
                ranks the chunks the actor sampled at s' instead (the next decision's `extra/candidates`): a VLA
                base is then never run by the learner, but once at each time-limit end, whose s' no decision
                followed (those samples kept and checkpointed, as the residual's b')
    base        every `distill_every` rounds: the base's own supervised loss (flow matching / denoising) towards the
                picked chunks: those the actors recorded (`extra/chosen`; demonstrations: their own actions), or the
                current critic's pick among fresh samples at the batch's states (`distill_target=reranked`)

The critic and the base both live in the acting policy (policies/parl.py), so the actors get both with each
weights message; the target critic and the optimisers stay here.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from policies.base import obs_rows
from policies.parl import RankedChunkPolicy
from policies.residual import observation_row
from robo_rl.algos.base import Algorithm, BatchSpec, KeptPredictions
from robo_rl.algos.dsrl import _following_actions
from robo_rl.algos.sac import soft_update
from robo_rl.configs.parl import ParlConfig
from robo_rl.configs.typed import config_from


class PARL(Algorithm):
    def __init__(self, policy: RankedChunkPolicy, cfg: ParlConfig, spec: BatchSpec) -> None:
        self.policy, self.cfg, self.batch_spec = policy, cfg, spec
        self.critic = policy.critic
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_optim = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr_critic)
        self.distils = cfg.distill_every > 0
        self.base_optim = torch.optim.Adam(policy.sampler.parameters(), lr=cfg.lr_base) if self.distils else None
        self.rounds = 0  # update rounds so far: the distillation's clock (resumed with the rest)
        self.last_distill: dict = {}
        self.predicted_candidates = KeptPredictions()  # target_from=recorded: time-limit ends' samples

    def update(self, batches: list[dict]) -> dict:
        metrics = {}
        for batch in batches:
            metrics = self.update_critic(batch)
        self.rounds += 1
        if self.distils and self.rounds % self.cfg.distill_every == 0:
            for i in range(self.cfg.distill_steps):
                self.last_distill = self.distill(batches[i % len(batches)])
        return {**metrics, **self.last_distill}  # the latest distillation's figures in every round's log

    def _step(self, optim, params, loss: torch.Tensor) -> float:
        optim.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.cfg.grad_clip_norm
        norm = nn.utils.clip_grad_norm_(params, clip if clip is not None else float("inf"))
        optim.step()
        return float(norm)

    @torch.no_grad()
    def next_candidates(self, batch: dict) -> torch.Tensor:
        """[B, n, E·A]: the base's chunks at each next_obs that the target ranks, their executed parts: sampled
        afresh (`target_from=sampled`), or those the actor recorded at the next decision (`recorded`)."""
        p = self.policy
        e, a = p.execute_steps, p.action_dim
        if self.cfg.target_from == "sampled":
            candidates = p.sampler.candidates(batch["next_obs"], self.cfg.target_samples)  # [B, n, chunk, A]
            return candidates[:, :, :e].flatten(2)
        k = p.record_candidates
        out = batch["next_extras"]["candidates"].view(-1, k, e * a).clone()
        missing = ~batch["next_extras_valid"].bool() & (batch["discount"] > 0)  # a time-limit end: none recorded
        for i in torch.nonzero(missing).flatten().tolist():
            row = obs_rows(batch["next_obs"], slice(i, i + 1))  # the row as the batch holds it (its device)
            sample = lambda _, row=row: p.sampler.candidates(row, k)[0, :, :e].flatten(1).cpu()  # noqa: E731
            kept = self.predicted_candidates.get(observation_row(batch["next_obs"], i), sample)
            out[i] = torch.from_numpy(kept).to(out.device)
        return out

    def update_critic(self, batch: dict) -> dict:
        with torch.no_grad():
            candidates = self.next_candidates(batch)
            b, n = candidates.shape[:2]
            executed = candidates.reshape(b * n, -1)
            features = self.target_critic.encoder(batch["next_obs"]).repeat_interleave(n, dim=0)
            qs = self.target_critic.from_features(features, executed).view(-1, b, n)  # [M, B, n]
            ranked = qs.mean(dim=0)  # [B, n]
            best = ranked.argmax(dim=1)
            spread = (ranked.max(dim=1).values - ranked.min(dim=1).values).mean()
            pair = torch.randperm(len(qs))[: self.cfg.critic_subsample]
            next_v = qs[pair].min(dim=0).values[torch.arange(b), best]
            target_q = batch["reward"] + batch["discount"] * next_v
            if self.cfg.target_q_clip is not None:
                target_q = target_q.clamp(*self.cfg.target_q_clip)
        qs = self.critic(batch["obs"], batch["action"].flatten(1))
        td_error = qs - target_q.unsqueeze(0)
        loss = 0.5 * (td_error**2).sum(dim=0).mean()
        norm = self._step(self.critic_optim, self.critic.parameters(), loss)
        soft_update(self.target_critic, self.critic, self.cfg.tau)
        return {
            "critic_loss": loss.item(),
            "q_mean": qs.mean().item(),
            "critic_grad_norm": norm,
            "target_q_mean": target_q.mean().item(),
            # how far apart the target critic puts the base's chunks at one state (best minus worst, batch mean):
            # against q_mean's range, whether the critic tells the candidates apart or only the states
            "target_q_spread": spread.item(),
        }

    def distill(self, batch: dict) -> dict:
        """One supervised step of the base towards the picked chunks (see the module's docstring)."""
        p, obs = self.policy, batch["obs"]
        shape = (len(obs["state"]), p.chunk_size, p.action_dim)
        if self.cfg.distill_target == "recorded":
            target = batch["extras"]["chosen"].view(shape)
            weight = 1.0 - batch["intervention"].float()  # a human's decision: its recorded pick never ran
        else:
            with torch.no_grad():
                target = p.rank(obs, p.sampler.candidates(obs, p.samples))[0]
            weight = torch.ones(shape[0], device=target.device)
        loss = p.sampler.distill_loss(obs, target, weight)
        norm = self._step(self.base_optim, list(p.sampler.parameters()), loss)
        return {"distill_loss": loss.item(), "distill_grad_norm": norm, "distill_rows": float(weight.sum())}

    # --- prior data -----------------------------------------------------------------------------
    def relabel_prior(self, batch: dict) -> dict:
        """Demonstrations as decisions: a chunk opens at every E-th step of an episode (as an actor would have opened
        them) and its `chosen` chunk is the demonstrated actions that follow, so distillation also keeps the base
        near the demonstrations."""
        p = self.policy
        steps = np.asarray(batch["step"])
        decision = ((steps >= 1) & ((steps - 1) % p.execute_steps == 0)).astype(np.float32)
        chosen = np.zeros((len(steps), p.chunk_size * p.action_dim), np.float32)
        for row in np.flatnonzero(decision):
            chosen[row] = _following_actions(batch, row, p.chunk_size).reshape(-1)
        return {**batch, "extra/decision": decision[:, None], "extra/chosen": chosen}

    # --- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "rounds": self.rounds,
            "predicted_candidates": self.predicted_candidates.state_dict(),
        }
        if self.base_optim is not None:
            state["base_optim"] = self.base_optim.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        if self.base_optim is not None and "base_optim" in state:
            self.base_optim.load_state_dict(state["base_optim"])
        self.rounds = int(state["rounds"])
        # absent from checkpoints written before they were kept
        self.predicted_candidates.load_state_dict(state.get("predicted_candidates", {}))


def build_parl(policy, observation_space, action_dim: int, state_names: tuple = (), **keys) -> PARL:
    """`algo=parl`: needs `policy=parl` (a stochastic base ranked by a chunk critic); keys: ParlConfig's."""
    if not isinstance(policy, RankedChunkPolicy):
        raise ValueError("algo=parl needs policy=parl (a stochastic base whose chunks a critic ranks)")
    cfg = config_from(ParlConfig, keys, "algo")
    if cfg.critic_subsample > policy.critic.q.ensemble:
        raise ValueError(
            f"algo.critic_subsample={cfg.critic_subsample} is more than the policy's {policy.critic.q.ensemble} critics"
        )
    if cfg.distill_every > 0 and policy.sampler.distill_loss is None:
        raise ValueError(
            "algo.distill_every: this base (a LeRobot policy) is not distilled here; set algo.distill_every=0 "
            "(the critic still ranks its samples)"
        )
    if cfg.target_q_clip is not None and cfg.target_q_clip[0] >= cfg.target_q_clip[1]:
        raise ValueError(f"algo.target_q_clip must be [low, high] with low < high, got {list(cfg.target_q_clip)}")
    recorded = cfg.target_from == "recorded"
    if recorded and not policy.record_candidates:
        raise ValueError(
            "algo.target_from=recorded ranks the chunks the actor recorded at each decision: set "
            "policy.record_candidates (e.g. 8) so that the actor records them"
        )
    e = policy.execute_steps
    spec = BatchSpec(
        batch_size=cfg.batch_size,
        batches=cfg.critic_updates,
        n_step=e,
        gamma=cfg.gamma,
        chunk=e,
        extras=("chosen", "candidates") if recorded else ("chosen",),
        where="decision",
        settled=recorded,  # the next decision's candidates come with its record: a running episode's newest waits
    )
    return PARL(policy, cfg, spec)
