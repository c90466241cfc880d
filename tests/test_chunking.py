"""`actor.chunking` (policies/chunking.py): a chunked policy's next chunk off the control loop, its delay compensated,
and real-time chunking's agreement with the committed actions, on a synthetic slow policy whose right action at
step t is known (t itself), so a chunk that runs late or early shows in the actions."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from policies.chunking import ChunkExecutor, Guide, blend, guided_flow_sample, rtc_weights


class Ramp:
    """A chunked policy that takes `latency_s` per chunk and answers, for the observation of step t, the actions
    t, t+1, ... (plus `bias` alternating in sign chunk by chunk: a policy whose chunks disagree at the boundary)."""

    def __init__(self, chunk: int = 8, latency_s: float = 0.0, bias: float = 0.0) -> None:
        self.chunk, self.latency_s, self.bias, self.calls, self.guides = chunk, latency_s, bias, 0, []

    def __call__(self, obs: dict, guide: Guide | None) -> np.ndarray:
        time.sleep(self.latency_s)
        self.guides.append(guide)
        sign = 1.0 if self.calls % 2 == 0 else -1.0
        self.calls += 1
        out = (obs["t"] + np.arange(self.chunk, dtype=np.float32) + sign * self.bias)[:, None]
        return out if guide is None else blend(out, guide)


def run(executor: ChunkExecutor, policy: Ramp, steps: int, period_s: float | None = None) -> list[float]:
    """The actions of `steps` control steps; with `period_s` the loop keeps real time, as the actor's does."""
    actions, next_tick = [], time.perf_counter()
    for t in range(steps):
        actions.append(float(executor.step({"t": t}, policy)[0]))
        if period_s:  # a late step moves the schedule on rather than rushing the next ones to catch up
            next_tick = max(next_tick + period_s, time.perf_counter())
            time.sleep(max(0.0, next_tick - time.perf_counter()))
    return actions


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_action_runs_at_the_step_it_was_planned_for(mode):
    """With a fixed delay of 3 steps, a chunk computed from step t's observation takes over at t + 3 with its
    first 3 actions skipped: the action at step t is t in every step (without the compensation it would lag by 3).
    Sync computes when a chunk of 5 is used up: every fifth step waits."""
    ex = ChunkExecutor(execute_steps=5, mode=mode, delay_steps=3)
    policy = Ramp(chunk=8, latency_s=0.002)
    actions = run(ex, policy, 40)
    assert actions == [float(t) for t in range(40)]
    if mode == "sync":
        assert policy.calls == 8 and ex.waits == 7 and ex.skipped == 0
    else:  # switches every 5 steps, each new chunk's first 3 actions skipped
        assert policy.calls in (8, 9) and ex.switches == 7 and ex.skipped == 21
    assert ex.max_jump == pytest.approx(1.0)  # the ramp's own step: no jump at a boundary


def test_async_never_waits_in_real_time_where_sync_waits_every_chunk():
    """At 50 Hz (20 ms) a chunk that takes 45 ms: sync stops the loop at every chunk; async, its delay measured
    (3 steps: 45 ms is 2.25 periods), asks for the next chunk 3 steps before the current one ends and never waits.
    The actions stay on time either way."""
    period = 0.02
    results = {}
    for mode in ("sync", "async"):
        ex = ChunkExecutor(execute_steps=6, mode=mode, period_s=period)
        actions = run(ex, Ramp(chunk=10, latency_s=0.045), 60, period)
        results[mode] = ex
        assert actions == [float(t) for t in range(60)], mode
    assert results["sync"].waits == 9 and results["sync"].wait_s > 9 * 0.04
    assert results["async"].waits <= 1 and results["async"].start_waits == 1  # one: a loaded machine's hiccup
    assert 3 <= results["async"].delay <= 6  # 45 ms over 20 ms periods, and a loaded machine's extra
    assert results["async"].stats()["chunk_inference_ms_p50"] >= 45


def test_real_time_chunking_removes_the_jump_between_disagreeing_chunks():
    """Chunks that disagree by 0.5 either way jump by 1.5 at every switch under async; under rtc the new chunk is
    pulled onto the committed actions (frozen for the delay, then decaying): the jump shrinks to near the ramp's
    own step, and the guide handed to the policy covers the committed actions from the request's step on."""
    jumps = {}
    for mode in ("async", "rtc"):
        ex = ChunkExecutor(execute_steps=6, mode=mode, delay_steps=2)
        policy = Ramp(chunk=12, bias=0.5)
        run(ex, policy, 60)
        jumps[mode] = ex.max_jump
        if mode == "rtc":
            guide = next(g for g in policy.guides if g is not None)
            assert guide.delay == 2 and len(guide.actions) == len(guide.weights)
            assert guide.weights[:2].tolist() == [1.0, 1.0] and np.all(np.diff(guide.weights) <= 0)
    assert jumps["async"] == pytest.approx(2.0)  # the ramp's 1 and the sign change's 1
    assert jumps["rtc"] - 1.0 < 0.5 * (jumps["async"] - 1.0)  # beyond the ramp's own step: 0.35 against 1


