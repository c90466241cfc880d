"""Robots (issue 17): control-loop jitter through driver + safety on each arm's twin, what the safety layer costs per
step, and camera capture latency with fake frame sources.

Jitter: an actor-style loop (the env keeps its own rate on the driver's clock) steps `ArmEnv` wrapped in the
`SafetyWrapper` through each real driver (SO-101: lerobot's robot class on the fake Feetech bus; Franka: the driver
on the fake franky; UR: the driver on the fake ur-rtde) at 10, 30 and 50 Hz on the wall clock; jitter is
|period − 1/hz| per step. The baseline in the same run: a bare loop that only sleeps to the same ticks (what the OS's
timer alone gives on this machine). Safety overhead: the wrapper's own time per step (its step minus the env step
inside it, plus the joint guard it installs in the env: limits, joint speed, the box check's FK, the stop check)
against the bare env's step on a virtual clock (no sleeping), same actions. Cameras: `FakeCamera` sources at
30 and 90 fps, the time from a frame's capture to its availability in the buffer (p50/p99), and the age of the
frame an observation gets (`Camera.at`).

    python bench/hardware.py            # 6 s per rate and arm, 400 overhead steps, 5 s per camera
    python bench/hardware.py --quick    # within 60 s

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

RATES_HZ = (10.0, 30.0, 50.0)
ARMS = ("so101", "franka", "ur5e")


def make_driver(arm: str, clock):
    if arm == "so101":
        from hardware.so101 import SO101Driver

        return SO101Driver(twin=True, clock=clock)
    if arm == "franka":
        from hardware.franka import FrankaDriver

        return FrankaDriver(twin=True, clock=clock)
    from hardware.ur import URDriver

    return URDriver(twin=True, clock=clock)


def _actions(env, n: int, seed: int = 0) -> np.ndarray:
    """Small random end-effector steps that stay near home (there and back), gripper open."""
    rng = np.random.default_rng(seed)
    half = rng.uniform(-0.5, 0.5, (n // 2 + 1, env.action_space.shape[0])).astype(np.float32)
    actions = np.concatenate([half, -half[::-1]])[:n]
    actions[:, -1] = -1.0
    return actions


def _percentiles(values_ms) -> dict:
    p50, p99 = np.percentile(np.asarray(values_ms), [50, 99])
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3)}


def jitter(arm: str, hz: float, seconds: float) -> dict:
    """Jitter of our loop (driver + safety at `hz` on the wall clock) and of a bare sleeping loop, same ticks."""
    from hardware.arm import Clock
    from hardware.env import ArmEnv
    from hardware.safety import SafetyWrapper

    env = SafetyWrapper(ArmEnv(make_driver(arm, Clock()), control_hz=hz, max_episode_steps=10**9), watchdog_s=1.0)
    try:
        env.reset(seed=0)
        n = max(20, int(seconds * hz))
        starts = []
        for action in _actions(env, n):
            starts.append(time.monotonic())
            env.step(action)
        ours = np.abs(np.diff(starts) - 1.0 / hz) * 1e3
        assert env.stats().get("watchdog_holds", 0) == 0, "the watchdog fired during a steady loop"
    finally:
        env.close()
    tick, starts = time.monotonic(), []
    for _ in range(n):  # the baseline: the same period kept by sleeping alone
        starts.append(time.monotonic())
        tick += 1.0 / hz
        time.sleep(max(0.0, tick - time.monotonic()))
    base = np.abs(np.diff(starts) - 1.0 / hz) * 1e3
    return {
        "steps": n,
        "ours_ms": _percentiles(ours),
        "sleep_only_ms": _percentiles(base),
        "ratio_p99": round(float(np.percentile(ours, 99) / max(np.percentile(base, 99), 1e-3)), 2),
    }


def safety_overhead(arm: str, steps: int) -> dict:
    """The safety layer's own time per step (its step minus the env step inside it, same call) and, as the baseline,
    the bare env's step on the same actions (virtual clock: no sleeps); the two envs are stepped interleaved."""
    from hardware.arm import VirtualClock
    from hardware.env import ArmEnv
    from hardware.safety import SafetyWrapper

    bare = ArmEnv(make_driver(arm, VirtualClock()), max_episode_steps=10**9)
    safe = SafetyWrapper(
        ArmEnv(make_driver(arm, VirtualClock()), max_episode_steps=10**9),
        watchdog_s=None,
        workspace={"low": [-1.0, -1.0, 0.0], "high": [1.0, 1.0, 1.2]},
    )
    inner_ms: list = []
    inner_step = safe.env.step

    def timed(action):  # the env's share of the safe step, so the layer's own time is what remains
        start = time.perf_counter()
        out = inner_step(action)
        inner_ms.append((time.perf_counter() - start) * 1e3)
        return out

    guard_ms: list = []
    guard = safe.unwrapped.joint_guard

    def timed_guard(*args):  # the joint guard runs inside the env step but is the layer's own work
        start = time.perf_counter()
        out = guard(*args)
        guard_ms.append((time.perf_counter() - start) * 1e3)
        return out

    safe.env.step = timed
    safe.unwrapped.joint_guard = timed_guard
    try:
        bare.reset(seed=0)
        safe.reset(seed=0)
        t_bare, own = [], []
        for action in _actions(bare, steps):
            start = time.perf_counter()
            bare.step(action)
            t_bare.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            safe.step(action)
            # the guard ran inside the env's step, yet its time is the layer's own work
            own.append((time.perf_counter() - start) * 1e3 - inner_ms[-1] + guard_ms[-1])
    finally:
        bare.close()
        safe.close()
    b = float(np.median(t_bare))
    return {
        "steps": steps,
        "bare_step_ms": _percentiles(t_bare),
        "safety_own_ms": _percentiles(own),
        "share_of_bare_step_p50": round(float(np.median(own)) / b, 3),
    }


