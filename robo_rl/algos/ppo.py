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
  `advantage=critic`: A(s, a) from an action critic trained by TD on every decision so far instead of GAE
  (`robo_rl/algos/chain_critic.py`), `critic_updates` TD steps per iteration before the policy's epochs;
  with a learned initial noise (`policy.initial_noise=learned`) and `clip_initial_noise`, x_0's term and the steps'
  each get their own ratio and clip, two surrogates summed (each sampling stage its own decision, as DPPO treats
  its denoising steps: choosing where the chain starts moves at its own pace, the velocity field at ReinFlow's)
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from policies.base import obs_rows
from policies.chain import ChainPolicy
from policies.mlp import mlp
from robo_rl.algos.base import Algorithm, BatchSpec
from robo_rl.algos.chain_critic import ChainActionCritic
from robo_rl.configs.algo import PPOConfig
from robo_rl.configs.typed import config_from


class PPO(Algorithm):
    def __init__(self, policy: ChainPolicy, cfg: PPOConfig, spec: BatchSpec) -> None:
        self.policy, self.cfg, self.batch_spec = policy, cfg, spec
        self.device = next(policy.parameters()).device
        self.value = mlp(policy.model.feature_dim, list(cfg.value_hidden), 1).to(self.device)
        head = list(policy.initial_net.parameters()) if policy.initial_noise == "learned" else []
        in_head = set(map(id, head))
        rest = [p for p in policy.parameters() if p.requires_grad and id(p) not in in_head]
        groups = [{"params": rest}] + ([{"params": head, "lr": cfg.lr_initial_noise or cfg.lr_policy}] if head else [])
        self.policy_optim = torch.optim.Adam(groups, lr=cfg.lr_policy)
        self.value_optim = torch.optim.Adam(self.value.parameters(), lr=cfg.lr_value)
        self.iterations = 0
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
        adv, returns = self.advantages(batch)
        chain = batch["extras"]["chain"].view(n, *p.chain_shape)
        critic_stats = {}
        if self.critic is not None:  # TD on every decision so far, then A = Q(s, a) − E_π Q(s, ·) in place of GAE's
            self.critic.add(batch, self.discount(batch))
            critic_stats = self.critic.update(cfg.critic_updates, cfg.critic_batch_size)
            adv = self.critic.advantages(batch["obs"], chain)
            critic_stats.update(critic_decisions=float(len(self.critic)))
        norm_adv = (adv - adv.mean()) / (adv.std() + 1e-8) if n > 1 else adv
        old_log_prob = batch["extras"]["log_prob"].view(n)
        stats = {"policy_loss": [], "value_loss": [], "approx_kl": [], "clip_frac": [], "entropy": []}
        stop = False
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
                    ratio_0 = clamped_log_ratio(initial, old_parts[0][idx], cfg.log_ratio_clamp).exp()
                    ratio_k = clamped_log_ratio(steps, old_parts[1][idx], cfg.log_ratio_clamp).exp()
                    policy_loss = surrogate(ratio_k, a, cfg.clip) + surrogate(ratio_0, a, cfg.clip_initial_noise)
                    with torch.no_grad():
                        stats["approx_kl_initial"].append(((ratio_0 - 1) - ratio_0.log()).mean().item())
                        stats["clip_frac_initial"].append(
                            ((ratio_0 - 1).abs() > cfg.clip_initial_noise).float().mean().item()
                        )
                else:
                    log_prob, entropy = p.chain_log_prob(obs, chain[idx], features)
                log_ratio = clamped_log_ratio(log_prob, old_log_prob[idx], cfg.log_ratio_clamp)
                ratio = log_ratio.exp()
                if "start_log_ratio" not in stats:  # before any step: 0 unless acting and learning disagree
                    stats["start_log_ratio"] = [log_ratio.detach().abs().mean().item()]
                if not split:
                    policy_loss = surrogate(ratio, a, cfg.clip)
                value = self.value(p.model.pooled(features[0]).detach()).squeeze(-1)
                value_loss = 0.5 * (value - returns[idx]).pow(2).mean()
                loss = policy_loss - cfg.entropy_coef * entropy.mean() + cfg.value_coef * value_loss
                if warmup:  # the value alone (the policy's graph is not backpropagated)
                    loss = cfg.value_coef * value_loss
                self.policy_optim.zero_grad(set_to_none=True)
                self.value_optim.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(p.parameters(), cfg.grad_clip_norm)
                nn.utils.clip_grad_norm_(self.value.parameters(), cfg.grad_clip_norm)
                if not warmup:
                    self.policy_optim.step()
                self.value_optim.step()
                with torch.no_grad():
                    kl = ((ratio - 1) - log_ratio).mean().item()
                for key, value in (
                    ("policy_loss", policy_loss.item()),
                    ("value_loss", value_loss.item()),
                    ("approx_kl", kl),
                    ("entropy", entropy.mean().item()),
                    ("clip_frac", ((ratio - 1).abs() > cfg.clip).float().mean().item()),
                ):
                    stats[key].append(value)
                if cfg.target_kl is not None and kl > cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.iterations += 1
        out = {k: float(np.mean(v)) for k, v in stats.items() if v}
        out.update(
            decisions=n,
            rollout_env_steps=int(batch["steps"].sum()),
            return_mean=float(returns.mean()),
            advantage_std=float(adv.std()) if n > 1 else 0.0,
            ppo_iteration=self.iterations,
            value_warmup=float(warmup),
            **critic_stats,
        )
        return out

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
            "value": self.value.state_dict(),
            "policy_optim": self.policy_optim.state_dict(),
            "value_optim": self.value_optim.state_dict(),
            "iterations": self.iterations,
            **({"critic": self.critic.state_dict()} if self.critic is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.value.load_state_dict(state["value"])
        self.policy_optim.load_state_dict(state["policy_optim"])
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


def surrogate(ratio: torch.Tensor, advantage: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate loss."""
    return -torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()


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
    clip_q = cfg.critic_target_clip
    if clip_q is not None and clip_q[0] >= clip_q[1]:
        raise ValueError(f"algo.critic_target_clip must be [low, high] with low < high, got {list(clip_q)}")
    spec = BatchSpec(
        batch_size=cfg.batch_size,
        gamma=cfg.gamma,
        extras=("chain", "log_prob"),
        rollout_env_steps=int(cfg.rollout_env_steps),
    )
    return PPO(policy, cfg, spec)
