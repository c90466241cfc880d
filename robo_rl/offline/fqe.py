"""Fitted Q evaluation (FQE; Le, Voloshin and Yue, 2019, arXiv:1903.08738): the return a fixed policy would earn,
estimated from episodes some other policy collected, without running it.

The episodes are cut into decisions of E steps (E = the policy's `execute_steps`: a chunk runs open-loop, so its
value is that of the E actions together), from step 0 of each episode on:

    (s_t, a_{t..t+E-1}, R = Σ_{k<E} γ^k r_{t+k}, s_{t+E}, d)      (a shorter last window where the episode ends)

and Q^π is fitted by repeated regression onto its own bootstrapped target

    Q(s, a) ← R + γ^len · (1 − terminated) · Q'(s', π(s'))        (Q' a slowly following copy)

with π(s') the chunk the policy itself picks at s' (deterministically, computed once: π does not change). The
policy's estimated return is the mean of Q(s_0, π(s_0)) over the episodes' first observations. Nothing of the policy
but its actions is used, so any acting policy can be evaluated: a run's checkpoint, a BC or flow checkpoint, a VLA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from policies.encoders import encoder_for_space
from policies.mlp import mlp
from robo_rl.data.datasets import Episode
from robo_rl.envs.base import make_observation_space
from robo_rl.policy_io import policy_action


@dataclass
class Decisions:
    """The E-step decisions of a set of episodes, as tensors (images uint8)."""

    obs: dict
    actions: torch.Tensor  # [N, E·A] the executed actions (a short last window repeats its last action)
    reward: torch.Tensor  # [N] discounted within the window
    discount: torch.Tensor  # [N] γ^len, 0 where the episode terminated inside the window
    next_obs: dict
    starts: dict  # each episode's first observation
    behaviour_return: float  # the data's own mean discounted return from the episodes' starts


def observation_space_of(episodes: list[Episode]):
    """The contract observation space of the episodes' records (state size, each camera's image size)."""
    rec = episodes[0].records
    cameras = {k[len("image/") :]: tuple(v.shape[1:3]) for k, v in rec.items() if k.startswith("image/")}
    return make_observation_space(rec["state"].shape[1], cameras)


def _rows(rec: dict, rows) -> dict:
    images = {k[len("image/") :]: np.asarray(v[rows]) for k, v in rec.items() if k.startswith("image/")}
    return {"state": np.asarray(rec["state"][rows], np.float32), "images": images}


def _stack(parts: list[dict]) -> dict:
    images = {k: torch.as_tensor(np.concatenate([p["images"][k] for p in parts])) for k in parts[0]["images"]}
    return {"state": torch.as_tensor(np.concatenate([p["state"] for p in parts])), "images": images}


def decisions_of(episodes: list[Episode], execute_steps: int, gamma: float) -> Decisions:
    """Cut the episodes (each with at least one transition) into decisions of `execute_steps` steps."""
    e = int(execute_steps)
    obs, nxt, starts, actions, rewards, discounts, returns = [], [], [], [], [], [], []
    for ep in episodes:
        rec, t_end = ep.records, len(ep)
        starts.append(_rows(rec, [0]))
        returns.append(float(np.sum(rec["reward"][1:] * gamma ** np.arange(t_end))))
        begin = np.arange(0, t_end, e)
        for t in begin:
            window = np.arange(t + 1, min(t + e, t_end) + 1)  # the records whose actions this decision ran
            act = rec["action_executed"][window]
            act = np.concatenate([act, np.repeat(act[-1:], e - len(act), axis=0)])
            actions.append(act.reshape(-1))
            rewards.append(float(np.sum(rec["reward"][window] * gamma ** np.arange(len(window)))))
            ended = bool(np.any(rec["terminated"][window]))
            discounts.append(0.0 if ended else gamma ** len(window))
        obs.append(_rows(rec, begin))
        nxt.append(_rows(rec, np.minimum(begin + e, t_end)))
    return Decisions(
        _stack(obs),
        torch.as_tensor(np.stack(actions), dtype=torch.float32),
        torch.as_tensor(rewards, dtype=torch.float32),
        torch.as_tensor(discounts, dtype=torch.float32),
        _stack(nxt),
        _stack(starts),
        float(np.mean(returns)),
    )


@torch.no_grad()
def policy_chunks(policy, obs: dict, execute_steps: int) -> torch.Tensor:
    """[N, E·A]: the first E actions the policy runs from each observation, deterministically, as from an episode's
    start (its chunk queue emptied first; a chunked policy's later calls in the window keep to that chunk)."""
    reset = getattr(policy, "reset", lambda: None)
    out = []
    for i in range(len(obs["state"])):
        row = {"state": obs["state"][i].numpy(), "images": {k: v[i].numpy() for k, v in obs["images"].items()}}
        reset()
        out.append(np.concatenate([policy_action(policy, row, True) for _ in range(execute_steps)]))
    return torch.as_tensor(np.stack(out), dtype=torch.float32)


class FQENetwork(nn.Module):
    def __init__(self, observation_space, chunk_dim: int, hidden) -> None:
        super().__init__()
        self.encoder = encoder_for_space(observation_space)
        self.q = mlp(self.encoder.out_dim + chunk_dim, list(hidden), 1, layer_norm=True)

    def forward(self, obs: dict, chunk: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([self.encoder(obs), chunk], dim=-1)).squeeze(-1)


def _take(obs: dict, idx: torch.Tensor) -> dict:
    return {"state": obs["state"][idx], "images": {k: v[idx] for k, v in obs["images"].items()}}


def fitted_q_evaluation(policy, episodes: list[Episode], execute_steps: int, cfg) -> dict:
    """FQE of `policy` on `episodes` with the gate's settings `cfg` (gamma, fqe_*, seed): its estimated return, the
    data's own, and the fit's last TD loss. Seeded, and the caller's torch random state is left as it was."""
    data = decisions_of(episodes, execute_steps, cfg.gamma)
    next_chunk = policy_chunks(policy, data.next_obs, execute_steps)
    start_chunk = policy_chunks(policy, data.starts, execute_steps)
    if next_chunk.shape[1] != data.actions.shape[1]:
        raise ValueError(
            f"the policy acts in {next_chunk.shape[1] // execute_steps} dimensions, the data's actions have "
            f"{data.actions.shape[1] // execute_steps}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        q = FQENetwork(observation_space_of(episodes), data.actions.shape[1], cfg.fqe_hidden)
        target = FQENetwork(observation_space_of(episodes), data.actions.shape[1], cfg.fqe_hidden)
        target.load_state_dict(q.state_dict())
        target.requires_grad_(False)
        optim = torch.optim.Adam(q.parameters(), lr=cfg.fqe_lr)
        n, losses = len(data.reward), []
        for _ in range(cfg.fqe_steps):
            idx = torch.randint(n, (min(cfg.fqe_batch_size, n),))
            with torch.no_grad():
                backup = data.reward[idx] + data.discount[idx] * target(_take(data.next_obs, idx), next_chunk[idx])
            loss = F.mse_loss(q(_take(data.obs, idx), data.actions[idx]), backup)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            with torch.no_grad():
                for tp, p in zip(target.parameters(), q.parameters(), strict=True):
                    tp.lerp_(p, cfg.fqe_tau)
            losses.append(loss.item())
        with torch.no_grad():
            starts = q(data.starts, start_chunk)
    return {
        "estimate": float(starts.mean()),
        "estimate_std": float(starts.std()) if len(starts) > 1 else 0.0,
        "behaviour_return": data.behaviour_return,
        "decisions": n,
        "td_loss": float(np.mean(losses[-50:])),
        "execute_steps": int(execute_steps),
    }
