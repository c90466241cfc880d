"""PPO over the denoising chain of a flow/diffusion policy: ReinFlow (`policy=reinflow`) or DPPO-style
(`policy=dppo`); the chain and its log-probability are `policies/chain.py`'s.

On-policy: the algorithm's `BatchSpec.rollout_env_steps` tells the learner to collect that many env steps of the
current policy version (`robo_rl/data/rollout.py`; older versions' data is dropped and counted), hand them over as one
batch of decisions, and publish new weights after each update. Per update (one PPO iteration):

  values V(s) on the decision observations (the policy's features, detached), GAE(γ, λ) over each episode's
  decisions (a chunk of n steps discounts by γ^n; an episode cut by its time limit bootstraps from V of its last
  observation unless `bootstrap_truncated` is false), advantages normalised;
  `epochs` passes of minibatches (during the first `value_warmup_iterations`, the value's loss only):
  ratio = exp(clamp(log π_new − log π_old, ±log_ratio_clamp)),
  loss = −min(ratio·A, clip(ratio, 1 ± clip)·A) − entropy_coef·H + value_coef·(V − R)²
  guards, each before backward() (a run that measured nothing says so): before the first update the recorded
  log π must match the acting weights' recomputed at the actor's batch shape and at the minibatch's
  (`log_prob_tolerance`; else `LogProbMismatch`, naming the difference and the shapes); a minibatch whose
  |log π_new − log π_old| passes `skip_log_ratio` (before the clamp), or whose KL passes `target_kl` (which then
  ends the iteration's epochs), is skipped and counted, its weights untouched;
  `advantage=critic`: A(s, a) from an action critic trained by TD on every decision so far instead of GAE
  (`robo_rl/algos/chain_critic.py`), `critic_updates` TD steps per iteration before the policy's epochs;
  `advantage=group` (GRPO): the rollout is whole groups of episodes from one initial state and each decision's
  advantage is its episode's outcome against its group's (`robo_rl/algos/grpo.py`), not normalised again; no value
  network is built or trained; `clip_high` (any advantage): the ratio's upper clip 1 + clip_high (clip-higher);
  with a learned initial noise (`policy.initial_noise=learned`) and `clip_initial_noise`, x_0's term and the steps'
  each get their own ratio and clip, two surrogates summed (each sampling stage its own decision, as DPPO treats
  its denoising steps: choosing where the chain starts moves at its own pace, the velocity field at ReinFlow's)
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from policies.base import obs_rows
from policies.chain import ChainPolicy
from policies.mlp import mlp
from robo_rl.algos.base import Algorithm, BatchSpec
from robo_rl.algos.chain_critic import ChainActionCritic
from robo_rl.algos.grpo import group_advantages
from robo_rl.configs.algo import PPOConfig
from robo_rl.configs.typed import config_from
from robo_rl.errors import UserError

log = logging.getLogger(__name__)
LOG_PROB_CHECK_CALLS = 4  # policy calls at the actor's batch shape per check: the check costs a few forwards


class LogProbMismatch(UserError):
    """The recorded log-probabilities are not what the acting weights give before any update: PPO's ratio is off
    from its first step, so its KL stop trips (or its clip bites) on nothing learned."""


class PPO(Algorithm):
    def __init__(self, policy: ChainPolicy, cfg: PPOConfig, spec: BatchSpec) -> None:
        self.policy, self.cfg, self.batch_spec = policy, cfg, spec
        self.device = next(policy.parameters()).device
        self.grouped = cfg.advantage == "group"  # GRPO: no value network at all
        self.value = None if self.grouped else mlp(policy.model.feature_dim, list(cfg.value_hidden), 1).to(self.device)
        head = list(policy.initial_net.parameters()) if policy.initial_noise == "learned" else []
        in_head = set(map(id, head))
        rest = [p for p in policy.parameters() if p.requires_grad and id(p) not in in_head]
        groups = [{"params": rest}] + ([{"params": head, "lr": cfg.lr_initial_noise or cfg.lr_policy}] if head else [])
        self.policy_optim = torch.optim.Adam(groups, lr=cfg.lr_policy)
        self.value_optim = None if self.grouped else torch.optim.Adam(self.value.parameters(), lr=cfg.lr_value)
        self.iterations = 0
        self.acting_batch = 1  # observations per policy call on an actor (its actor.num_envs: the learner sets it)
        self.critic = (
            ChainActionCritic(
                policy,
                cfg.critic_hidden,
                cfg.critic_ensemble,
                cfg.lr_critic,
                cfg.critic_tau,
                cfg.critic_samples,
                cfg.critic_buffer,
                cfg.critic_target_clip,
            )
            if cfg.advantage == "critic"
            else None
        )

    def values(self, obs: dict) -> torch.Tensor:
        with torch.no_grad():
            features = self.policy.model.pooled(self.policy.model.features(obs))
        return self.value(features).squeeze(-1)

    def advantages(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over each episode's consecutive decisions; (advantages, returns)."""
        with torch.no_grad():
            v, v_next = self.values(batch["obs"]), self.values(batch["next_obs"])
        discount = self.discount(batch)
        delta = batch["reward"] + discount * v_next - v
        adv = torch.zeros_like(delta)
        running = torch.zeros((), device=delta.device)
        keep = batch["continues"].float() * discount * self.cfg.gae_lambda
        for i in range(len(delta) - 1, -1, -1):
            running = delta[i] + keep[i] * running
            adv[i] = running
        return adv, adv + v

    def discount(self, batch: dict) -> torch.Tensor:
        """γ^n of each decision's chunk, 0 after a termination, and after a time-limit cut unless it bootstraps."""
        discount = batch["discount"]
        if not self.cfg.bootstrap_truncated:
            discount = discount * (~batch["truncated"]).to(discount.dtype)
        return discount

    def update(self, batches: list[dict]) -> dict:
        batch = batches[0]
        n = len(batch["reward"])
        if n == 0:
            return {"decisions": 0}
        p, cfg = self.policy, self.cfg
        chain = batch["extras"]["chain"].view(n, *p.chain_shape)
        old_log_prob = batch["extras"]["log_prob"].view(n)
        recorded_diff = self.check_recorded_log_probs(batch["obs"], chain, old_log_prob)  # before anything learns
        if self.grouped:  # each episode against its group: already on a common scale, so not normalised again
            adv = group_advantages(batch["outcome"], batch["group"], batch["episode"], cfg.group_std_eps)
            returns = batch["outcome"]
        else:
            adv, returns = self.advantages(batch)
        critic_stats = {}
        if self.critic is not None:  # TD on every decision so far, then A = Q(s, a) − E_π Q(s, ·) in place of GAE's
            self.critic.add(batch, self.discount(batch))
            critic_stats = self.critic.update(cfg.critic_updates, cfg.critic_batch_size)
            adv = self.critic.advantages(batch["obs"], chain)
            critic_stats.update(critic_decisions=float(len(self.critic)))
        norm_adv = (adv - adv.mean()) / (adv.std() + 1e-8) if n > 1 and not self.grouped else adv
        high = cfg.clip if cfg.clip_high is None else cfg.clip_high
        stats = {"policy_loss": [], "value_loss": [], "approx_kl": [], "clip_frac": [], "entropy": []}
        stop, first, skipped, largest = False, True, {"ratio": 0, "kl": 0}, 0.0
        warmup = self.iterations < cfg.value_warmup_iterations
        split = cfg.clip_initial_noise is not None
        if split:  # the acting weights' x_0 and step terms (the rollout is this version's: the weights are the same)
            old_parts = self._parts(batch, chain)
            stats.update(approx_kl_initial=[], clip_frac_initial=[])
        for _ in range(cfg.epochs):
            order = torch.randperm(n)
            for lo in range(0, n, cfg.batch_size):
                idx = order[lo : lo + cfg.batch_size]
                obs = obs_rows(batch["obs"], idx)
                features = p.features(obs)  # once: the policy's chain and the value both read them (a VLA's prefix)
                a = norm_adv[idx]
                if split:
                    log_prob, entropy, initial, steps = p.chain_log_prob(obs, chain[idx], features, split=True)
                    raw = [initial - old_parts[0][idx], steps - old_parts[1][idx]]
                    ratio_0 = clamped_log_ratio(initial, old_parts[0][idx], cfg.log_ratio_clamp).exp()
                    ratio_k = clamped_log_ratio(steps, old_parts[1][idx], cfg.log_ratio_clamp).exp()
                    policy_loss = surrogate(ratio_k, a, cfg.clip, high) + surrogate(ratio_0, a, cfg.clip_initial_noise)
                else:
                    log_prob, entropy = p.chain_log_prob(obs, chain[idx], features)
                    raw = []
                log_ratio = clamped_log_ratio(log_prob, old_log_prob[idx], cfg.log_ratio_clamp)
                ratio = log_ratio.exp()
                if first:  # before any step: 0 unless acting and learning disagree
                    stats["start_log_ratio"] = [log_ratio.detach().abs().mean().item()]
                    self.check_minibatch_log_probs(log_prob, old_log_prob[idx], recorded_diff)
                    first = False
                with torch.no_grad():  # the guards, before backward(): a skipped minibatch changes no weight
                    worst = torch.stack([r.abs().max() for r in [log_prob - old_log_prob[idx], *raw]]).max()
                    worst, kl = torch.stack([worst, ((ratio - 1) - log_ratio).mean()]).tolist()  # one device sync
                largest = max(largest, worst)
                if cfg.skip_log_ratio is not None and worst > cfg.skip_log_ratio:
                    skipped["ratio"] += 1
                    continue
                if cfg.target_kl is not None and kl > cfg.target_kl:
                    skipped["kl"] += 1
                    stop = True
                    break
                if split:
                    with torch.no_grad():
                        stats["approx_kl_initial"].append(((ratio_0 - 1) - ratio_0.log()).mean().item())
                        stats["clip_frac_initial"].append(
                            ((ratio_0 - 1).abs() > cfg.clip_initial_noise).float().mean().item()
                        )
                else:
                    policy_loss = surrogate(ratio, a, cfg.clip, high)
                loss = policy_loss - cfg.entropy_coef * entropy.mean()
                if self.value is not None:
                    value = self.value(p.model.pooled(features[0]).detach()).squeeze(-1)
                    value_loss = 0.5 * (value - returns[idx]).pow(2).mean()
                    loss = loss + cfg.value_coef * value_loss
                    stats["value_loss"].append(value_loss.item())
                    self.value_optim.zero_grad(set_to_none=True)
                if warmup:  # the value alone (the policy's graph is not backpropagated)
                    loss = cfg.value_coef * value_loss
                self.policy_optim.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(p.parameters(), cfg.grad_clip_norm)
                if not warmup:
                    self.policy_optim.step()
                if self.value is not None:
                    nn.utils.clip_grad_norm_(self.value.parameters(), cfg.grad_clip_norm)
                    self.value_optim.step()
                for key, value in (
                    ("policy_loss", policy_loss.item()),
                    ("approx_kl", kl),
                    ("entropy", entropy.mean().item()),
                    ("clip_frac", ((ratio < 1 - cfg.clip) | (ratio > 1 + high)).float().mean().item()),
                ):
                    stats[key].append(value)
            if stop:
                break
        self.iterations += 1
        if skipped["ratio"] or skipped["kl"]:
            log.warning(
                "PPO iteration %d: minibatches skipped before backward(): %d with a |log ratio| past "
                "algo.skip_log_ratio=%s (the largest %.3g), %d with a KL past algo.target_kl=%s (epochs stopped)",
                self.iterations,
                skipped["ratio"],
                cfg.skip_log_ratio,
                largest,
                skipped["kl"],
                cfg.target_kl,
            )
        out = {k: float(np.mean(v)) for k, v in stats.items() if v}
        if recorded_diff is not None:
            out["log_prob_recorded_diff"] = recorded_diff
        out.update(
            minibatches_skipped_ratio=skipped["ratio"],
            minibatches_skipped_kl=skipped["kl"],
            max_abs_log_ratio=largest,
            decisions=n,
            rollout_env_steps=int(batch["steps"].sum()),
            return_mean=float(returns.mean()),
            advantage_std=float(adv.std()) if n > 1 else 0.0,
            ppo_iteration=self.iterations,
            value_warmup=float(warmup),
            **critic_stats,
        )
        if self.grouped:
            out.update(groups=int(batch["group"].max()) + 1, episodes=int(batch["episode"].max()) + 1)
        return out

    @torch.no_grad()
    def check_recorded_log_probs(self, obs: dict, chain: torch.Tensor, recorded: torch.Tensor) -> float | None:
        """The largest |log π recomputed − log π recorded| of the first decisions, recomputed at the actor's batch
        shape (`acting_batch` rows per call, a few calls); past `log_prob_tolerance` a `LogProbMismatch`."""
        tol, b = self.cfg.log_prob_tolerance, max(1, int(self.acting_batch))
        if tol is None:
            return None
        rows = min(len(recorded), b * LOG_PROB_CHECK_CALLS)
        calls = [slice(lo, min(lo + b, rows)) for lo in range(0, rows, b)]
        again = torch.cat([self.policy.chain_log_prob(obs_rows(obs, s), chain[s])[0] for s in calls])
        diff = float((again - recorded[:rows]).abs().max())
        if not diff <= tol:  # a NaN fails too
            raise LogProbMismatch(
                f"PPO: the rollout's recorded log-probabilities differ from the acting weights' recomputed at the "
                f"actor's batch shape ({b} observations per call, actor.num_envs) by up to {diff:.4g} over {rows} "
                f"decisions (algo.log_prob_tolerance={tol}): these weights did not act this rollout, or log pi "
                "depends on which observations share a batch; PPO's ratio would be wrong before any update"
            )
        return diff

    def check_minibatch_log_probs(self, log_prob: torch.Tensor, recorded: torch.Tensor, actor_diff: float | None):
        """Before the first step: log π recomputed at the minibatch's shape must match the record too; past the
        tolerance while the actor's shape matched, log π depends on the batch shape (`LogProbMismatch`)."""
        tol = self.cfg.log_prob_tolerance
        if tol is None:
            return
        diff = float((log_prob.detach() - recorded).abs().max())
        if not diff <= tol:
            raise LogProbMismatch(
                f"PPO: log pi depends on the batch shape: recomputed at the minibatch's shape ({len(recorded)} "
                f"observations per call, algo.batch_size={self.cfg.batch_size}) it differs from the record by up to "
                f"{diff:.4g}, where at the actor's shape ({max(1, int(self.acting_batch))} per call) it differed by "
                f"{actor_diff:.4g} (algo.log_prob_tolerance={tol}), before any update: PPO's ratio starts away from 1 "
                "and its KL stop would trip on nothing learned; make the policy's log-probability independent of the "
                "batch (no batch statistics, padding masked out)"
            )

    @torch.no_grad()
    def _parts(self, batch: dict, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_0's and the steps' log-probability terms of every decision under the current weights."""
        parts = []
        for lo in range(0, len(chain), self.cfg.batch_size):
            sl = slice(lo, lo + self.cfg.batch_size)
            parts.append(self.policy.chain_log_prob(obs_rows(batch["obs"], sl), chain[sl], split=True)[2:])
        return torch.cat([q[0] for q in parts]), torch.cat([q[1] for q in parts])

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "policy_optim": self.policy_optim.state_dict(),
            "iterations": self.iterations,
            **({"critic": self.critic.state_dict()} if self.critic is not None else {}),
            **(
                {"value": self.value.state_dict(), "value_optim": self.value_optim.state_dict()}
                if self.value is not None
                else {}
            ),
        }

    def load_state_dict(self, state: dict) -> None:
        if (self.value is None) != ("value" not in state):
            raise ValueError(
                "this checkpoint was saved with algo.advantage="
                + (
                    "group: it has no value network (resume with algo.advantage=group)"
                    if self.value is not None
                    else "gae or critic: its value network has no place in algo.advantage=group (resume with the same "
                    "algo.advantage)"
                )
            )
        self.policy.load_state_dict(state["policy"])
        self.policy_optim.load_state_dict(state["policy_optim"])
        if self.value is not None:
            self.value.load_state_dict(state["value"])
            self.value_optim.load_state_dict(state["value_optim"])
        self.iterations = int(state["iterations"])
        if self.critic is not None:
            if "critic" not in state:
                raise ValueError(
                    "this checkpoint was saved with algo.advantage=gae: it has no action critic to resume "
                    "algo.advantage=critic from (resume with algo.advantage=gae)"
                )
            self.critic.load_state_dict(state["critic"])


def clamped_log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, bound: float) -> torch.Tensor:
    """log(π_new / π_old), clamped to ±bound (`algo.log_ratio_clamp`) before PPO exponentiates it."""
    return (log_prob - old_log_prob).clamp(-bound, bound)


def surrogate(
    ratio: torch.Tensor, advantage: torch.Tensor, clip: float, clip_high: float | None = None
) -> torch.Tensor:
    """PPO's clipped surrogate loss; the ratio kept within [1 − clip, 1 + clip_high] (clip_high: clip if None)."""
    high = clip if clip_high is None else clip_high
    return -torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + high) * advantage).mean()


