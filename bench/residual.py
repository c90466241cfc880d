"""Residual RL (issue 12): what it costs to act and to learn, beside a baseline measured in the same run, and
what it learns (a summary of the `bench/learning.py` result files).

Acting: the actor's own decision path (`policy_io.policy_step` on a `ResidualPolicy`: base from its chunk queue,
then the residual MLP) timed per step, against the base alone (`ChunkedBase.act`) on the same observations, for
  - our MLP base (a `robo-rl bc` checkpoint, loaded as users load it), state;
  - a LeRobot ACT base (lerobot's default size, ResNet-18, random weights: nothing downloaded), state and with one
    64x64 camera (the residual then reads the camera too, through our CNN encoder).
Figures: p50/p99 per step over all steps and over the steps at which the base ran inference, the overhead of the
residual (ratio to the base alone) and the share of the control period used.

Learning: `ResidualAlgorithm.update` against `SAC.update` (RLPD), both on the same state batches, 4 critic steps
and one actor step per update: updates/s and the ratio.

Results (full run only): from bench/results/learning_residual_*.json and their RLPD counterparts, per seed the
final success, the env steps until the training success (rolling 20 episodes) first reaches 0.8, and the safety of
learning (the lowest rolling-50 training success in the first 5k env steps against the base's).

    python bench/residual.py            # everything (a few minutes)
    python bench/residual.py --quick    # MLP base + residual acting, and the update ratio (< 60 s)

The last line is one JSON object.
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

from bench._results import write_result  # noqa: E402
from bench.base_inference import ACTION_DIM, CAMERA_PX, STATE_DIM, observations, save_act  # noqa: E402
from policies.base import ChunkedBase  # noqa: E402
from policies.residual import ResidualPolicy  # noqa: E402
from robo_rl.algos.base import resolve_device  # noqa: E402
from robo_rl.envs import make_observation_space  # noqa: E402
from robo_rl.policy_io import batch_to_torch, policy_step  # noqa: E402

CONTROL_HZ = 10.0  # our pick task's and most real arms' policy rate
LEARNING = {
    "pick": ("residual_pick", "rlpd_pick30"),
    "lift": ("residual_lift", "rlpd_lift10"),
    "can": ("residual_can", None),
}


def percentiles(ms: list[float]) -> dict:
    p50, p99 = np.percentile(np.asarray(ms), [50, 99])
    return {"p50": round(float(p50), 4), "p99": round(float(p99), 4), "n": len(ms)}


def save_mlp_base(folder: Path, state_dim: int = STATE_DIM, action_dim: int = ACTION_DIM) -> Path:
    """A BC checkpoint of our default MLP size (random weights: timing does not depend on training)."""
    from policies.bc import BCPolicy
    from robo_rl.offline.bc import save_atomic

    torch.manual_seed(0)
    policy = BCPolicy(state_dim, action_dim, chunk_size=1, hidden=[256, 256])
    return save_atomic(policy.checkpoint(), folder / "bc" / "policy.pt")


def time_acting(base_spec: dict, space, obs_seq: list[dict]) -> dict:
    """Per-step decision time of base + residual (the actor's path), and of the base alone on the same steps."""
    policy = ResidualPolicy(space, ACTION_DIM, base_spec, scale=0.1, hidden=[256, 256])
    alone = ChunkedBase(policy.base.base, policy.base.execute_steps)
    out = {}
    for name, step in (
        ("base_alone", lambda o: alone.act(o)),
        ("base_plus_residual", lambda o: policy_step(policy, o, deterministic=False)),
    ):
        queue = alone.queue if name == "base_alone" else policy.base.queue
        policy.reset(), alone.reset()
        step(obs_seq[0])  # warm-up: the first inference builds lazy state
        policy.reset(), alone.reset()
        every, inference = [], []
        for obs in obs_seq:
            refill = not queue
            start = time.perf_counter()
            step(obs)
            ms = (time.perf_counter() - start) * 1e3
            every.append(ms)
            if refill:
                inference.append(ms)
        out[name] = {"step_ms": percentiles(every), "inference_step_ms": percentiles(inference)}
    ours, base = out["base_plus_residual"], out["base_alone"]
    period = 1e3 / CONTROL_HZ
    out["residual_overhead_ms_p50"] = round(ours["step_ms"]["p50"] - base["step_ms"]["p50"], 4)
    out["worst_step_share_of_period_p99"] = round(ours["inference_step_ms"]["p99"] / period, 4)
    return out


def acting(quick: bool, tmp: Path) -> dict:
    results = {}
    state_space = make_observation_space(STATE_DIM, {})
    steps = 300 if quick else 2000
    results["mlp_state"] = time_acting(
        {"kind": "bc", "path": str(save_mlp_base(tmp / "mlp"))}, state_space, observations(False, steps)
    )
    if quick:
        return results
    chunk = 20  # ResFiT ran ACT with 20-step chunks open-loop
    for name, camera in (("act_state", False), (f"act_camera{CAMERA_PX}", True)):
        folder = tmp / name
        save_act(folder, camera, chunk)
        space = make_observation_space(STATE_DIM, {"top": (CAMERA_PX, CAMERA_PX)} if camera else {})
        results[name] = time_acting({"kind": "lerobot", "path": str(folder)}, space, observations(camera, 20 * chunk))
    return results


def random_batch(state_dim: int, action_dim: int, size: int, gen: torch.Generator) -> dict:
    obs = {"state": torch.randn(size, state_dim, generator=gen), "images": {}}
    nxt = {"state": torch.randn(size, state_dim, generator=gen), "images": {}}
    base = torch.rand(size, action_dim, generator=gen) * 2 - 1
    return {
        "obs": obs,
        "next_obs": nxt,
        "action": (torch.rand(size, action_dim, generator=gen) * 2 - 1),
        "reward": torch.rand(size, generator=gen),
        "discount": torch.full((size,), 0.97),
        "extras": {"base_action": base},
        "next_extras": {"base_action": base},
        "next_extras_valid": torch.ones(size, dtype=torch.bool),
        "intervention": torch.zeros(size, dtype=torch.bool),
    }


def as_numpy(tree):
    return {k: as_numpy(v) for k, v in tree.items()} if isinstance(tree, dict) else tree.numpy()


def updates(seconds: float, tmp: Path, device: torch.device | None = None, precision: str = "float32") -> dict:
    """Updates/s of the residual algorithm and of SAC (RLPD) on the same batches: 256 samples, 4 critic steps and
    one actor step per update, 2 critics of 256x256 with LayerNorm, state 18, action 4 (our pick task's sizes)."""
    from policies.gaussian import TanhGaussianPolicy
    from robo_rl.algos.residual import build_residual
    from robo_rl.algos.sac import build_sac

    state_dim, action_dim = 18, 4
    space = make_observation_space(state_dim, {})
    gen = torch.Generator().manual_seed(0)
    batches = [random_batch(state_dim, action_dim, 256, gen) for _ in range(8)]
    base = {"kind": "bc", "path": str(save_mlp_base(tmp / "mlp18", state_dim, action_dim))}
    residual = build_residual(
        ResidualPolicy(space, action_dim, base, hidden=[256, 256]).to(device),
        space,
        action_dim,
        batch_size=256,
        critic_updates_per_actor=4,
        precision=precision,
    )
    sac = build_sac(
        TanhGaussianPolicy(space, action_dim, hidden=[256, 256]).to(device),
        space,
        action_dim,
        batch_size=256,
        critic_updates_per_actor=4,
        precision=precision,
    )
    device = device or torch.device("cpu")
    if device.type != "cpu":  # as the learner hands them over: numpy from the replay, pinned, copied non-blocking
        batches = [as_numpy(b) for b in batches]

    def update(algo, i: int) -> None:
        four = batches[4 * (i % 2) : 4 * (i % 2) + 4]
        algo.update(four if device.type == "cpu" else [batch_to_torch(b, device) for b in four])
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    out = {"device": str(device), "precision": precision}
    for name, algo in (("residual", residual), ("sac", sac)):
        update(algo, 0)  # warm-up
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            update(algo, n)
            n += 1
        out[f"{name}_updates_per_s"] = round(n / (time.perf_counter() - start), 2)
    out["ratio_residual_to_sac"] = round(out["residual_updates_per_s"] / out["sac_updates_per_s"], 3)
    return out


def learning_summary() -> dict:
    """Per benchmark: seeds, final success, env steps to a rolling 0.8, safety; residual beside RLPD."""
    out = {}
    for task, (res_name, rlpd_name) in LEARNING.items():
        entry = {}
        for role, name in (("residual", res_name), ("rlpd", rlpd_name)):
            path = ROOT / "bench" / "results" / f"learning_{name}.json"
            if name is None or not path.exists():
                continue
            data = json.loads(path.read_text())
            runs = data["runs"]
            entry[role] = {
                "seeds": data["seeds"],
                "final_success": data["final_success"],
                "steps_to_rolling_0.8": [r.get("training", {}).get("steps_to_rolling_0.8") for r in runs],
                "safety": [r.get("training", {}).get("safety") for r in runs],
            }
        reached = {k: [s for s in v["steps_to_rolling_0.8"] if s is not None] for k, v in entry.items()}
        if reached.get("residual") and reached.get("rlpd"):
            entry["steps_to_0.8_ratio_residual_to_rlpd"] = round(
                float(np.median(reached["residual"]) / np.median(reached["rlpd"])), 3
            )
        if entry:
            out[task] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="MLP base only, short update timing (< 60 s)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: the actor and the learner each take one core)",
    )
    parser.add_argument("--device", default="cpu", help="where the learner's update runs: cpu (default), cuda, auto")
    parser.add_argument("--precision", default="float32", help="both algorithms' algo.precision (float32, auto...)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    result = {
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
        "threads": args.threads,
        "control_hz": CONTROL_HZ,
        "quick": args.quick,
    }
    with tempfile.TemporaryDirectory() as tmp:
        result["acting"] = acting(args.quick, Path(tmp))
        result["updates"] = updates(5.0 if args.quick else 20.0, Path(tmp), device, args.precision)
    for name, r in result["acting"].items():
        o, b = r["base_plus_residual"], r["base_alone"]
        print(
            f"acting {name}: base + residual per step p50 {o['step_ms']['p50']:.3f} ms p99 {o['step_ms']['p99']:.3f} "
            f"ms; at inference steps p50 {o['inference_step_ms']['p50']:.2f} p99 {o['inference_step_ms']['p99']:.2f} "
            f"ms (base alone {b['inference_step_ms']['p50']:.2f} / {b['inference_step_ms']['p99']:.2f}); "
            f"{100 * r['worst_step_share_of_period_p99']:.1f}% of the {1e3 / CONTROL_HZ:.0f} ms control period at "
            "p99",
            flush=True,
        )
    u = result["updates"]
    print(
        f"learner: residual {u['residual_updates_per_s']:.1f} updates/s, SAC {u['sac_updates_per_s']:.1f} "
        f"(ratio {u['ratio_residual_to_sac']:.2f})",
        flush=True,
    )
    if not args.quick:
        result["learning"] = learning_summary()
        for task, entry in result["learning"].items():
            print(f"learning {task}: {json.dumps(entry)}", flush=True)
    write_result("residual" if device.type == "cpu" else f"residual_{device.type}", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
