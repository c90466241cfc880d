"""Human in the loop (issue 13): how fast a person's input reaches the robot, what arbitration costs, and what the
simulated human does for learning (a summary of `bench/learning.py` result files).

Latency: a person thread feeds the web device (`robo_rl/gui/web_device.py`, the one the intervention page drives) new
end-effector commands at random moments while an actor-style loop steps the wrapped env in real time at the control
rate; for each input, the time until the step that executes it. The bound it is held to, in the same run: one
control period + 20 ms (p99). Overhead: a step through `InterventionWrapper` with three devices (the web device, a
keyboard-like fake and the simulated human) against the bare env's step, on the same actions.

Learning (`--train` runs them first; otherwise the result files that exist are summarised): with the simulated human
and no scripted demonstrations against the same without the human, from images on our pick task and gym-hil's
PandaPickCube (and from state on our pick task), and residual RL on a weak base with and without the human:
evaluation success at 6k env steps, the intervention rate over the last 1k env steps, per seed.

    python bench/hil.py                   # latency (30 s at 10 Hz) and overhead, and the learning summary
    python bench/hil.py --train --seeds 0 1 2   # also run the learning benchmarks (hours on 2 CPU cores)
    python bench/hil.py --quick           # latency (10 s) and overhead (< 60 s)

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

LEARNING = {  # name → the run beside it (without the human)
    "hil_pick_pixels": "nohil_pick_pixels",
    "hil_gym_pixels": "nohil_gym_pixels",
    "hil_pick_state": "nohil_pick_state",
    "hil_residual_weak": "residual_weak",
    "hil_residual_weak_bc": "residual_weak",
    "hil_gym_pixels_bc": "nohil_gym_pixels",  # the policy also regressed on the human's steps: none without one
}


def latency(seconds: float, control_hz: float = 10.0, seed: int = 0) -> dict:
    """Input-to-step latency of the web device through the arbitration, in a real-time loop."""
    from robo_rl.gui.web_device import WebDevice
    from robo_rl.teleop.intervention import InterventionWrapper
    from sim.point_reach import PointReachEnv

    device = WebDevice("web")
    env = InterventionWrapper(
        PointReachEnv(max_episode_steps=10**9, control_hz=control_hz), [device], takeover="explicit"
    )
    env.reset(seed=seed)
    device.set_intervention(True)
    stop = threading.Event()
    rng = np.random.default_rng(seed)

    def person() -> None:  # moves the pointer at random moments, 2-20 times a second
        while not stop.is_set():
            device.set_motion(np.r_[rng.uniform(-1, 1, 2), np.zeros(4)])
            stop.wait(rng.uniform(0.05, 0.5))

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    period = 1.0 / control_hz
    next_tick, end = time.monotonic(), time.monotonic() + seconds
    zero = np.zeros(2, np.float32)
    while time.monotonic() < end:
        device.heartbeat()
        env.step(zero)
        next_tick += period
        time.sleep(max(0.0, next_tick - time.monotonic()))
    stop.set()
    thread.join()
    env.close()
    ms = np.array(env.latency_ms)
    bound = 1e3 * period + 20.0
    p50, p99 = np.percentile(ms, [50, 99])
    return {
        "control_hz": control_hz,
        "inputs": len(ms),
        "latency_ms_p50": round(float(p50), 2),
        "latency_ms_p99": round(float(p99), 2),
        "latency_ms_max": round(float(ms.max()), 2),
        "bound_ms": bound,
        "p99_over_bound": round(float(p99 / bound), 3),
        "met": bool(p99 <= bound),
    }


def overhead(steps: int) -> dict:
    """Per-step time through the arbitration with three devices, against the bare env, same actions."""
    from robo_rl.gui.web_device import WebDevice
    from robo_rl.teleop.base import FakeDevice
    from robo_rl.teleop.intervention import InterventionWrapper
    from sim.point_reach import PointReachEnv

    expert = {"_target_": "sim.point_reach.PointReachExpert"}
    human = {"_target_": "sim.simulated_human.SimulatedHuman", "expert": expert, "takeover_prob": 0.5}
    wrapped = InterventionWrapper(PointReachEnv(max_episode_steps=50), [WebDevice("web"), FakeDevice("keys"), human])
    bare = PointReachEnv(max_episode_steps=50)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 2)).astype(np.float32)
    out = {}
    for name, env in (("bare", bare), ("wrapped", wrapped)):
        env.reset(seed=0)
        times = []
        for a in actions:
            t = time.perf_counter()
            _, _, term, trunc, _ = env.step(a)
            times.append(time.perf_counter() - t)
            if term or trunc:
                env.reset()
        out[f"{name}_us_p50"] = round(float(np.median(times)) * 1e6, 1)
    out["ratio"] = round(out["wrapped_us_p50"] / out["bare_us_p50"], 2)
    out["added_us_p50"] = round(out["wrapped_us_p50"] - out["bare_us_p50"], 1)
    wrapped.close()
    return out


def learning_summary() -> dict:
    """Per experiment that has a result file: final success per seed and the intervention rate at the end."""
    results = ROOT / "bench" / "results"
    out = {}
    for name in [n for pair in LEARNING.items() for n in pair]:
        path = results / f"learning_{name}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        rates = [r["training"].get("intervention_rate_last_1k") for r in data["runs"]]
        known = [r for r in rates if r is not None]  # runs without the human have none
        out[name] = {
            "seeds": data["seeds"],
            "final_success": data["final_success"],
            "final_env_steps": [r["curve"][-1]["env_steps"] for r in data["runs"]],
            "intervention_rate_last_1k": rates,
            "intervention_rate_last_1k_mean": sum(known) / len(known) if known else None,
            "steps_to_rolling_0.8": [r["training"]["steps_to_rolling_0.8"] for r in data["runs"]],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--train", action="store_true", help="run the learning benchmarks first")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", default=list(LEARNING), choices=list(LEARNING))
    args = parser.parse_args()
    if args.train and not args.quick:
        for run in dict.fromkeys(n for name in args.only for n in (name, LEARNING[name])):  # each run once
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "learning.py"), run, "--seeds", *map(str, args.seeds)], check=True
            )
    result = {"latency": latency(10.0 if args.quick else 30.0), "overhead": overhead(500 if args.quick else 3000)}
    lat, ov = result["latency"], result["overhead"]
    print(
        f"device input -> executed step at {lat['control_hz']:.0f} Hz: p50 {lat['latency_ms_p50']:.1f} ms, p99 "
        f"{lat['latency_ms_p99']:.1f} ms over {lat['inputs']} inputs (bound {lat['bound_ms']:.0f} ms: "
        f"{'met' if lat['met'] else 'MISSED'})"
    )
    print(
        f"arbitration with 3 devices: {ov['wrapped_us_p50']:.0f} us per step against {ov['bare_us_p50']:.0f} us "
        f"bare ({ov['ratio']:.1f}x, +{ov['added_us_p50']:.0f} us)"
    )
    if not args.quick:
        result["learning"] = learning_summary()
        for name, row in result["learning"].items():
            print(
                f"{name}: success {row['final_success']} at {row['final_env_steps']} env steps, intervention rate "
                f"over the last 1k {row['intervention_rate_last_1k']} "
                f"(mean {row['intervention_rate_last_1k_mean']})"
            )
    result["load"] = round(os.getloadavg()[0], 2)
    write_result("hil", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