def build_ppo(policy: ChainPolicy, observation_space, action_dim: int, state_names: tuple = (), **keys) -> PPO:
    """`algo=ppo`: needs `policy=reinflow` or `policy=dppo` (a flow/diffusion policy's stochastic chain); keys:
    PPOConfig's (their ranges are checked there; here only what relates a setting to the policy or another)."""
    if not isinstance(policy, ChainPolicy):
        raise ValueError(
            "algo=ppo fine-tunes a denoising chain: use policy=reinflow (a flow) or policy=dppo (a diffusion policy)"
        )
    cfg = config_from(PPOConfig, keys, "algo")
    if cfg.clip_initial_noise is not None and policy.initial_noise != "learned":
        raise ValueError(
            f"algo.clip_initial_noise needs policy.initial_noise=learned (got {cfg.clip_initial_noise}, "
            f"policy.initial_noise={policy.initial_noise})"
        )
    grouped = cfg.advantage == "group"
    if grouped and cfg.value_warmup_iterations:
        raise ValueError(
            f"algo.value_warmup_iterations={cfg.value_warmup_iterations} trains a value network first; "
            "algo.advantage=group has none: set it to 0"
        )
    if cfg.clip_high is not None and cfg.clip_high < cfg.clip:
        raise ValueError(f"algo.clip_high={cfg.clip_high} must be at least algo.clip={cfg.clip} (the upper clip)")
    clip_q = cfg.critic_target_clip
    if clip_q is not None and clip_q[0] >= clip_q[1]:
        raise ValueError(f"algo.critic_target_clip must be [low, high] with low < high, got {list(clip_q)}")
    spec = BatchSpec(
        batch_size=cfg.batch_size,
        gamma=cfg.gamma,
        extras=("chain", "log_prob"),
        rollout_env_steps=int(cfg.rollout_env_steps),
        group_size=cfg.group_size if grouped else 0,
        group_outcome=cfg.group_outcome,
    )
    return PPO(policy, cfg, spec)
