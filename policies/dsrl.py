"""DSRL's acting policy: a frozen flow/diffusion policy steered through its initial noise.

    w ~ π_W(·|s) = bound · tanh(N(μ(s), σ(s)))       the RL action: one noise for the whole chunk, in [-bound, bound]
    a_{t..t+E-1} = π_base(s, w)[:E]                  the frozen policy's deterministic denoising of w, run open-loop

Every record carries the decision's noise (`extra/noise`, held over the chunk) and `extra/decision` (1 on the step
whose action opened a chunk, 0 on the rest), so the learner samples one transition per decision, with the E
executed actions and their discounted rewards (`robo_rl/algos/dsrl.py`). The base (our flow or diffusion
checkpoint, or a LeRobot policy whose sampler takes noise, e.g. SmolVLA or π0) is built by every process from the
config and never sent: actors receive only the noise actor's weights.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from policies.acting import ActingPolicy
from policies.base import BasePolicy, copy_sharing
from policies.chunking import CHUNK_EXTRA, ChunkExecutor, chunk_agreeing, takes_guide
from policies.gaussian import TanhGaussianPolicy
from policies.residual import load_base, normalise_state_like_base, observation_row

WARMUPS = ("base", "uniform")


class NoisePolicy(nn.Module, ActingPolicy):
    def __init__(
        self,
        observation_space,
        action_dim: int,
        base: dict | BasePolicy,
        noise_bound: float = 1.5,
        hidden: list[int] = (256, 256),
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        encoder: dict | None = None,
        warmup: str = "base",
        execute_steps: int | None = None,
        state_norm: str = "none",
    ) -> None:
        super().__init__()
        if not 0 < noise_bound <= 5:
            raise ValueError(f"policy.noise_bound must be in (0, 5] (the box of the initial noise), got {noise_bound}")
        if warmup not in WARMUPS:
            raise ValueError(f"policy.warmup must be base or uniform, got '{warmup}'")
        spec = dict(base) if isinstance(base, dict) else {}
        spec.pop("model", None)  # what `robo-rl train` trains when no path is given
        if spec.get("noise_scale") is not None:
            raise ValueError("policy.base.noise_scale is for a residual's base: DSRL's noise actor chooses the noise")
        self.base = load_base(spec or base, observation_space, action_dim)
        shape = getattr(self.base, "noise_shape", None)
        if shape is None:
            raise ValueError(
                f"DSRL steers the initial noise of a flow or diffusion policy; this base "
                f"({type(self.base).__name__}) takes none: train one with `robo-rl bc policy=flow`"
            )
        if self.base.action_dim != action_dim:
            raise ValueError(f"the base acts in {self.base.action_dim} dimensions, the task in {action_dim}")
        self.action_dim, self.noise_bound, self.warmup = action_dim, float(noise_bound), warmup
        self.noise_shape = tuple(int(n) for n in shape)
        self.noise_dim = int(np.prod(self.noise_shape))
        chunk = self.base.chunk_size
        execute = execute_steps or spec.get("execute_steps") or getattr(self.base, "execute_steps", None) or chunk
        if not 1 <= execute <= chunk:
            raise ValueError(f"policy.execute_steps={execute} must be in [1, {chunk}] (the base's chunk)")
        self.execute_steps = int(execute)
        self.actor = TanhGaussianPolicy(
            observation_space, self.noise_dim, list(hidden), log_std_min, log_std_max, encoder=encoder
        )
        self.encoder, self.encoder_config = self.actor.encoder, self.actor.encoder_config
        normalise_state_like_base(self.encoder, self.base, state_norm)  # the critics copy it (algos/dsrl.py)
        self._guided = takes_guide(self.base.predict_chunk)  # steered by a guide while it samples (rtc)
        self.executor = ChunkExecutor(self.execute_steps)  # the episode's chunks; sync unless `use_chunking` says
        self.extras_spec = {"noise": ((self.noise_dim,), np.float32), "decision": ((1,), np.float32), **CHUNK_EXTRA}

    def _check(self, chunk: np.ndarray) -> None:
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim or not np.all(np.isfinite(chunk)):
            raise FloatingPointError(
                f"the base policy gave a chunk of shape {chunk.shape} that is not finite "
                f"or not {self.action_dim}-dimensional"
            )

    def __deepcopy__(self, memo):  # the base is frozen; the episode's chunks go on whichever weights act
        return copy_sharing(self, memo, self.base, self.executor)

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        """Async or real-time chunking (policies/chunking.py): the noise is still chosen on the loop's thread, from
        the observation of the step that asks for the chunk, and that step is the record's decision. Its chunk
        takes over d steps later, so a decision's E-step reward window starts while the previous chunk still runs
        (a delayed MDP whose state does not show the committed actions: an approximation for small d, exact at
        d = 0, which is sync)."""
        self.executor.configure(mode, delay_steps, period_s)

    def chunk_stats(self) -> dict:  # and a policy server's figures where the base is served
        own = getattr(self.base, "stats", None)
        return {**self.executor.stats(), **(own() if callable(own) else {})}

    def reset(self, slot: int | None = None) -> None:  # it acts for one env: `slot` is that one
        self.executor.reset()
        self.base.reset()

    def sample_noise(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised noise in [-bound, bound] and its log-probability (of the tanh, before scaling: the
        scale only shifts it by a constant)."""
        w, log_prob = self.actor.sample(features)
        return self.noise_bound * w, log_prob

    def mean_noise(self, features: torch.Tensor) -> torch.Tensor:
        return self.noise_bound * torch.tanh(self.actor.distribution_params(features)[0])

    def _step(self, obs: dict, choose) -> tuple[torch.Tensor, dict]:
        def produce(row: dict, guide, context: torch.Tensor) -> np.ndarray:
            noise = context[0].numpy().reshape(self.noise_shape)
            return chunk_agreeing(self.base.predict_chunk, self._guided, row, guide, self._check, noise=noise)

        row = observation_row(obs, 0)
        ex = self.executor
        action = ex.step(row, produce, choose=lambda _: choose().reshape(1, self.noise_dim).float())
        noise = ex.request_context if ex.requested else ex.context  # a decision's own noise, else the running one
        action = torch.from_numpy(np.asarray(action, np.float32))[None]
        decision = torch.tensor([[float(ex.requested)]])
        return action, {"noise": noise, "decision": decision, "chunk": torch.from_numpy(ex.record())}

    @torch.no_grad()
    def act_with_extras(
        self, obs: dict, deterministic: bool = False, slots: list[int] | None = None
    ) -> tuple[torch.Tensor, dict]:  # one env: `slots` is [0] or None
        def choose():
            features = self.encoder(obs)
            return self.mean_noise(features) if deterministic else self.sample_noise(features)[0]

        return self._step(obs, choose)

    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        return self.act_with_extras(obs, deterministic)[0]

    @torch.no_grad()
    def explore_step(self, obs: dict) -> tuple[torch.Tensor, dict]:
        """Warm-up (train.random_steps): the base's own behaviour (w ~ N(0, I), clipped to the box) or uniform
        noise over the box."""

        def choose():
            if self.warmup == "uniform":
                return (torch.rand(self.noise_dim) * 2 - 1) * self.noise_bound
            return torch.randn(self.noise_dim).clamp(-self.noise_bound, self.noise_bound)

        return self._step(obs, choose)
