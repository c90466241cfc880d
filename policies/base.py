"""Frozen base policies: what a residual learner corrects, or what acts alone (our behaviour cloning, a LeRobot
policy through an adapter). One interface, so the actor and the residual algorithm never ask which it is.

A base predicts a *chunk* of actions for an observation (a chunk of one is closed-loop control). `ChunkedBase`
runs chunks open-loop from a queue that is emptied at every episode start, and times each inference.
"""

from __future__ import annotations

import collections
import copy
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from policies.chunking import ChunkExecutor, Guide, chunk_agreeing, takes_guide
from policies.language import instruction_subset


@runtime_checkable
class BasePolicy(Protocol):
    """Observation `{"state": float32[D], "images": {camera: uint8[H, W, 3]}}` in; actions in the task's normalised
    action space `[-1, 1]^A` out."""

    action_dim: int
    chunk_size: int  # actions per inference; 1 for closed-loop control
    # optional: `action_range` (low, high), float32 [action_dim] each: the range of the actions it was trained on
    # (a residual normalises its correction by it); a base without one is taken to span the whole [-1, 1]

    def reset(self) -> None:
        """A new episode starts: forget any internal state (observation history, a model's own queue)."""

    def predict_chunk(self, obs: dict) -> np.ndarray:
        """float32 [chunk_size, action_dim]: the next actions from this observation."""


class ChunkedBase:
    """Acts one step at a time from a base's chunks (policies/chunking.py: sync by default, async or real-time
    chunking by `use_chunking`); the episode's chunks are dropped at `reset`; each inference is timed."""

    def __init__(self, base: BasePolicy, execute_steps: int | None = None, timing_window: int = 1000) -> None:
        self.base = base
        # how many of each chunk run before the next inference (ACT runs all, others fewer)
        self.execute_steps = min(execute_steps or base.chunk_size, base.chunk_size)
        self.executor = ChunkExecutor(self.execute_steps, timing_window=timing_window)
        self._guided = takes_guide(base.predict_chunk)  # steered while it samples

    @property
    def queue(self) -> collections.deque:
        return self.executor.queue

    @property
    def inference_ms(self) -> collections.deque:
        return self.executor.inference_ms

    def use_chunking(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        """`actor.chunking`: sync, async or rtc, with a fixed delay in steps or one measured against `period_s`."""
        self.executor.configure(mode, delay_steps, period_s)

    def reset(self) -> None:
        self.executor.reset()
        self.base.reset()

    def act(self, obs: dict) -> np.ndarray:
        return self.executor.step(obs, self._produce)

    def _produce(self, obs: dict, guide: Guide | None) -> np.ndarray:
        return chunk_agreeing(self.base.predict_chunk, self._guided, obs, guide, self._check)

    def _check(self, chunk: np.ndarray) -> None:
        if chunk.ndim != 2 or chunk.shape[1] != self.base.action_dim or not len(chunk):
            raise ValueError(
                f"the base policy returned actions of shape {chunk.shape}, expected "
                f"[{self.base.chunk_size}, {self.base.action_dim}]"
            )

    def stats(self) -> dict:
        """The chunks' figures (policies/chunking.py) and the base's own where it keeps any (a policy server's round
        trip, timeouts and stale answers)."""
        own = getattr(self.base, "stats", None)
        return {**self.executor.stats(), **(own() if callable(own) else {})}

    def timing(self) -> dict:
        """Inference time in ms (p50, p99) over the recent inferences; empty before the first."""
        if not self.inference_ms:
            return {}
        p50, p99 = np.percentile(np.asarray(self.inference_ms), [50, 99])
        return {"base_inference_ms_p50": float(p50), "base_inference_ms_p99": float(p99)}


def action_range(base: BasePolicy) -> tuple[np.ndarray, np.ndarray] | None:
    """The base's training action range, checked (finite, low ≤ high, one entry per dimension), or None."""
    rng = getattr(base, "action_range", None)
    if rng is None:
        return None
    low, high = (np.asarray(v, np.float32).reshape(-1) for v in rng)
    if (
        low.shape != (base.action_dim,)
        or high.shape != (base.action_dim,)
        or not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low <= high))
    ):
        raise ValueError(
            f"the base's action range does not fit its {base.action_dim} action dimensions "
            f"(low {low.tolist()}, high {high.tolist()})"
        )
    return low, high


