"""Frozen-base inference of a LeRobot ACT policy (lerobot's default ACT size, random weights: nothing downloaded)
through `LeRobotBase` + `ChunkedBase`, acting on PointReach: state-only, and with one 64x64 camera; and of our own MLP
BC base (the default residual experiment's architecture, random weights) in the actor's loop on the pick task,
numpy's forward pass (what actors run on the CPU) against torch's, rotating blocks with an env step between calls.

Figures per setting: inference per chunk (p50/p99, what `ChunkedBase.timing()` logs) and the cost of a step
between chunks (a queue pop). The baseline, measured in the same run on the same observations, is lerobot's
own rollout path: `prepare_observation_for_inference`, its preprocessor, `select_action` (its own queue), its
postprocessor, every step; its chunk figure is the steps at which its queue was empty.

    python bench/base_inference.py                 # 20 chunks of 100 per setting, torch's default threads
    python bench/base_inference.py --threads 1     # one intra-op thread: on a busy 2-core machine torch's default
                                                   # threads spin against other processes (5x slower chunks)
    python bench/base_inference.py --quick         # 5 chunks
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402
from bench.flow import latency  # noqa: E402 — the rotation of blocks the flow bases are timed with
from policies.base import ChunkedBase  # noqa: E402
from policies.lerobot_base import LeRobotBase  # noqa: E402
from robo_rl.envs import make_observation_space  # noqa: E402

ACTION_DIM, STATE_DIM, CAMERA_PX = 2, 4, 64


def save_act(folder: Path, camera: bool, chunk_size: int) -> None:
    """lerobot's default ACT (ResNet-18 backbone with a camera) with identity normalisation stats, saved by path."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (STATE_DIM,))}
    if camera:
        inputs["observation.images.top"] = PolicyFeature(FeatureType.VISUAL, (3, CAMERA_PX, CAMERA_PX))
    else:  # ACT needs a camera or an environment state; ours is the whole state vector
        inputs["observation.environment_state"] = PolicyFeature(FeatureType.ENV, (STATE_DIM,))
    cfg = ACTConfig(
        input_features=inputs,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (2,))},
        chunk_size=chunk_size,
        n_action_steps=chunk_size,
        pretrained_backbone_weights=None,
        device="cpu",
        push_to_hub=False,
    )

    def identity(shape):
        return {
            "mean": torch.zeros(shape),
            "std": torch.ones(shape),
            "min": -torch.ones(shape),
            "max": torch.ones(shape),
        }

    stats = {
        key: identity(ft.shape[:1] if ft.type is not FeatureType.VISUAL else (3, 1, 1))
        for key, ft in {**inputs, **cfg.output_features}.items()
    }
    policy = get_policy_class("act")(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(folder)


def observations(camera: bool, steps: int, seed: int = 0) -> list[dict]:
    """PointReach observations (its 8x8 camera shown at 64x64) from a random walk of the point."""
    from sim.point_reach import PointReachEnv

    env = PointReachEnv(max_episode_steps=10**9, camera=camera)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(steps):
        if camera:
            scale = CAMERA_PX // 8
            obs = {"state": obs["state"], "images": {"top": obs["images"]["top"].repeat(scale, 0).repeat(scale, 1)}}
        out.append(obs)
        obs = env.step(rng.uniform(-1, 1, ACTION_DIM).astype(np.float32))[0]
    return out


def percentiles(ms: list[float]) -> dict:
    p50, p99 = np.percentile(np.asarray(ms), [50, 99])
    return {"p50": round(float(p50), 4), "p99": round(float(p99), 4), "n": len(ms)}


def ours(folder: Path, space, obs_seq: list[dict]) -> dict:
    chunked = ChunkedBase(LeRobotBase.load(folder, space, ACTION_DIM))
    chunked.reset()
    chunked.act(obs_seq[0])  # warm-up inference
    chunked.reset()
    chunked.inference_ms.clear()
    steps = []
    for obs in obs_seq:
        pop = bool(chunked.queue)
        start = time.perf_counter()
        chunked.act(obs)
        if pop:
            steps.append((time.perf_counter() - start) * 1e3)
    return {"chunk_ms": percentiles(list(chunked.inference_ms)), "step_ms": percentiles(steps)}


def lerobot_rollout(folder: Path, obs_seq: list[dict], camera: bool) -> dict:
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.policies.utils import prepare_observation_for_inference

    policy = get_policy_class("act").from_pretrained(folder).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(folder))
    cpu = torch.device("cpu")

    def step(obs):
        raw = {"observation.state": obs["state"].copy()}
        if camera:
            raw["observation.images.top"] = obs["images"]["top"].copy()
        else:
            raw["observation.environment_state"] = obs["state"].copy()
        with torch.inference_mode():
            return post(policy.select_action(pre(prepare_observation_for_inference(raw, cpu))))

    policy.reset()
    step(obs_seq[0])  # warm-up inference
    policy.reset()
    steps, chunks = [], []
    for obs in obs_seq:
        refill = len(policy._action_queue) == 0  # only to sort its steps into chunk starts and queue pops
        start = time.perf_counter()
        step(obs)
        (chunks if refill else steps).append((time.perf_counter() - start) * 1e3)
    return {"chunk_ms": percentiles(chunks), "step_ms": percentiles(steps)}