def test_rtc_weights_follow_the_paper_schedule():
    w = rtc_weights(8, 3)
    assert w[:3].tolist() == [1.0, 1.0, 1.0] and 0 < w[-1] < w[3] < 1 and np.all(np.diff(w) <= 1e-7)


def test_a_reset_drops_a_chunk_in_flight_and_the_next_episode_starts_from_its_own_observation():
    ex = ChunkExecutor(execute_steps=4, mode="async", delay_steps=2)
    policy = Ramp(chunk=8, latency_s=0.01)
    run(ex, policy, 3)  # a request is in flight now
    ex.reset()
    first = ex.step({"t": 100}, policy)
    assert float(first[0]) == 100.0 and ex.start_waits == 2


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match="actor.chunking must be one of sync, async, rtc"):
        ChunkExecutor(4, "later")
    with pytest.raises(ValueError, match="inference_delay_steps must be at least 1"):
        ChunkExecutor(4, "async", delay_steps=0)
    with pytest.raises(ValueError, match="needs the control rate"):
        ChunkExecutor(4, "rtc")


def test_a_policy_error_on_the_worker_reaches_the_loop():
    def broken(obs, guide):
        if obs["t"] > 0:
            raise FloatingPointError("the policy's chunk is not finite")
        return np.zeros((6, 1), np.float32)

    ex = ChunkExecutor(4, "async", delay_steps=1)
    with pytest.raises(FloatingPointError, match="not finite"):
        for t in range(6):
            ex.step({"t": t}, broken)


def test_guided_flow_sampling_inpaints_the_committed_actions():
    """An untrained flow model: guided sampling lands its first steps on the committed actions (the frozen part,
    weight 1) much closer than the same noise sampled unguided, and leaves the steps the guide does not weigh
    near the unguided sample's."""
    from policies.flow import ChunkGenerator

    torch.manual_seed(0)
    model = ChunkGenerator(state_dim=3, action_dim=2, chunk_size=8, steps=10, hidden=[64, 64]).eval()
    features = model.features({"state": torch.zeros(1, 3), "images": {}})
    noise = torch.randn(1, 8, 2)
    committed = np.full((5, 2), 0.6, np.float32)
    guide = Guide(committed, np.array([1, 1, 1, 0, 0], np.float32), 3)
    with torch.no_grad():
        free = model.sample(features, noise)[0].numpy()
    guided = guided_flow_sample(model, features.detach(), noise, guide)[0].numpy()
    err_free = np.abs(free[:3] - 0.6).mean()
    err_guided = np.abs(guided[:3] - 0.6).mean()
    assert err_guided < 0.25 * err_free, (err_guided, err_free)
    assert np.abs(guided[5:] - free[5:]).mean() < err_free


def test_an_actor_refuses_async_chunking_for_a_policy_without_chunks(tmp_path):
    """SAC's MLP acts closed-loop: `actor.chunking=async` on it is refused in one line before any socket opens."""
    from robo_rl.actor import Actor
    from robo_rl.config import ConfigError
    from tests.test_pipeline import toy_config

    with pytest.raises(ConfigError, match="actor.chunking=async: .* does not compute its actions in chunks"):
        Actor(toy_config(tmp_path, "actor.chunking=async"), progress=False)


def test_the_page_gets_the_chunk_figures_from_the_loop():
    """The actor's view sends the page its loop figures once a second: a chunked policy's mode, delay, waits and
    switches ride along (app.js writes them after the loop's jitter), the other heartbeat figures do not."""
    from types import SimpleNamespace

    from robo_rl.gui.actor_view import ActorView

    ex = ChunkExecutor(4, "async", delay_steps=2)
    run(ex, Ramp(chunk=8), 12)
    stats = {"period_ms_p50": 100.0, "jitter_ms_p99": 1.0, "safety_holds": 0, **ex.stats()}
    view = SimpleNamespace(actor=SimpleNamespace(loop_stats=lambda: stats), _loop={}, _loop_at=0.0)
    shown = ActorView._loop_stats(view)
    assert shown["chunking"] == "async" and shown["chunk_delay_steps"] == 2 and shown["chunk_switches"] == 2
    assert "chunk_waits" in shown and "chunk_inference_ms_p99" in shown and "safety_holds" not in shown


def test_a_slow_first_guided_call_does_not_set_the_delay():
    """The first guided sample builds autograd's lazy state (0.8 s against 8 ms after, measured in
    bench/realtime.py): the first call of each kind is a warm-up, so the measured delay comes from the chunks' own
    times once there are any."""

    class WarmUp(Ramp):
        def __call__(self, obs, guide):
            self.latency_s = 0.3 if guide is not None and not any(g is not None for g in self.guides) else 0.0
            return super().__call__(obs, guide)

    ex = ChunkExecutor(execute_steps=4, mode="rtc", period_s=0.02)
    run(ex, WarmUp(chunk=8), 40)
    assert ex.delay == 1 and max(ex.inference_ms) >= 300, list(ex.inference_ms)  # timed, not planned with
