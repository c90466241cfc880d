"""`ActingPolicy`: what the loops that run a policy (the actor, and through it every record) may call on it.

A policy gets observations as tensors, batched: `{"state": float32[N, D], "images": {camera: uint8[N, H, W, 3]}}`, row
j being env `slots[j]`'s (one env: N = 1, slot 0); it answers actions float32[N, A] in `[-1, 1]`. Only `act` is
required: every other member has a default here that says what a policy without it means. A policy declares the
protocol by inheriting this class; `acting_policy` fits one that does not (a plugin's, a test's) once, at hand-over.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import torch


class NoAction(RuntimeError):
    """This step has no action from the policy (a policy server late or out of reach): the actor ends the episode
    there by the safety rule, the arm holding, keeps every record, and asks again at the next episode."""


class ActingPolicy:
    # what else it decides, stored with every step as `extra/<name>`: name -> (shape, numpy dtype) of one row
    extras_spec: Mapping[str, tuple] = MappingProxyType({})
    # one call acts for several envs (`actor.num_envs`): it keeps no per-episode state, or keeps it per slot
    vector_slots: bool = False
    # the actions run from each decision (a chunk's executed part): 1 for closed-loop control
    execute_steps: int = 1

    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        """The actions for a batch of observations; `deterministic` (evaluation) without exploration noise."""
        raise NotImplementedError(f"{type(self).__name__} must implement act(obs, deterministic)")

    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:
        """The actions and the extras the record carries ({name: tensor [N, ...]}, as `extras_spec` declares);
        `slots` says which env each row is (None: slot 0). Default: `act`'s actions and no extras."""
        return self.act(obs, deterministic), {}

    def explore_step(self, obs: dict) -> tuple[torch.Tensor, dict] | None:
        """The warm-up action (`train.random_steps`) and its extras, for a policy that explores its own way (a
        residual around its base); None: the actor explores with uniform random actions."""
        return None

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        """`actor.chunking` (policies/chunking.py): how its chunks reach the loop. Default: a policy that does not
        run chunks through an executor acts synchronously only."""
        if mode != "sync":
            raise ValueError(
                f"actor.chunking={mode}: {type(self).__name__} does not compute its actions in chunks off the loop "
                "(a flow or diffusion policy, or a residual on a chunked base, does): use actor.chunking=sync"
            )

    def chunk_stats(self) -> dict:
        """Its chunks' figures for the heartbeat (policies/chunking.py's `stats`); {} for a policy without chunks."""
        return {}

    def reset(self, slot: int | None = None) -> None:
        """Env `slot`'s episode starts afresh (every env's when None): drop its per-episode state (a chunk queue).
        Default: a policy that keeps none has nothing to drop."""


class _Fitted(ActingPolicy):
    """A policy that does not declare `ActingPolicy`, seen through it: what it has is called, the rest defaults."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.extras_spec = getattr(policy, "extras_spec", None) or {}
        self._with_slots = bool(getattr(policy, "vector_slots", False))  # its act and reset take the env's slot
        self._reset = getattr(policy, "reset", None)
        self._explore = getattr(policy, "explore_step", None)
        self.vector_slots = self._with_slots or self._reset is None  # no reset: no per-episode state to keep apart
        self.execute_steps = getattr(policy, "execute_steps", 1)

    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        return self.policy.act(obs, deterministic=deterministic)

    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:
        kw = {"slots": slots} if self._with_slots else {}
        if self.extras_spec:
            return self.policy.act_with_extras(obs, deterministic=deterministic, **kw)
        return self.policy.act(obs, deterministic=deterministic, **kw), {}

    def explore_step(self, obs: dict) -> tuple[torch.Tensor, dict] | None:
        return None if self._explore is None else self._explore(obs)

    def chunk_stats(self) -> dict:
        own = getattr(self.policy, "chunk_stats", None)
        return {} if own is None else own()

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        own = getattr(self.policy, "use_chunking", None)
        if own is None:
            super().use_chunking(mode, delay_steps, period_s)
        else:
            own(mode, delay_steps, period_s)

    def reset(self, slot: int | None = None) -> None:
        if self._reset is None:
            return
        if self._with_slots:
            self._reset(slot)
        else:
            self._reset()


def acting_policy(policy) -> ActingPolicy:
    """`policy` itself if it declares `ActingPolicy`, else a view of it through the protocol (made once: the loop
    then calls its members without asking what it has)."""
    return policy if isinstance(policy, ActingPolicy) else _Fitted(policy)
