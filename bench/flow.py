"""Flow/diffusion policies on the actor (issue 16): the K-step policy against its one-step distillation, each's
inference latency (p50/p99) and success, on our pick task from state.

  teacher   a flow policy (K = policy.steps Euler steps) and a diffusion policy (K DDIM steps), each behaviour-cloned
            from 30 scripted demonstrations (`robo-rl bc policy=flow|diffusion`)
  student   `robo-rl distill` of each: a one-step flow of the same noise
  latency   `predict_chunk` of teacher and student on the same observations, interleaved call by call (a loaded
            machine slows both alike), one torch thread, as the actor runs it; the ratio is the figure
  success   teacher and student on the same evaluation seeds

    python bench/flow.py            # both teachers, 50 evaluation episodes each, full distillation: minutes
    python bench/flow.py --quick    # the flow teacher, 20 episodes, a short distillation: within 60 s

The learning curves (DSRL and the residual method on the same flow base) are `bench/learning.py dsrl_pick`,
`dsrl_noise_pick`, `residual_flow_pick`. The last line is one JSON object.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")


def latency(teacher, student, observations: list[dict], calls: int) -> dict:
    """p50/p99 ms of each, calls interleaved (teacher, student, teacher, ...) over the same observations."""
    times = {"teacher": [], "student": []}
    for i in range(calls + 20):
        obs = observations[i % len(observations)]
        for name, base in (("teacher", teacher), ("student", student)):
            start = time.perf_counter()
            base.predict_chunk(obs)
            if i >= 20:  # warm-up calls are not counted
                times[name].append((time.perf_counter() - start) * 1e3)
    out = {}
    for name, t in times.items():
        p50, p99 = np.percentile(t, [50, 99])
        out[name] = {"p50_ms": round(float(p50), 4), "p99_ms": round(float(p99), 4)}
    out["speedup_p50"] = round(out["teacher"]["p50_ms"] / out["student"]["p50_ms"], 2)
    out["speedup_p99"] = round(out["teacher"]["p99_ms"] / out["student"]["p99_ms"], 2)
    return out


def one_kind(kind: str, quick: bool, work: Path) -> dict:
    import torch

    from policies.bc import read_bc_checkpoint
    from policies.flow import GenerativeBase, load_generative_base
    from robo_rl.bc import train_bc
    from robo_rl.config import load_config, make_env
    from robo_rl.distill import distill

    overrides = ["experiment=rlpd", f"policy={kind}", "demos.num_episodes=30", "logger.progress=false",
                 f"cache_dir={ROOT / '.cache' / 'robo_rl'}", f"outputs_dir={work}", "torch_threads=1",
                 f"bc.eval_episodes={20 if quick else 50}", f"bc.epochs={150 if quick else 300}",
                 "bc.patience=1000"]  # fmt: skip
    cfg = load_config(overrides)
    start = time.perf_counter()
    bc = train_bc(cfg, work / kind, progress=False)
    bc_s = time.perf_counter() - start
    dcfg = load_config([*overrides, f"checkpoint={bc['checkpoint']}", f"distill.iterations={400 if quick else 3000}",
                        f"distill.rollout_episodes={0 if quick else 30}",
                        f"distill.eval_episodes={20 if quick else 50}"])  # fmt: skip
    start = time.perf_counter()
    report = distill(dcfg, work / f"{kind}_distill", progress=False)
    distill_s = time.perf_counter() - start
    env = make_env(cfg)
    try:
        space, adim = env.observation_space, env.action_space.shape[0]
        teacher = load_generative_base(read_bc_checkpoint(bc["checkpoint"]), space, adim)
        student = load_generative_base(read_bc_checkpoint(report["checkpoint"]), space, adim)
        assert isinstance(teacher, GenerativeBase) and student.model.steps == 1
        rng = np.random.default_rng(0)
        observations = []
        for _ in range(20):
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
            observations.append(obs)
    finally:
        env.close()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lat = latency(teacher, student, observations, 500 if quick else 3000)
    finally:
        torch.set_num_threads(threads)
    t, s = report["teacher"], report["student"]
    return {"kind": kind, "teacher_steps": teacher.model.steps, "bc_success": bc["eval"]["success_rate"],
            "teacher_success": t["success_rate"], "student_success": s["success_rate"],
            "teacher_success_ci95": t["success_ci95"], "student_success_ci95": s["success_ci95"],
            "success_points": round(100 * (s["success_rate"] - t["success_rate"]), 1), "eval_episodes": t["episodes"],
            "latency": lat, "distill_final_loss": report["train"]["final_loss"], "bc_s": round(bc_s, 1),
            "distill_s": round(distill_s, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    kinds = ["flow"] if args.quick else ["flow", "diffusion"]
    with tempfile.TemporaryDirectory() as tmp:
        results = [one_kind(kind, args.quick, Path(tmp)) for kind in kinds]
    load = os.getloadavg()[0]
    for r in results:
        lat = r["latency"]
        print(f"{r['kind']:>9} K={r['teacher_steps']}: teacher p50 {lat['teacher']['p50_ms']:.3f} ms p99 "
              f"{lat['teacher']['p99_ms']:.3f} | one step p50 {lat['student']['p50_ms']:.3f} ms p99 "
              f"{lat['student']['p99_ms']:.3f} | {lat['speedup_p50']:.1f}x (p50), {lat['speedup_p99']:.1f}x (p99) | "
              f"success {r['teacher_success']:.2f} -> {r['student_success']:.2f} ({r['success_points']:+.0f} points, "
              f"{r['eval_episodes']} episodes)")  # fmt: skip
    result = {"bench": "flow", "quick": args.quick, "load_avg_1m": round(load, 2),
              "wall_s": round(time.perf_counter() - start, 1), "results": results}  # fmt: skip
    out = ROOT / "bench" / "results" / f"flow{'_quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
