"""What serving a base policy over ZeroMQ costs the actor (issue 50, "a remote policy server"): the same chunks asked
of the local base and of `robo-rl policy serve` on loopback, in the same run.

  flow      a flow policy (random weights: timing only; state 14, 7 actions, chunk 50, 3 x 512, 10 steps, the numpy
            sampler on the CPU as a residual's base runs), its chunk for the same observation and noise from the
            local base and through a server process; and with a real-time chunking guide (the server samples with
            torch's guided inpainting, which both sides then run)
  payload   the wire alone: a policy that answers at once, asked with the state only and with two 224 x 224 cameras
            (a VLA's input), served from a thread of this process

Per case: round trip p50/p99 ms at the client, the server's own inference ms, and the difference (what the wire,
the codec and the checks add). On loopback the network is nothing; over a LAN add its round trip and the frames'
bytes at its rate.

    python bench/policy_server.py            # 300 requests per case: ~1 min (bench/results/policy_server.json)
    python bench/policy_server.py --quick    # 50 per case (bench/results/quick/)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

STATE_DIM, ACTION_DIM, CHUNK, HIDDEN, STEPS = 14, 7, 50, [512, 512, 512], 10
IMAGE_SIZE, CAMERAS = 224, ("front", "wrist")
MEASURED_CODE = ["policies/remote.py", "policies/remote_protocol.py", "robo_rl/serving"]


def percentiles(values: list[float]) -> dict:
    p50, p99 = np.percentile(np.asarray(values), [50, 99])
    return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3)}


def timed(call, n: int) -> list[float]:
    call()  # the first call pays for lazy set-up on both sides
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def remote_case(remote, call, n: int) -> dict:
    served = []

    def ask():
        call()
        served.append(remote.server_ms[-1])  # the server's own time for this request

    trips = timed(ask, n)
    served = served[1:]  # the untimed first call's
    overhead = [t - s for t, s in zip(trips, served, strict=True)]
    return {"round_trip": percentiles(trips), "server": percentiles(served), "overhead": percentiles(overhead)}


def flow(n: int, folder: Path) -> dict:
    import torch

    from policies.bc import load_bc_base
    from policies.chunking import Guide, rtc_weights
    from policies.flow import ChunkGenerator
    from policies.remote import RemoteBase
    from robo_rl.envs import make_observation_space
    from robo_rl.offline.bc import save_atomic
    from robo_rl.transport.ports import free_ports

    torch.manual_seed(0)
    model = ChunkGenerator(STATE_DIM, ACTION_DIM, chunk_size=CHUNK, steps=STEPS, hidden=HIDDEN)
    path = save_atomic(model.checkpoint(), folder / "bc" / "policy.pt")
    space = make_observation_space(STATE_DIM, {})
    base = load_bc_base(path, space, ACTION_DIM)
    port = free_ports(1)[0]
    argv = [sys.executable, "-m", "robo_rl.cli", "policy", "serve", str(path), f"port={port}", "device=cpu"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        print(server.stdout.readline().strip(), flush=True)
        threading.Thread(target=server.stdout.read, daemon=True).start()
        remote = RemoteBase(f"tcp://127.0.0.1:{port}", space, ACTION_DIM)
        rng = np.random.default_rng(0)
        obs = {"state": rng.standard_normal(STATE_DIM).astype(np.float32), "images": {}}
        z = rng.standard_normal((CHUNK, ACTION_DIM)).astype(np.float32)
        guide = Guide(np.zeros((30, ACTION_DIM), np.float32), rtc_weights(30, 5), 5)
        same = float(np.abs(remote.predict_chunk(obs, z) - base.predict_chunk(obs, z)).max())
        out = {
            "largest_difference_local_vs_remote": same,
            "local": percentiles(timed(lambda: base.predict_chunk(obs, z), n)),
            "remote": remote_case(remote, lambda: remote.predict_chunk(obs, z), n),
            "local_guided": percentiles(timed(lambda: base.predict_chunk(obs, z, guide=guide), n)),
            "remote_guided": remote_case(remote, lambda: remote.predict_chunk(obs, z, guide=guide), n),
        }
        remote.close()
        return out
    finally:
        server.kill()
        server.wait(10)


class Instant:
    """A policy that answers at once: the payload case times the wire, not a model."""

    action_dim, chunk_size = ACTION_DIM, CHUNK

    def predict_chunk(self, obs):
        return np.zeros((CHUNK, ACTION_DIM), np.float32)


def payload(n: int) -> dict:
    from policies.remote import RemoteBase
    from robo_rl.envs import make_observation_space
    from robo_rl.serving.served import ServedPolicy
    from robo_rl.serving.server import PolicyServer
    from robo_rl.transport.ports import free_ports

    out = {}
    for name, cameras in (("state_only", {}), ("two_224_cameras", dict.fromkeys(CAMERAS, (IMAGE_SIZE, IMAGE_SIZE)))):
        server = PolicyServer(
            ServedPolicy(Instant(), "instant", "v1", STATE_DIM, cameras), "127.0.0.1", free_ports(1)[0]
        )
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        try:
            remote = RemoteBase(server.address, make_observation_space(STATE_DIM, cameras), ACTION_DIM)
            images = {c: np.full((*hw, 3), 128, np.uint8) for c, hw in cameras.items()}
            obs = {"state": np.zeros(STATE_DIM, np.float32), "images": images}
            out[name] = {
                "request_bytes": STATE_DIM * 4 + sum(img.nbytes for img in images.values()),
                **remote_case(remote, lambda obs=obs, remote=remote: remote.predict_chunk(obs), n),
            }
            remote.close()
        finally:
            server.stopping.set()
            thread.join(5)
            server.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 requests per case")
    parser.add_argument("--requests", type=int, default=None, help="requests per case (default 300, --quick 50)")
    args = parser.parse_args()
    n = args.requests or (50 if args.quick else 300)
    with tempfile.TemporaryDirectory() as tmp:
        result = {"requests_per_case": n, "flow": flow(n, Path(tmp)), "payload": payload(n)}
    path = write_result("policy_server", result, quick=args.quick, measured_code=MEASURED_CODE)
    print(f"written to {path}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