def state_statistics(base: BasePolicy) -> tuple[np.ndarray, np.ndarray] | None:
    """The per-dimension state mean and std a base normalises its input with (our BC and flow/diffusion
    checkpoints keep them, a LeRobot policy's dataset statistics give them), or None for a base that keeps none."""
    if getattr(base, "state_stats", None) is not None:  # a LeRobot base (policies/lerobot_base.py)
        mean, std = base.state_stats
    else:
        model = getattr(base, "policy", None) or getattr(base, "model", None)
        mean, std = getattr(model, "state_mean", None), getattr(model, "state_std", None)
        if not isinstance(mean, torch.Tensor) or not isinstance(std, torch.Tensor):
            return None
    mean, std = (np.asarray(torch.as_tensor(v).detach().cpu(), np.float32).reshape(-1) for v in (mean, std))
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)):
        raise ValueError("the base's state statistics are not finite and positive: its checkpoint is corrupt")
    return mean, std


def copy_sharing(obj, memo: dict, *shared):
    """`copy.deepcopy(obj)` that keeps the `shared` objects as they are (a frozen base; the chunk the episode is
    running, which must go on whichever copy of the weights acts next): for a policy's `__deepcopy__`."""
    for item in shared:
        memo[id(item)] = item
    new = obj.__class__.__new__(obj.__class__)
    memo[id(obj)] = new
    for key, value in obj.__dict__.items():
        new.__dict__[key] = copy.deepcopy(value, memo)
    return new


def obs_rows(obs: dict, rows) -> dict:
    """The observations of the given rows (an index, slice or tensor of indices) of a batched observation dict."""
    images = {k: v[rows] for k, v in obs["images"].items()}
    return {"state": obs["state"][rows], "images": images, **instruction_subset(obs, rows)}  # a base reads it


class NarrowedNoise:
    """A generative base (a flow, a diffusion policy, a SmolVLA: one whose sampler takes its initial noise) sampled
    from initial noise of std `scale` instead of its own N(0, I): 1 is its own distribution, 0 its mode (every chunk
    from zero noise). `policy.base.noise_scale` of a residual: ResFiT corrects a deterministic base, and a VLA
    trained on a few noisy demonstrations acts far better at its mode than as it samples (BENCHMARKS.md). The noise
    comes from `rng` (a numpy Generator) where given, else from torch's global generator, as the base's own sampler
    draws it, so a seeded run draws the same. Everything else (action_dim, action_range, state statistics, stats) is
    the base's."""

    def __init__(self, base: BasePolicy, scale: float, rng: np.random.Generator | None = None) -> None:
        if not 0 <= scale <= 4:
            raise ValueError(f"policy.base.noise_scale must be in [0, 4] (the std of its initial noise), got {scale}")
        if getattr(base, "noise_shape", None) is None:
            raise ValueError(
                f"policy.base.noise_scale needs a base whose sampler takes its initial noise (a flow, a diffusion "
                f"policy, a SmolVLA or pi0); this base ({getattr(base, 'name', type(base).__name__)}) takes none"
            )
        self.base, self.scale, self.rng = base, float(scale), rng
        if takes_guide(base.predict_chunk):  # real-time chunking still steers it (policies/chunking.py)
            self.predict_chunk = self._predict_guided

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "base":  # copy and pickle look these up before __init__ has run
            raise AttributeError(name)
        return getattr(self.base, name)

    def noise(self) -> np.ndarray:
        shape = tuple(self.base.noise_shape)
        if self.scale == 0:
            return np.zeros(shape, np.float32)
        draw = self.rng.standard_normal(shape) if self.rng is not None else torch.randn(shape).numpy()
        return (self.scale * draw).astype(np.float32)

    def reset(self) -> None:
        self.base.reset()

    def predict_chunk(self, obs: dict, noise: np.ndarray | None = None) -> np.ndarray:
        """The base's chunk from `noise` where a caller gives it (DSRL's actor), else from the narrowed draw."""
        return self.base.predict_chunk(obs, noise=self.noise() if noise is None else noise)

    def _predict_guided(self, obs: dict, noise: np.ndarray | None = None, guide=None) -> np.ndarray:
        return self.base.predict_chunk(obs, noise=self.noise() if noise is None else noise, guide=guide)
