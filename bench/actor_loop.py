"""Control-loop timing of the actor: period jitter at 10 Hz and 50 Hz while the transport streams and a
10M-parameter policy update arrives every second.

Runs the real `robo_rl.actor.Actor` (PointReach env, realtime pacing) against a learner-side process that
acknowledges data and publishes new weights once a second. The baseline, measured in the same run, is the
bare loop: the same env, policy inference and sleep pacing, with no transport and no weight updates.
Jitter = |period − 1/control_hz|. Target: p99 ≤ 5 ms with everything on.

    python bench/actor_loop.py            # 20 s per rate
    python bench/actor_loop.py --quick    # 6 s per rate
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from bench._results import write_result
from robo_rl.transport.link import free_ports

HIDDEN = [2240, 2240, 2240]  # ≈ 10M parameters with the PointReach state


def config(hz: float, ports: list[int], seconds: float):
    from robo_rl.config import load_config

    return load_config(
        [
            "env=point_reach",
            "experiment=rlpd",
            f"env.control_hz={hz}",
            f"policy.hidden={HIDDEN}",
            "actor.realtime=true",
            "actor.throttle_to_learner=false",
            "logger.progress=false",
            f"transport.data_port={ports[0]}",
            f"transport.weights_port={ports[1]}",
            f"transport.ctrl_port={ports[2]}",
        ]
    )


def serve(ports: list[int], seconds: float, config_hash: str) -> None:
    """The learner side: take data, publish a new 10M-parameter policy every second, stop after `seconds`."""
    import torch

    from robo_rl.config import make_env, make_policy
    from robo_rl.transport.codec import state_dict_to_arrays
    from robo_rl.transport.link import LearnerLink

    cfg = config(10, ports, seconds)
    policy = make_policy(cfg, make_env(cfg))
    link = LearnerLink("127.0.0.1", *ports, config_hash=config_hash)
    steps, version, start, last_push = 0, 0, None, 0.0
    while start is None or time.monotonic() - start < seconds:
        for _, arrays, *_ in link.poll(timeout_ms=5):
            steps += len(arrays["step"])
            start = start or time.monotonic()
        if start and time.monotonic() - last_push > 1.0:
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(0.001)
            version += 1
            link.publish_weights(version, state_dict_to_arrays(policy.state_dict()))
            last_push = time.monotonic()
        link.publish_status({"env_steps": steps, "updates": 0, "allowed_env_steps": 1e12})
    link.stop_actors("done")
    time.sleep(0.5)
    link.close()


def measure_actor(hz: float, seconds: float) -> dict:
    from robo_rl.actor import Actor
    from robo_rl.config import config_hash

    ports = free_ports(3)
    cfg = config(hz, ports, seconds)
    learner = subprocess.Popen(
        [sys.executable, __file__, "--serve", *map(str, ports), "--seconds", str(seconds), "--hash", config_hash(cfg)]
    )
    try:
        actor = Actor(cfg, progress=False)
        actor.run()
        stats = actor.loop_stats()
        stats["weight_versions_applied"] = actor.policy_version
        stats["steps"] = actor.sent_steps
    finally:
        learner.wait(timeout=30)
    return stats


def measure_bare(hz: float, seconds: float) -> dict:
    """The same env, policy and sleep pacing with no transport: the floor this machine's scheduler allows."""
    import torch

    from robo_rl.config import make_env, make_policy
    from robo_rl.policy_io import policy_action

    torch.set_num_threads(1)
    cfg = config(hz, free_ports(3), seconds)
    env = make_env(cfg)
    policy = make_policy(cfg, env).eval()
    obs, _ = env.reset(seed=0)
    starts, next_tick, end = [], time.monotonic(), time.monotonic() + seconds
    while time.monotonic() < end:
        starts.append(time.monotonic())
        obs, _, term, trunc, _ = env.step(policy_action(policy, obs, deterministic=False))
        if term or trunc:
            obs, _ = env.reset()
        next_tick += 1.0 / hz
        time.sleep(max(0.0, next_tick - time.monotonic()))
    jitter = np.abs(np.diff(starts) - 1.0 / hz) * 1e3
    return {"jitter_ms_p50": float(np.percentile(jitter, 50)), "jitter_ms_p99": float(np.percentile(jitter, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", type=int, nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--hash", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.seconds, args.hash)
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    results = {}
    for hz in (10, 50):
        ours, bare = measure_actor(hz, seconds), measure_bare(hz, seconds)
        results[f"{hz}hz"] = {
            "ours": ours,
            "bare_loop": bare,
            "p99_target_ms": 5.0,
            "p99_met": ours.get("jitter_ms_p99", 1e9) <= 5.0,
        }
        print(
            f"{hz} Hz: ours jitter p50 {ours['jitter_ms_p50']:.2f} ms p99 {ours['jitter_ms_p99']:.2f} ms "
            f"({ours['weight_versions_applied']} weight versions applied); bare loop p99 "
            f"{bare['jitter_ms_p99']:.2f} ms",
            flush=True,
        )
    write_result("actor_loop", results, args.quick)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