def mlp_base(calls: int) -> dict:
    """Our MLP BC base (`robo-rl bc`'s default: LayerNorm MLP 256x256, closed loop) on the pick task's state, random
    weights: `predict_chunk` by numpy's forward pass and by torch's, in the actor's loop, one torch thread."""
    import copy

    from policies.bc import BCBase, BCPolicy
    from robo_rl.config import load_config, make_env

    env = make_env(load_config(["experiment=rlpd"]))
    torch.manual_seed(0)
    base = BCBase(BCPolicy(env.observation_space["state"].shape[0], env.action_space.shape[0]))
    assert base.fast is not None
    baseline = copy.copy(base)
    baseline.fast = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return latency({"mlp": base, "mlp_torch": baseline}, [], calls, env=env)
    finally:
        torch.set_num_threads(threads)
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunks", type=int, default=None, help="chunks per setting (default 20, --quick 5)")
    parser.add_argument("--chunk-size", type=int, default=100, help="ACT chunk_size = n_action_steps")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--control-hz", type=float, default=10.0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    chunks = args.chunks or (5 if args.quick else 20)
    period_ms = 1e3 / args.control_hz
    results = {
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "chunk_size": args.chunk_size,
        "control_period_ms": period_ms,
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, camera in (("state", False), (f"camera{CAMERA_PX}", True)):
            folder = Path(tmp) / name
            save_act(folder, camera, args.chunk_size)
            space = make_observation_space(STATE_DIM, {"top": (CAMERA_PX, CAMERA_PX)} if camera else {})
            obs_seq = observations(camera, chunks * args.chunk_size)
            r = {"ours": ours(folder, space, obs_seq), "lerobot": lerobot_rollout(folder, obs_seq, camera)}
            r["chunk_p50_ratio"] = round(r["ours"]["chunk_ms"]["p50"] / r["lerobot"]["chunk_ms"]["p50"], 3)
            results[name] = r
            o, b = r["ours"], r["lerobot"]
            oc, bc, os_, bs = o["chunk_ms"], b["chunk_ms"], o["step_ms"], b["step_ms"]
            print(
                f"ACT {name}: per chunk p50 {oc['p50']:.2f} p99 {oc['p99']:.2f} ms (lerobot's rollout "
                f"{bc['p50']:.2f} / {bc['p99']:.2f}, ratio {r['chunk_p50_ratio']:.2f}); between chunks per step "
                f"p50 {os_['p50'] * 1e3:.1f} us p99 {os_['p99'] * 1e3:.1f} us (lerobot {bs['p50'] * 1e3:.0f} us / "
                f"{bs['p99'] * 1e3:.0f} us); control period {period_ms:.0f} ms",
                flush=True,
            )
    mlp = results["mlp_base_in_actor_loop"] = mlp_base(500 if args.quick else 3000)
    ours_ms, torch_ms = mlp["mlp"], mlp["mlp_torch"]
    print(
        f"our MLP BC base in the actor's loop: numpy p50 {ours_ms['p50_ms']:.3f} ms p99 {ours_ms['p99_ms']:.3f} ms, "
        f"torch p50 {torch_ms['p50_ms']:.3f} ms p99 {torch_ms['p99_ms']:.3f} ms: numpy "
        f"{mlp['mlp_numpy_over_torch_p50']:.1f}x (p50), {mlp['mlp_numpy_over_torch_p99']:.1f}x (p99) "
        "faster"
    )
    write_result("base_inference", results, args.quick)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
