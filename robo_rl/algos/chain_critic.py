"""PPO's advantages from an action critic trained by TD on every decision collected so far (`algo.advantage=critic`).

GAE scores each decision by the returns of the episode it was in: on a sparse task with a few dozen episodes per
iteration that is mostly the episode's luck (BENCHMARKS.md, ReinFlow on Lift). Here an ensemble Q_i(s, a) on the
executed chunk a (the chain's end, clipped, its first `execute_steps` actions) learns by TD from all the iterations'
decisions, which it keeps (a FIFO of `critic_buffer` decisions, saved with the algorithm for an exact resume):

  target  r + γ^n·(1 − cut)·mean_i Q'_i(s', a'),  a' the current chain's chunk at s' (sampled as when acting),
          clipped to `critic_target_clip` where given, Q' the Polyak-averaged copy
  A(s, a) = mean_i Q_i(s, a) − (1/M)·Σ_j mean_i Q_i(s, a_j),  a_j the current chain's chunks at s (M = `critic_samples`)

PPO's clipped surrogate and the chain's exact log-probability are unchanged: only where the advantage comes from
differs (the critic reuses every transition many times, as DSRL's does, where GAE sees each once).
"""

from __future__ import annotations

import copy

import torch
from torch.nn import functional as F

from policies.base import obs_rows
from policies.chain import ChainPolicy
from policies.mlp import EnsembleMLP
from robo_rl.algos.sac import soft_update


class ChainActionCritic:
    def __init__(
        self,
        policy: ChainPolicy,
        hidden: tuple[int, ...],
        ensemble: int,
        lr: float,
        tau: float,
        samples: int,
        buffer: int,
        target_clip: tuple[float, float] | None,
    ) -> None:
        self.policy, self.tau, self.samples, self.capacity = policy, tau, int(samples), int(buffer)
        self.target_clip = tuple(target_clip) if target_clip is not None else None
        self.device = next(policy.parameters()).device
        with torch.no_grad():  # the executed chunk's width (a VLA's chain is padded to its widest action)
            self.action_dim = self.executed(torch.zeros(1, *policy.model.noise_shape, device=self.device)).shape[1]
        self.q = EnsembleMLP(ensemble, policy.model.feature_dim + self.action_dim, list(hidden), 1).to(self.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optim = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.data: dict | None = None  # {"obs", "next_obs", "reward", "discount", "action"}: tensors on the device

    # --- the pieces ------------------------------------------------------------------------------
    @torch.no_grad()
    def features(self, obs: dict) -> tuple:
        """The policy's features of `obs` (what its chain samples from), computed once for the Q inputs and every
        chunk sampled at `obs` (a VLA's prefix is the costly part)."""
        return self.policy.features(obs)

    def pooled(self, features: tuple) -> torch.Tensor:
        return self.policy.model.pooled(features[0])

    def executed(self, chain_end: torch.Tensor) -> torch.Tensor:
        """The actions a chain's end puts into the env: clipped, the first `execute_steps`, flattened."""
        return self.policy.model.to_actions(chain_end)[:, : self.policy.execute_steps].flatten(1)

    @torch.no_grad()
    def sampled_actions(self, obs: dict, features: tuple) -> torch.Tensor:
        return self.executed(self.policy.sample_chain(obs, features=features)[0][:, -1])

    def values(self, net, features: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[E, B] Q-values."""
        return net(torch.cat([features, action], dim=-1)).squeeze(-1)

    # --- data ----------------------------------------------------------------------------------
    def add(self, batch: dict, discount: torch.Tensor) -> None:
        """One iteration's decisions (the chain's end as executed; `discount` with any time-limit cut applied)."""
        n = len(batch["reward"])
        chain_end = batch["extras"]["chain"].view(n, *self.policy.chain_shape)[:, -1]
        new = {
            "obs": batch["obs"],
            "next_obs": batch["next_obs"],
            "reward": batch["reward"].float(),
            "discount": discount.float(),
            "action": self.executed(chain_end),
        }
        self.data = new if self.data is None else concat(self.data, new)
        size = len(self.data["reward"])
        if size > self.capacity:
            self.data = take(self.data, slice(size - self.capacity, size))

    def __len__(self) -> int:
        return 0 if self.data is None else len(self.data["reward"])

    # --- learning ------------------------------------------------------------------------------
    def update(self, updates: int, batch_size: int) -> dict:
        losses, q_means = [], []
        for _ in range(updates):
            rows = torch.randint(len(self), (min(batch_size, len(self)),), device=self.device)
            b = take(self.data, rows)
            with torch.no_grad():
                nxt = self.features(b["next_obs"])
                next_q = self.values(self.target, self.pooled(nxt), self.sampled_actions(b["next_obs"], nxt))
                target = b["reward"] + b["discount"] * next_q.mean(0)
                if self.target_clip is not None:
                    target = target.clamp(*self.target_clip)
            q = self.values(self.q, self.pooled(self.features(b["obs"])), b["action"])
            loss = F.mse_loss(q, target.expand_as(q))
            self.optim.zero_grad(set_to_none=True)
            loss.backward()
            self.optim.step()
            soft_update(self.target, self.q, self.tau)
            losses.append(loss.item())
            q_means.append(q.mean().item())
        return {
            "critic_loss": float(sum(losses) / max(len(losses), 1)),
            "q_mean": float(sum(q_means) / max(len(q_means), 1)),
        }

    @torch.no_grad()
    def advantages(self, obs: dict, chain: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """Q(s, a) − E_{a'~π(s)} Q(s, a') for the recorded chains [B, K′+1, chunk, A]."""
        out = []
        for lo in range(0, len(chain), chunk):
            sl = slice(lo, lo + chunk)
            o = obs_rows(obs, sl)
            features = self.features(o)
            pooled = self.pooled(features)
            q = self.values(self.q, pooled, self.executed(chain[sl, -1])).mean(0)
            baseline = torch.stack(
                [self.values(self.q, pooled, self.sampled_actions(o, features)).mean(0) for _ in range(self.samples)]
            ).mean(0)
            out.append(q - baseline)
        return torch.cat(out)

    # --- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "q": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optim": self.optim.state_dict(),
            "data": self.data,
        }

    def load_state_dict(self, state: dict) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optim.load_state_dict(state["optim"])
        data = state["data"]
        self.data = None if data is None else map_tensors(data, lambda t: t.to(self.device))


def map_tensors(tree, fn):
    """`fn` on each tensor of a batch; a list (an observation's instruction per row) is kept as it is."""
    if isinstance(tree, dict):
        return {k: map_tensors(v, fn) for k, v in tree.items()}
    return tree if isinstance(tree, list) else fn(tree)


def concat(a, b):
    """Two batches joined along the rows; an observation's instructions (a list per row) too."""
    if isinstance(a, dict):
        return {k: concat(a[k], b[k]) for k in a}
    return a + b if isinstance(a, list) else torch.cat([a, b])


def take(tree, rows):
    """The given rows (a slice or a tensor of indices) of a batch, instructions included."""
    if isinstance(tree, dict):
        return {k: take(v, rows) for k, v in tree.items()}
    if isinstance(tree, list):
        return tree[rows] if isinstance(rows, slice) else [tree[i] for i in rows.tolist()]
    return tree[rows]
