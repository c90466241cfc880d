"""How a chunked policy's chunks become one action per control step: `actor.chunking=sync|async|rtc`.

- sync: a chunk is computed when the last one is used up, from that step's observation; the loop waits for it (a
  VLA's 250 ms at 10 Hz: the arm stands still for two or three periods at every chunk).
- async: the next chunk is computed on a worker thread from the newest observation while the current one runs.
  Its inference takes `d` control periods, so a chunk computed from step t's observation takes over at step t + d
  and its first d actions, meant for steps already past, are skipped (the delay compensated). The request goes out
  d steps before the current chunk's planned end (`execute_steps`), so the loop never waits while the inference
  takes no longer than d periods. d is `actor.inference_delay_steps`, or measured: the slowest recent inference
  (95th percentile) in control periods, at least one.
- rtc: async, and the new chunk agrees with the actions already committed (real-time chunking, Black, Galliker and
  Levine 2025, arXiv:2506.07339): the first d steps are frozen to them and the rest of the overlap is pulled
  towards them with weights that decay to zero. A flow policy that takes a `guide` is steered towards them while
  it samples (guided inpainting); any other policy's new chunk is blended with them (weighted average) after.

The executor counts steps, not seconds: a chunk always takes over exactly d steps after its observation (the loop
waits there if the worker is late, and says so in its statistics), so a simulated run with a fixed d is
reproducible and has the timing a robot with that delay would have.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CHUNKING = ("sync", "async", "rtc")
# stored with every action of a chunked policy (`extra/chunk`): the chunk's id (counted over the actor's life; with
# the episode id it names the chunk) and the steps since the observation it was computed from (its index in the
# chunk: the inference delay plus the steps run from it), so the learner knows what ran, on which observation
CHUNK_EXTRA = {"chunk": ((2,), np.int64)}
PERCENTILE = 95  # the measured delay covers this share of the recent inferences


@dataclass(frozen=True)
class Guide:
    """What a new chunk computed from step t's observation should agree with: the actions already committed for
    steps t, t+1, ... (`actions` [L, A]), a weight per step in [0, 1] (`weights` [L]) and the steps that run
    anyway before it takes over (`delay`: weight 1)."""

    actions: np.ndarray
    weights: np.ndarray
    delay: int


def rtc_weights(length: int, delay: int) -> np.ndarray:
    """Real-time chunking's soft mask over the overlap of `length` committed steps: 1 for the first `delay`, then
    c·(e^c − 1)/(e − 1) with c falling linearly from 1 to 0 across the rest (the paper's exponential schedule)."""
    i = np.arange(length, dtype=np.float64)
    c = (length - i) / max(length - delay + 1, 1)
    w = np.where(i < delay, 1.0, c * np.expm1(c) / math.expm1(1.0))
    return np.clip(w, 0.0, 1.0).astype(np.float32)


def blend(chunk: np.ndarray, guide: Guide) -> np.ndarray:
    """The chunk pulled towards the committed actions, step by step, by the guide's weights (for a policy that
    cannot be steered while it samples)."""
    out = np.array(chunk, np.float32, copy=True)
    n = min(len(out), len(guide.actions))
    w = guide.weights[:n, None]
    out[:n] = w * guide.actions[:n] + (1.0 - w) * out[:n]
    return out


def takes_guide(predict_chunk) -> bool:
    """Whether a policy's `predict_chunk` steers its sampling by a guide (our flow bases, a served policy)."""
    return "guide" in inspect.signature(predict_chunk).parameters


def chunk_agreeing(predict_chunk, steers: bool, obs: dict, guide: Guide | None, check, **kwargs) -> np.ndarray:
    """`predict_chunk(obs, **kwargs)` as float32 [C, A], made to agree with `guide` (None: as it comes): steered while
    it samples where the policy takes a guide (`steers`, from `takes_guide`), else blended after. `check(chunk)`
    raises on a chunk the caller refuses, before any blending."""
    steer = guide is not None and steers
    chunk = np.asarray(predict_chunk(obs, **kwargs, **({"guide": guide} if steer else {})), np.float32)
    check(chunk)
    return chunk if guide is None or steer else blend(chunk, guide)


@dataclass
class _Request:
    future: concurrent.futures.Future
    obs_step: int  # the episode step whose observation it was computed from
    delay: int  # it takes over at obs_step + delay
    generation: int  # the episode it belongs to
    context: object  # what `choose` decided for it (None without one)


# produce(obs, guide) -> the chunk [C, A] for that observation (guide None: unguided)
Produce = Callable[[dict, Guide | None], np.ndarray]


class ChunkExecutor:
    """One episode's chunks, one action per `step`; `mode` one of CHUNKING. `period_s` (1 / control rate) turns a
    measured inference time into steps of delay; `delay_steps` fixes it instead. Not thread-safe: one control
    loop calls it (its worker thread only runs `produce`)."""

    def __init__(
        self,
        execute_steps: int,
        mode: str = "sync",
        delay_steps: int | None = None,
        period_s: float | None = None,
        timing_window: int = 200,
    ) -> None:
        self.execute_steps = max(1, int(execute_steps))
        self.configure(mode, delay_steps, period_s)
        self.queue: collections.deque = collections.deque()
        self.inference_ms: collections.deque = collections.deque(maxlen=timing_window)
        self._warmed: set[bool] = set()  # the kinds of call (guided or not) made once already
        # every call's time but the first of each kind (a warm-up): what the measured delay is read from
        self._steady_ms: collections.deque = collections.deque(maxlen=timing_window)
        self._delay_cache: tuple = (None, 1)  # (the timings it was read from, the delay in steps)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: _Request | None = None
        self._generation = 0
        self._step = 0  # steps taken this episode
        self._since_switch = 0  # steps taken from the current chunk
        self._last: np.ndarray | None = None  # the action last executed
        self.requested, self.request_context, self.context = False, None, None  # see `step`
        self.chunk_id = -1  # of the chunk the last action came from; ids count over the executor's life
        self.obs_age = 0  # steps between that chunk's observation and the last action
        self.waits = 0  # steps the loop waited for a chunk, episode starts not counted
        self.wait_s = 0.0
        self.start_waits = 0
        self.switches = 0
        self.skipped = 0  # actions of new chunks dropped as already past (the delay compensated)
        self.max_jump = 0.0  # largest |Δaction| (max over dimensions) at a chunk switch
        self.jumps: collections.deque = collections.deque(maxlen=timing_window)

    def configure(self, mode: str, delay_steps: int | None = None, period_s: float | None = None) -> None:
        """`actor.chunking` and `actor.inference_delay_steps` (None: measured against `period_s`); in place, so every
        copy of a policy that shares this executor sees it."""
        if mode not in CHUNKING:
            raise ValueError(f"actor.chunking must be one of {', '.join(CHUNKING)}, got '{mode}'")
        if delay_steps is not None and int(delay_steps) < 1:
            raise ValueError(f"actor.inference_delay_steps must be at least 1 (or null: measured), got {delay_steps}")
        if mode != "sync" and delay_steps is None and not period_s:
            raise ValueError(f"actor.chunking={mode} needs the control rate or actor.inference_delay_steps")
        self.mode = mode
        self.fixed_delay = None if delay_steps is None else int(delay_steps)
        self.period_s = period_s

    # -- the loop's side ------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """A new episode: its chunks are dropped, a request in flight is discarded when it comes back."""
        self._generation += 1
        if self._pending is not None:
            self._pending.future.cancel()
        self._pending = None
        self.queue.clear()
        self._step = self._since_switch = 0
        self._last = self.context = None

    def step(self, obs: dict, produce: Produce, choose: Callable[[dict], object] | None = None) -> np.ndarray:
        """This step's action, from the current chunk (taking the next one when due) for observation `obs`.

        `choose(obs)`, if given, runs on the loop's thread whenever a chunk is asked for (a decision: DSRL's noise,
        drawn with the weights acting now, never on the worker while new weights load) and its result goes to
        `produce(obs, guide, context=...)`. After the call `requested` says whether this step asked for a chunk
        (`request_context` what `choose` gave then) and `context` is that of the chunk this step's action came
        from; one request a step at most."""
        self.requested = False
        p = self._pending
        if p is not None and (not self.queue or self._step >= p.obs_step + p.delay):
            self._take(p)
        if not self.queue:  # episode start, or sync at a chunk's end: compute here and wait for it
            start = time.perf_counter()
            context = self._decide(obs, choose)
            chunk = self._timed(_bound(produce, choose, context), obs, None)
            if self._step == 0:
                self.start_waits += 1
            else:
                self.waits += 1
                self.wait_s += time.perf_counter() - start
            self._switch(chunk, 0, self.execute_steps if self.mode == "sync" else len(chunk), context)
        action = self.queue.popleft()
        self._since_switch += 1
        self.obs_age = self._age_base + self._since_switch - 1
        # due: `delay` steps before the planned switch, or sooner when what is left would not cover the delay
        due = self._since_switch > self.execute_steps - self.delay or len(self.queue) < self.delay
        if self.mode != "sync" and self._pending is None and due and not self.requested:
            self._request(obs, produce, action, choose)
        self._step += 1
        self._last = action
        return action

    def record(self) -> np.ndarray:
        """`extra/chunk` of the action just taken, one row: [chunk id, steps since its observation]."""
        return np.array([[self.chunk_id, self.obs_age]], np.int64)

    @property
    def delay(self) -> int:
        """The inference delay in steps this executor plans with now."""
        if self.fixed_delay is not None:
            return self.fixed_delay
        timings = self._steady_ms or self.inference_ms  # a warm-up's time only until a chunk's own is known
        if not timings or not self.period_s:
            return 1
        key = (len(self.inference_ms), self.inference_ms[-1], self.period_s)  # a percentile only when a time came
        if self._delay_cache[0] != key:
            slow = float(np.percentile(np.asarray(timings), PERCENTILE)) / 1e3
            self._delay_cache = (key, max(1, math.ceil(slow / self.period_s - 1e-9)))
        return self._delay_cache[1]

    def stats(self) -> dict:
        """Figures for the heartbeat and the page (ms, counts)."""
        out = {
            "chunking": self.mode,
            "chunk_waits": self.waits,
            "chunk_wait_ms": self.wait_s * 1e3,
            "chunk_switches": self.switches,
            "chunk_delay_steps": self.delay,
            "chunk_skipped": self.skipped,
            "chunk_jump_max": self.max_jump,
        }
        if self.inference_ms:
            p50, p99 = np.percentile(np.asarray(self.inference_ms), [50, 99])
            out.update(chunk_inference_ms_p50=float(p50), chunk_inference_ms_p99=float(p99))
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # -- inside ---------------------------------------------------------------------------------------------------
    _age_base = 0  # steps between the current chunk's observation and its first executed action

    def _timed(self, produce: Produce, obs: dict, guide: Guide | None) -> np.ndarray:
        start = time.perf_counter()
        chunk = np.asarray(produce(obs, guide), np.float32)
        ms, kind = (time.perf_counter() - start) * 1e3, guide is not None
        self.inference_ms.append(ms)
        if kind in self._warmed:
            self._steady_ms.append(ms)
        else:  # the first call of a kind builds lazy state (a guided sample's first backward pass: 100x a chunk)
            self._warmed.add(kind)
        if chunk.ndim != 2 or not len(chunk):
            raise ValueError(f"the policy returned a chunk of shape {chunk.shape}, expected [chunk, action]")
        return chunk

    def _decide(self, obs: dict, choose) -> object:
        self.requested = True
        self.request_context = None if choose is None else choose(obs)
        return self.request_context

    def _request(self, obs: dict, produce: Produce, current: np.ndarray, choose) -> None:
        delay = self.delay
        context = self._decide(obs, choose)
        guide = None
        if self.mode == "rtc":
            committed = np.stack([current, *self.queue]).astype(np.float32)  # for steps t, t+1, ... as planned now
            guide = Guide(committed, rtc_weights(len(committed), delay), delay)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="chunk-inference")
        future = self._pool.submit(self._timed, _bound(produce, choose, context), obs, guide)
        self._pending = _Request(future, self._step, delay, self._generation, context)

    def _take(self, p: _Request) -> None:
        self._pending = None
        if not p.future.done():
            start = time.perf_counter()
            concurrent.futures.wait([p.future])
            self.waits += 1
            self.wait_s += time.perf_counter() - start
        chunk = p.future.result()  # the policy's own error, raised in the loop
        skip = self._step - p.obs_step
        # all of it is past (a chunk no longer than the delay): the old chunk goes on, or the loop computes afresh
        if skip >= len(chunk):
            self.skipped += len(chunk)
            return
        self.skipped += skip
        self._switch(chunk[skip:], skip, len(chunk) - skip, p.context)

    def _switch(self, actions: np.ndarray, age: int, keep: int, context: object) -> None:
        if self._last is not None:
            jump = float(np.max(np.abs(actions[0] - self._last)))
            self.jumps.append(jump)
            self.max_jump = max(self.max_jump, jump)
            self.switches += 1
        self.queue.clear()
        self.queue.extend(actions[:keep])
        self.chunk_id += 1
        self.context = context
        self._since_switch = 0
        self._age_base = age


