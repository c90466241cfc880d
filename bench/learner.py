"""Learner speed: our SAC update against LeRobot 0.6.1's SAC learner step (`GaussianActorPolicy` +
`SACAlgorithm`, built as its `learner.py` builds them, see `_learner_lerobot_baseline.py`), in the same process,
one torch thread, batch 256, matching network sizes (2 critics, 256-256 MLPs) and encoders.

Configurations (ours in `algo.precision=auto`: bfloat16 matrix products where the CPU has AVX512-BF16/AMX, else
float32; LeRobot as it ships, in float32):
  state     18-d state, 4-d action
  state_fp32       (full run only) the same with ours forced to float32
  state_both_bf16  (full run only) the same with LeRobot's step also inside a bfloat16 autocast, for reference
  pixels    + two 128×128 cameras, the same encoder architecture on both sides: LeRobot's default image encoder
            (4 convolutions 7-5-3-3, stride 2, 32 channels, frozen by its default, shared by actor and critic,
            256 features per camera) and ours configured the same (cnn kernels 7-5-3-3, strides 2, 32 channels,
            frozen, shared, 256 features)
  default   our default pixel configuration (`experiment=pick_cube_pixels`: two 64×64 cameras, 16-channel CNN
            trained through the critic and shared with the actor, random shift, batch 128) — it must reach
            10 updates/s to train at UTD 1 beside a 10 Hz actor
  resnet10  (full run only) ResNet-10 backbones with random weights, frozen, on both sides

One update = one critic step, one actor step and one temperature step (LeRobot's default utd_ratio 1 and
policy_update_freq 1; ours `critic_updates_per_actor: 1`), our random shift included, sampling excluded on both
sides (prebuilt batches). Rates are given per wall second and per CPU second (robust on a shared machine). Both
run in this one process with the heap settings `robo-rl learner` sets (robo_rl/allocator.py; `--malloc-defaults`
leaves glibc's).

    python bench/learner.py            # 20 s per measurement
    python bench/learner.py --quick    # 3 s per measurement, state/pixels/default only (about 45 s in all)
    python bench/learner.py --device cuda --seconds 8   # both learners on a GPU (batches copied there per update)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _learner_lerobot_baseline import lerobot_sac_figures  # noqa: E402

from bench._results import write_result  # noqa: E402
from policies.gaussian import TanhGaussianPolicy  # noqa: E402
from robo_rl.algos.base import resolve_device  # noqa: E402
from robo_rl.algos.sac import SAC, SACConfig  # noqa: E402
from robo_rl.allocator import keep_freed_memory  # noqa: E402
from robo_rl.envs import make_observation_space  # noqa: E402
from robo_rl.policy_io import batch_to_torch  # noqa: E402

CPU = torch.device("cpu")

STATE_DIM, ACTION_DIM = 18, 4
LEROBOT_LIKE_CNN = {
    "kind": "cnn",
    "channels": 32,
    "kernels": [7, 5, 3, 3],
    "strides": [2, 2, 2, 2],
    "freeze": True,
    "features": 256,
}
CONFIGS = {
    "state": dict(cameras=0, hw=128, batch=256, encoder=None, algo={}),
    "state_fp32": dict(cameras=0, hw=128, batch=256, encoder=None, algo={"precision": "float32"}),
    "state_both_bf16": dict(cameras=0, hw=128, batch=256, encoder=None, algo={}, lerobot_bf16=True),
    "pixels": dict(cameras=2, hw=128, batch=256, encoder=LEROBOT_LIKE_CNN, algo={"share_encoder": True}),
    "default": dict(cameras=2, hw=64, batch=128, encoder={"channels": 16}, algo={"share_encoder": True}),
    "resnet10": dict(
        cameras=2,
        hw=128,
        batch=256,
        encoder={"kind": "resnet10", "freeze": True, "features": 256},
        algo={"share_encoder": True},
    ),
}


def as_numpy(tree):
    return {k: as_numpy(v) for k, v in tree.items()} if isinstance(tree, dict) else tree.numpy()


def ours(
    cameras: int,
    hw: int,
    batch: int,
    encoder: dict | None,
    algo: dict,
    seconds: float,
    seed: int = 0,
    warmup_s: float = 2.0,
    device: torch.device = CPU,
) -> dict:
    torch.manual_seed(seed)
    names = [f"cam{i}" for i in range(cameras)]
    space = make_observation_space(STATE_DIM, {n: (hw, hw) for n in names})
    policy = TanhGaussianPolicy(space, ACTION_DIM, hidden=[256, 256], encoder=encoder).to(device)
    sac = SAC(policy, space, SACConfig(num_critics=2, critic_hidden=(256, 256), **algo))
    gen = torch.Generator().manual_seed(seed)

    def obs():
        images = {n: torch.randint(0, 256, (batch, hw, hw, 3), dtype=torch.uint8, generator=gen) for n in names}
        return {"state": torch.rand(batch, STATE_DIM, generator=gen) * 2 - 1, "images": images}

    batches = [
        {
            "obs": obs(),
            "next_obs": obs(),
            "action": torch.rand(batch, ACTION_DIM, generator=gen) * 2 - 1,
            "reward": torch.rand(batch, generator=gen),
            "discount": torch.full((batch,), 0.99),
        }
        for _ in range(2 if cameras else 4)
    ]
    if device.type != "cpu":  # as the learner hands them over: numpy from the replay, pinned, copied non-blocking
        batches = [as_numpy(b) for b in batches]
    times, cpu = [], []

    def step(i: int) -> None:
        t, c = time.perf_counter(), time.process_time()
        b = batches[i % len(batches)]
        sac.update([b if device.type == "cpu" else batch_to_torch(b, device)])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)

    t0, i = time.perf_counter(), 0
    while i < 2 or time.perf_counter() - t0 < warmup_s:  # warm-up
        step(i)
        i += 1
    times.clear(), cpu.clear()
    t0 = time.perf_counter()
    while not times or time.perf_counter() - t0 < seconds:
        step(i)
        i += 1
    elapsed = time.perf_counter() - t0
    return {
        "precision": str(sac.compute_dtype).removeprefix("torch."),
        "updates_per_s": len(times) / elapsed,
        "updates_per_cpu_s_median": 1 / statistics.median(cpu),
        "ms_per_update_median": statistics.median(times) * 1e3,
        "updates": len(times),
        "params": sum(p.numel() for p in policy.parameters()) + sum(p.numel() for p in sac.critic.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s measurements, 1 s warm-up, no resnet10")
    parser.add_argument("--configs", nargs="+", default=None, choices=sorted(CONFIGS))
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or auto: where both learners run")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement (20; --quick: 3)")
    parser.add_argument(
        "--malloc-defaults", action="store_true", help="leave glibc's heap trimming as it is (as before issue 50)"
    )
    args = parser.parse_args()
    device = resolve_device(args.device)
    torch.set_num_threads(1)
    # as `robo-rl learner` does; one process, so LeRobot's step runs with the same heap settings as ours
    heap_kept = not args.malloc_defaults and keep_freed_memory()
    # measurement seconds; warm-up seconds for ours; (updates, seconds) of warm-up for LeRobot at least
    seconds, warmup_s, lerobot_warmup = (3.0, 1.0, (1, 1.0)) if args.quick else (20.0, 2.0, (2, 3.0))
    seconds = args.seconds or seconds
    names = args.configs or (["state", "pixels", "default"] if args.quick else list(CONFIGS))
    result = {"seconds_per_measurement": seconds, "torch_threads": 1, "device": str(device), "heap_kept": heap_kept}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    for name in names:
        c = CONFIGS[name]
        a = ours(c["cameras"], c["hw"], c["batch"], c["encoder"], c["algo"], seconds, warmup_s=warmup_s, device=device)
        entry = {"ours": a}
        if name != "default":  # LeRobot has no counterpart of our default pixel configuration
            vision = "resnet10-random" if name == "resnet10" else None
            b = lerobot_sac_figures(
                state_dim=STATE_DIM,
                action_dim=ACTION_DIM,
                cameras=c["cameras"],
                image_hw=(c["hw"], c["hw"]),
                batch_size=c["batch"],
                vision_encoder=vision,
                seconds=seconds,
                bf16_autocast=c.get("lerobot_bf16", False),
                warmup=lerobot_warmup,
                device=str(device),
            )
            entry["lerobot"] = {
                k: b[k]
                for k in ("updates_per_s", "updates_per_cpu_s_median", "ms_per_update_median", "updates", "params")
            }
            entry["ratio_wall"] = a["updates_per_s"] / b["updates_per_s"]
            entry["ratio_cpu"] = a["updates_per_cpu_s_median"] / b["updates_per_cpu_s_median"]
            print(
                f"{name:<15} ours ({a['precision']}) {a['updates_per_s']:8.2f} upd/s "
                f"({a['updates_per_cpu_s_median']:.2f}/CPU s)  "
                f"lerobot {b['updates_per_s']:8.2f} upd/s ({b['updates_per_cpu_s_median']:.2f}/CPU s)  "
                f"ratio {entry['ratio_wall']:.1f}× wall, {entry['ratio_cpu']:.1f}× CPU",
                flush=True,
            )
        else:
            entry["fast_enough_for_utd1_at_10hz"] = a["updates_per_cpu_s_median"] >= 10.0
            print(
                f"{name:<15} ours ({a['precision']}) {a['updates_per_s']:8.2f} upd/s "
                f"({a['updates_per_cpu_s_median']:.2f}/CPU s); "
                f"needs 10/s for UTD 1 beside a 10 Hz actor",
                flush=True,
            )
        result[name] = entry
    result["load"] = os.getloadavg()[0]
    write_result("learner" if device.type == "cpu" else f"learner_{device.type}", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
