"""Residual policy (ResFiT): a frozen base acts, a small residual corrects it every step.

    r = s · tanh(MLP(features(obs), base(obs)))                      in [-s, s], normalised units
    executed = clamp(base(obs) + h · r, max(-1, c - h), min(1, c + h))   (never clamping the base's own action)

Per dimension, c and h are the centre and half-width of the actions the base was trained on, the half-width
widened by (1 + s) (ResFiT's normalisation): a dimension the demonstrations moved little is corrected little, and
the base's own actions lie inside ±1/(1 + s) of the widened range. `action_range: full` (or a base that kept no
range) uses c = 0, h = 1: the correction is s in the task's own units.

The residual's last layer starts at exactly zero, so training starts at the base policy. The base (our behaviour
cloning or any LeRobot policy, `policies/base.py`) is frozen and stateful within an episode (an open-loop chunk
queue): it is built from the config by every process that needs it and is never part of the state dict, so
actors receive only the residual's weights.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from policies.acting import ActingPolicy
from policies.base import BasePolicy, ChunkedBase, NarrowedNoise, action_range, copy_sharing, state_statistics
from policies.chunking import CHUNK_EXTRA
from policies.encoders import EncoderConfig, encoder_for_space
from policies.language import instruction_row
from policies.mlp import mlp

MIN_HALF_RANGE = 0.05  # a dimension the demonstrations never moved can still be corrected a little


def load_base(spec: dict | BasePolicy, observation_space, action_dim: int) -> BasePolicy:
    """A base from its config: `{kind: bc, path}` (our behaviour cloning), `{kind: lerobot, path}` (a local
    pretrained_model folder or a hub id) or `{kind: remote, path: tcp://host:port}` (a policy server), sampled from
    initial noise of std `noise_scale` where one is set (policies/base.py's NarrowedNoise); a BasePolicy object is
    taken as it is."""
    if not isinstance(spec, dict):
        return spec
    if spec.get("noise_scale") is not None:
        return NarrowedNoise(
            load_base({**spec, "noise_scale": None}, observation_space, action_dim), spec["noise_scale"]
        )
    kind, path = spec.get("kind", "bc"), spec.get("path")
    if not path:
        raise ValueError(
            "the residual policy needs a base: set policy.base.path to a `robo-rl bc` checkpoint "
            "(<run>/bc/policy.pt) or a LeRobot pretrained_model folder"
        )
    if kind == "bc":
        from policies.bc import load_bc_base

        return load_bc_base(path, observation_space, action_dim, task=spec.get("task"))
    if kind == "lerobot":
        from policies.lerobot_base import LeRobotBase

        return LeRobotBase.load(path, observation_space, action_dim, task=spec.get("task"))
    if kind == "remote":  # `robo-rl policy serve` elsewhere: path is its tcp://host:port
        from policies.remote import DEFAULT_TIMEOUT_S, RemoteBase

        timeout_s, key = spec.get("timeout_s") or DEFAULT_TIMEOUT_S, spec.get("curve_key")
        return RemoteBase(path, observation_space, action_dim, timeout_s, spec.get("task"), key)
    raise ValueError(f"policy.base.kind must be bc, lerobot or remote, got '{kind}'")


def normalise_state_like_base(encoder, base: BasePolicy, mode: str) -> None:
    """`policy.state_norm`. `base`: the encoder (and the critics that copy it) read the state normalised by the
    base's own training statistics; `none`: raw, as the env gives it (fine where the env scales its state, as our
    pick task and gym-hil do; robosuite's is in metres, its informative part moving by millimetres)."""
    if mode not in ("none", "base"):
        raise ValueError(f"policy.state_norm must be none or base, got '{mode}'")
    if mode == "base":
        stats = state_statistics(base)
        if stats is None:
            raise ValueError(
                "policy.state_norm=base needs a base that keeps its state statistics (a robo-rl bc "
                "or flow checkpoint); this base keeps none: set policy.state_norm=none"
            )
        encoder.set_state_normalisation(*stats)


def _full_bound_if_absent(state_dict, prefix, *args) -> None:
    """A checkpoint written before `bound_fraction` existed used the whole bound."""
    state_dict.setdefault(prefix + "bound_fraction", torch.ones(()))


def observation_row(obs: dict, i: int) -> dict:
    """Row `i` of a batch of observations (tensors) as one contract observation (numpy), as a base takes it."""
    images = {k: v[i].cpu().numpy() for k, v in obs["images"].items()}
    return {"state": obs["state"][i].cpu().numpy(), "images": images, **instruction_row(obs, i)}


class ResidualPolicy(nn.Module, ActingPolicy):
    def __init__(
        self,
        observation_space,
        action_dim: int,
        base: dict | BasePolicy,
        scale: float = 0.1,
        hidden: list[int] = (256, 256),
        exploration_std: float = 0.05,
        warmup_noise: float = 0.2,
        encoder: dict | None = None,
        action_range: str = "data",
        state_norm: str = "none",
        exploration_floor: float = 1.0,
        action_history: int = 0,
    ) -> None:
        super().__init__()
        if not 0.0 <= exploration_floor <= 1.0:
            raise ValueError(f"policy.exploration_floor must be in [0, 1], got {exploration_floor}")
        self.action_dim, self.scale = action_dim, scale
        self.exploration_std, self.warmup_noise = exploration_std, warmup_noise
        self.exploration_floor = exploration_floor
        if action_history < 0:
            raise ValueError(f"policy.action_history must be >= 0 steps, got {action_history}")
        self.history_dim = action_history * action_dim  # the commands still in flight under a delay: see below
        self.encoder_config = EncoderConfig.parse(encoder)  # the critics build theirs from it
        self.encoder = encoder_for_space(observation_space, config=self.encoder_config)
        self.head = mlp(self.encoder.out_dim + action_dim + self.history_dim, list(hidden), action_dim)
        last = [m for m in self.head.modules() if isinstance(m, nn.Linear)][-1]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        base_spec = base if isinstance(base, dict) else {}
        self.base = ChunkedBase(load_base(base, observation_space, action_dim), base_spec.get("execute_steps"))
        if self.base.base.action_dim != action_dim:
            raise ValueError(f"the base acts in {self.base.base.action_dim} dimensions, the task in {action_dim}")
        self.set_action_range(action_range)
        normalise_state_like_base(self.encoder, self.base.base, state_norm)  # its critic copies it (algos/residual.py)
        self.extras_spec = {"base_action": ((action_dim,), np.float32)}  # stored with every step (see schema.py)
        self.chunked = self.base.base.chunk_size > 1  # its records also say which chunk each base action is from
        if self.chunked:
            self.extras_spec.update(CHUNK_EXTRA)
        if self.history_dim:
            self.extras_spec["prev_actions"] = ((self.history_dim,), np.float32)
        self.history = torch.zeros(1, self.history_dim)  # this episode's last commands, oldest first
        self.nan_base_steps = 0
        # the share of the bound s the residual may use now (`algo.bound_ramp_updates` grows it from 0 to 1): in
        # the state dict, so actors receive it with the weights and a checkpoint resumes it
        self.register_buffer("bound_fraction", torch.ones(()))
        self._register_load_state_dict_pre_hook(_full_bound_if_absent)

    def __deepcopy__(self, memo):  # frozen, and its chunk queue belongs to the episode: one for all copies
        return copy_sharing(self, memo, self.base)

    def set_action_range(self, mode: str) -> None:
        """Centre c and widened half-width h per dimension (buffers: they follow `.to(device)`, but are not in the
        state dict: every process derives them from the same base)."""
        if mode not in ("data", "full"):
            raise ValueError(f"policy.action_range must be data or full, got '{mode}'")
        rng = action_range(self.base.base) if mode == "data" else None
        if rng is None:  # the task's own [-1, 1], not widened
            centre, half = np.zeros(self.action_dim), np.ones(self.action_dim)
        else:
            low, high = rng
            centre = (high + low) / 2
            half = np.maximum((high - low) / 2, MIN_HALF_RANGE) * (1 + self.scale)  # widened by (1 + s)
        lo, hi = np.maximum(-1.0, centre - half), np.minimum(1.0, centre + half)
        for name, value in (("action_half", half), ("action_low", lo), ("action_high", hi)):
            self.register_buffer(name, torch.as_tensor(np.asarray(value, np.float32)), persistent=False)

    def compose(self, base: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The executed action: base + h · residual, kept inside the widened data range (and [-1, 1]); a base
        action outside that range is left as it is (a zero residual executes the base exactly), but the
        correction cannot push it further out."""
        high, low = torch.maximum(self.action_high, base), torch.minimum(self.action_low, base)
        return torch.maximum(torch.minimum(base + self.action_half * residual, high), low)

    def residual_of(self, executed: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """The residual (normalised units, clipped to ±s) that would turn `base` into `executed`."""
        return ((executed - base) / self.action_half).clamp(-self.scale, self.scale)

    def residual(
        self, features: torch.Tensor, base_action: torch.Tensor, history: torch.Tensor | None = None
    ) -> torch.Tensor:
        """f · s · tanh(MLP(features, base action, history)), in [-f·s, f·s]; f (`bound_fraction`) is 1 unless the
        algorithm ramps the bound up while its critic is young. `history` (`policy.action_history` > 0): the last
        k actions this policy sent, oldest first. Under an unobserved delay of d ≤ k steps the arm still has to
        execute the last d of them: with them in its input the correction can allow for what is in flight (the
        delay's Markov state), which the observation alone cannot show."""
        inputs = [features, base_action]
        if self.history_dim:
            inputs.append(history if history is not None else features.new_zeros(len(features), self.history_dim))
        return self.bound_fraction * self.scale * torch.tanh(self.head(torch.cat(inputs, dim=-1)))

    def remember(self, action: torch.Tensor) -> None:
        """The action just sent joins the history (the oldest leaves)."""
        if self.history_dim:
            self.history = torch.cat([self.history[:, self.action_dim :], action.to(self.history)], dim=-1)

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        """The base's chunks sync, async or real-time chunked; the correction is computed every step, on top."""
        self.base.use_chunking(mode, delay_steps, period_s)

    def chunk_stats(self) -> dict:
        return self.base.stats()

    def reset(self, slot: int | None = None) -> None:
        """A new episode (it acts for one env: `slot` is that one): the base's chunk queue and the history start
        afresh (an episode starts with nothing in flight, as record 0's zero action says)."""
        self.base.reset()
        self.history = torch.zeros(1, self.history_dim)

    def base_action(self, obs: dict) -> torch.Tensor:
        """The base's action for a batch of one observation (tensors as the actor passes them)."""
        action = self.base.act(observation_row(obs, 0))
        if not np.all(np.isfinite(action)):
            self.nan_base_steps += 1
            raise FloatingPointError("the base policy produced a non-finite action")
        return torch.from_numpy(np.asarray(action, np.float32))[None]

    @torch.no_grad()
    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:
        base = self.base_action(obs)  # one env: `slots` is [0] or None
        extras, history = self._extras(base), self.history.to(base)
        res = self.residual(self.encoder(obs), base, history)
        if not deterministic:
            res = (res + self.exploration_noise_std() * torch.randn_like(res)).clamp(-self.scale, self.scale)
        action = self.compose(base, res)
        self.remember(action)
        return action, extras

    def exploration_noise_std(self) -> torch.Tensor:
        """exploration_std · max(bound share, exploration_floor): with a floor below 1 the noise grows with the
        bound while `algo.bound_ramp_updates` ramps it up (a young critic's data stays near the base), never
        below that share of its whole size; at the floor's default 1 it is whole from the start."""
        return self.exploration_std * self.bound_fraction.clamp(min=self.exploration_floor)

    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        return self.act_with_extras(obs, deterministic)[0]

    @torch.no_grad()
    def explore_step(self, obs: dict) -> tuple[torch.Tensor, dict]:
        """Warm-up (before learning starts): the base plus uniform noise of ±warmup_noise (normalised units)."""
        base = self.base_action(obs)
        noise = (torch.rand_like(base) * 2 - 1) * self.warmup_noise
        extras, action = self._extras(base), self.compose(base, noise)
        self.remember(action)
        return action, extras

    def _extras(self, base: torch.Tensor) -> dict:
        extras = {"base_action": base}
        if self.history_dim:  # the history this decision saw, so the learner rebuilds its input
            extras["prev_actions"] = self.history.clone()
        if self.chunked:
            extras["chunk"] = torch.from_numpy(self.base.executor.record())
        return extras