def _bound(produce: Produce, choose, context) -> Produce:
    """`produce` with the decision's context bound, where a `choose` made one."""
    return produce if choose is None else functools.partial(produce, context=context)


MAX_GUIDANCE = 5.0  # the paper's clip on the guidance weight (β)


def guided_flow_sample(
    model, features, noise, guide: Guide, steps: int | None = None, max_guidance: float = MAX_GUIDANCE
):
    """A flow model's chunk [B, chunk, A] sampled with real-time chunking's guided inpainting: at each Euler step
    the velocity gets the gradient (a vector-Jacobian product) that pulls the chunk it predicts, x + (1 − t)·v,
    towards the committed actions where the guide weighs them, scaled by min(β, (1 − t) / (t·r²)) with
    r² = (1 − t)² / (t² + (1 − t)²) (ΠGDM's weight, as in the paper). `model` has `predict(features, x, t)`,
    `flow_times(steps)` and `steps` (policies/flow.py's ChunkGenerator); features are computed without
    inference mode (their graph is not needed, but inference tensors cannot enter one)."""
    import torch

    steps = steps or model.steps
    chunk = noise.shape[1]
    target = torch.zeros_like(noise)
    weights = torch.zeros(chunk, dtype=noise.dtype, device=noise.device)
    n = min(chunk, len(guide.actions))
    target[:, :n] = torch.as_tensor(guide.actions[:n], dtype=noise.dtype, device=noise.device)
    weights[:n] = torch.as_tensor(guide.weights[:n], dtype=noise.dtype, device=noise.device)
    weights = weights.view(1, chunk, 1)
    x = noise
    for t in model.flow_times(steps):
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            v = model.predict(features, xg, t)
            predicted = xg + (1.0 - t) * v
            (pull,) = torch.autograd.grad(predicted, xg, grad_outputs=(target - predicted) * weights)
        r2 = (1.0 - t) ** 2 / (t**2 + (1.0 - t) ** 2)
        scale = max_guidance if t <= 0 else min(max_guidance, (1.0 - t) / (t * r2))
        x = (x + (v.detach() + scale * pull) / steps).detach()
    return x.clamp(-1.0, 1.0)