def camera_latency(fps: float, seconds: float) -> dict:
    """Capture → buffer latency and the age of the frame an observation gets, for a fake source at `fps`."""
    from hardware.cameras import FakeCamera

    camera = FakeCamera("bench", 128, 128, fps=fps)
    camera.start()
    try:
        ages, end = [], time.monotonic() + seconds
        while time.monotonic() < end:  # an actor asking for the frame nearest "now" at 50 Hz
            now = time.monotonic()
            ages.append((now - camera.at(now).t) * 1e3)
            time.sleep(0.02)
        stats = camera.stats()
    finally:
        camera.close()
    return {
        "fps": fps,
        "measured_fps": round(float(stats["fps"]), 1),
        "frames": int(stats["frames"]),
        "capture_latency_ms": {
            "p50": round(float(stats["latency_ms_p50"]), 3),
            "p99": round(float(stats["latency_ms_p99"]), 3),
        },
        "obs_frame_age_ms": _percentiles(ages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    args = parser.parse_args()
    seconds, steps, cam_s = (2.0, 150, 2.0) if args.quick else (6.0, 400, 5.0)
    result: dict = {
        "benchmark": "hardware",
        "quick": args.quick,
        "load_1min": os.getloadavg()[0],
        "jitter": {},
        "safety_overhead": {},
        "cameras": [],
    }
    for arm in args.arms:
        result["jitter"][arm] = {}
        for hz in RATES_HZ:
            r = jitter(arm, hz, seconds)
            result["jitter"][arm][f"{hz:g}hz"] = r
            print(
                f"{arm:7s} {hz:4.0f} Hz: jitter p50/p99 {r['ours_ms']['p50']:.2f}/{r['ours_ms']['p99']:.2f} ms "
                f"(sleep only {r['sleep_only_ms']['p50']:.2f}/{r['sleep_only_ms']['p99']:.2f}), "
                f"p99 ratio {r['ratio_p99']}",
                flush=True,
            )
        r = safety_overhead(arm, steps)
        result["safety_overhead"][arm] = r
        print(
            f"{arm:7s} safety layer's own time p50/p99 {r['safety_own_ms']['p50']:.3f}/{r['safety_own_ms']['p99']:.3f}"
            f" ms per step; bare env step p50 {r['bare_step_ms']['p50']:.3f} ms (share "
            f"{r['share_of_bare_step_p50']})",
            flush=True,
        )
    for fps in (30.0, 90.0):
        r = camera_latency(fps, cam_s)
        result["cameras"].append(r)
        print(
            f"camera {fps:.0f} fps: capture latency p50/p99 {r['capture_latency_ms']['p50']:.2f}/"
            f"{r['capture_latency_ms']['p99']:.2f} ms, obs frame age p50/p99 {r['obs_frame_age_ms']['p50']:.1f}/"
            f"{r['obs_frame_age_ms']['p99']:.1f} ms",
            flush=True,
        )
    write_result("hardware", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
