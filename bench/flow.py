"""Flow/diffusion policies on the actor (issue 16): the K-step policy against its one-step distillation, each's
inference latency (p50/p99) and success, on our pick task from state.

  teacher   a flow policy (K = policy.steps Euler steps) and a diffusion policy (K DDIM steps), each behaviour-cloned
            from 30 scripted demonstrations (`robo-rl bc policy=flow|diffusion`)
  student   `robo-rl distill` of each: a one-step flow of the same noise
  latency   `predict_chunk` of teacher and student, one torch thread, in alternating blocks of 50 calls (a loaded
            machine slows both alike, each network warm as an actor running it keeps it): back to back on saved
            observations (the network's cost), and in the actor's loop with an env step between calls (on the CPU);
            on the CPU as the actor runs them (numpy's sampler, policies/cpu_sampler.py) and, as its baseline, the
            same two models through torch's sampler
  success   teacher and student on the same evaluation seeds
  ppo       wall time of one PPO iteration (a rollout of `rollout` env steps on the pick env with the policy acting,
            then the update: 5 epochs of 128-decision minibatches), ReinFlow (the flow teacher, K = 4 and K = 1
            noisy Euler steps) against DPPO-style (the diffusion teacher, K = 20 DDIM steps, the last K' = 10 scored),
            in one process, alternating, one torch thread; and the same on a simulator that costs next to nothing
            (env=point_reach) with the Hopper recipes' 3 x 512 networks (random weights), where the policy takes the
            time. Network evaluations bound the ratio whatever the machine: per decision DPPO acts 20 and re-scores
            10 (forward and backward), ReinFlow K = 4 acts 4 and re-scores 4 (each with its small noise network), so
            DPPO's iteration is at most 20/4 = 5x ReinFlow K = 4's (its rollout) and 10/4 = 2.5x (its update); K = 1
            lifts the bounds to 20x and 10x

    python bench/flow.py            # both teachers, 50 evaluation episodes each, full distillation: minutes
    python bench/flow.py --quick    # the flow teacher, 20 episodes, a short distillation, 1 PPO iteration each: ≤ 60 s
    python bench/flow.py --expert --device cuda   # only the PPO iteration and K-step against one-step latency at
                                                  # SmolVLA's action-expert size (101M), acting on the GPU

The learning curves (DSRL and the residual method on the same flow base) are `bench/learning.py dsrl_pick`,
`dsrl_noise_pick`, `residual_flow_pick`. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import copy
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

from bench._results import write_result  # noqa: E402
from bench.vla import sync  # noqa: E402 — CUDA synchronised around a timed call


def latency(bases: dict, observations: list[dict], calls: int, env=None, block: int = 50) -> dict:
    """p50/p99 ms of each base over `calls` calls, in rotating blocks of `block` calls (teacher, student, ...), so a
    loaded machine slows all alike while each runs a stretch of calls as an actor runs its one policy (call by call
    alternation would make each call find the other network's weights in the caches, which no actor does).
    Without `env`: the calls back to back on the saved observations (the network's own cost, weights warm). With it:
    the actor's loop, each call followed by an env step with the chunk's first action (the simulator's memory traffic
    between two calls, as an actor has it); the first 2 calls of each block are not counted in either.
    `bases`: e.g. teacher and student as the actor runs them (numpy's sampler on the CPU), and the same two through
    torch's sampler (`<name>_torch`), the baseline of numpy's; ratios for each such pair."""
    times = {name: [] for name in bases}
    obs = env.reset(seed=0)[0] if env is not None else observations[0]
    done = 0
    while done < calls:
        for name, base in bases.items():
            for j in range(block + 2):
                if env is None:
                    obs = observations[(done + j) % len(observations)]
                start = time.perf_counter()
                chunk = base.predict_chunk(obs)
                if j >= 2:
                    times[name].append((time.perf_counter() - start) * 1e3)
                if env is not None:
                    obs, _, terminated, truncated, _ = env.step(np.clip(chunk[0], -1.0, 1.0))
                    if terminated or truncated:
                        obs, _ = env.reset()
        done += block
    out = {}
    for name, t in times.items():
        p50, p99 = np.percentile(t, [50, 99])
        out[name] = {"p50_ms": round(float(p50), 4), "p99_ms": round(float(p99), 4)}
    for suffix in ("", "_torch"):
        if "teacher" + suffix in out:
            for q in ("p50", "p99"):
                out[f"speedup{suffix}_{q}"] = round(
                    out["teacher" + suffix][f"{q}_ms"] / out["student" + suffix][f"{q}_ms"], 2
                )
    for name in bases:  # each base with a `<name>_torch` twin: how much faster numpy's path is
        if name + "_torch" in out:
            for q in ("p50", "p99"):
                out[f"{name}_numpy_over_torch_{q}"] = round(out[name + "_torch"][f"{q}_ms"] / out[name][f"{q}_ms"], 2)
    return out


def one_kind(kind: str, quick: bool, work: Path, device: str = "cpu") -> dict:
    """Behaviour cloning (on `device`), distillation (CPU), and the latency of both policies on `device`."""
    import torch

    from policies.bc import read_bc_checkpoint
    from policies.flow import GenerativeBase, load_generative_base
    from robo_rl.config import load_config, make_env
    from robo_rl.offline.bc import train_bc
    from robo_rl.offline.distill import distill

    # quick: the teacher gets epochs alone, no floor of gradient steps
    short = ["bc.flow_updates=0", "bc.diffusion_updates=0"] if quick else []
    overrides = [
        "experiment=rlpd",
        f"policy={kind}",
        "demos.num_episodes=30",
        "logger.progress=false",
        f"cache_dir={ROOT / '.cache' / 'robo_rl'}",
        f"outputs_dir={work}",
        "torch_threads=1",
        f"bc.eval_episodes={20 if quick else 50}",
        f"bc.epochs={150 if quick else 300}",
        "bc.patience=1000",
        f"device={device}",
        *short,
    ]
    cfg = load_config(overrides)
    start = time.perf_counter()
    bc = train_bc(cfg, work / kind, progress=False)
    bc_s = time.perf_counter() - start
    iterations = ["distill.iterations=400"] if quick else []  # full: robo-rl distill's own (10,000); CPU only
    dcfg = load_config(
        [
            *overrides,
            f"checkpoint={bc['checkpoint']}",
            *iterations,
            f"distill.rollout_episodes={0 if quick else 30}",
            f"distill.eval_episodes={20 if quick else 50}",
        ]
    )
    start = time.perf_counter()
    report = distill(dcfg, work / f"{kind}_distill", progress=False)
    distill_s = time.perf_counter() - start
    env = make_env(cfg)
    try:
        space, adim = env.observation_space, env.action_space.shape[0]
        teacher = load_generative_base(read_bc_checkpoint(bc["checkpoint"]), space, adim, device=device)
        student = load_generative_base(read_bc_checkpoint(report["checkpoint"]), space, adim, device=device)
        assert isinstance(teacher, GenerativeBase) and student.model.steps == 1
        rng = np.random.default_rng(0)
        observations = []
        for _ in range(20):
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
            observations.append(obs)
        bases = {"teacher": teacher, "student": student}
        if teacher.fast is not None:  # the same models through torch's sampler, the baseline of numpy's
            bases.update(teacher_torch=copy.copy(teacher), student_torch=copy.copy(student))
            bases["teacher_torch"].fast = bases["student_torch"].fast = None
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            calls = 500 if quick else 3000
            lat = latency(bases, observations, calls)
            in_loop = latency(bases, observations, calls, env=env) if device == "cpu" else None
        finally:
            torch.set_num_threads(threads)
    finally:
        env.close()
    t, s = report["teacher"], report["student"]
    return {
        "kind": kind,
        "device": device,
        "teacher_steps": teacher.model.steps,
        "bc_success": bc["eval"]["success_rate"],
        "teacher_success": t["success_rate"],
        "student_success": s["success_rate"],
        "teacher_success_ci95": t["success_ci95"],
        "student_success_ci95": s["success_ci95"],
        "success_points": round(100 * (s["success_rate"] - t["success_rate"]), 1),
        "eval_episodes": t["episodes"],
        "latency": lat,
        "latency_in_actor_loop": in_loop,
        "distill_final_loss": report["train"]["final_loss"],
        "bc_s": round(bc_s, 1),
        "distill_s": round(distill_s, 1),
    }


HOPPER_HIDDEN = [512, 512, 512]  # ReinFlow's and DPPO's Hopper networks
# SmolVLA's action expert and projections: 99.9M float32 parameters (bench/vla.py's real-size build); a flow MLP of
# 7 hidden layers of 4,096 has 101M
EXPERT_HIDDEN = [4096] * 7


class ActOn:
    """`policy` acting on `device` inside an env loop on the CPU, as a VLA-sized policy acts on a GPU: the
    observation goes there, the action and its extras come back."""

    def __init__(self, policy, device: str):
        self.policy, self.device, self.extras_spec = policy.to(device), device, policy.extras_spec

    def reset(self) -> None:
        self.policy.reset()

    def act_with_extras(self, obs: dict, deterministic: bool = False):
        images = {k: v.to(self.device) for k, v in obs["images"].items()}
        obs = {"state": obs["state"].to(self.device), "images": images}
        action, extras = self.policy.act_with_extras(obs, deterministic)
        return action.cpu(), {k: v.cpu() for k, v in extras.items()}


def ppo_iteration(policy, env, rollout_steps: int, seed: int, device: str = "cpu", act_device: str = "cpu") -> dict:
    """One PPO iteration as the learner runs it: the rollout's env steps acted by `policy` on `act_device` (the CPU,
    as an actor runs these small policies), its records through the learner's Rollout, then `algo.update` on
    `device` (the learner's copy of the policy there). Returns its seconds, split into acting and updating."""
    import copy

    import torch

    from robo_rl.algos.ppo import build_ppo
    from robo_rl.data.rollout import Rollout
    from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
    from robo_rl.policy_io import batch_to_torch, policy_step

    space, adim = env.observation_space, env.action_space.shape[0]
    learner_policy = copy.deepcopy(policy).to(device)
    algo = build_ppo(learner_policy, space, adim, rollout_env_steps=rollout_steps, batch_size=128, epochs=5)
    rollout = Rollout(0.99, rollout_steps)
    fields = fields_for_env(env, policy)
    recorder = EpisodeRecorder(adim, {k[6:]: v for k, v in fields.items() if k.startswith("extra/")})
    if act_device != "cpu":
        policy = ActOn(policy, act_device)
    start = time.perf_counter()
    episode = 0
    while rollout.env_steps < rollout_steps:
        obs, _ = env.reset(seed=seed + episode)
        policy.reset()
        records = [recorder.reset(obs, episode, 1)]
        done = False
        while not done:
            action, extras = policy_step(policy, obs, deterministic=False)
            obs, reward, terminated, truncated, info = env.step(action)
            records.append(recorder.record_step(obs, reward, terminated, truncated, info, 1, 0.0, extras))
            done = terminated or truncated
        rollout.add("bench", stack_records(records, fields))
        episode += 1
    sync(act_device)
    acted = time.perf_counter()
    metrics = algo.update([batch_to_torch(rollout.take(algo.batch_spec.extras), torch.device(device))])
    sync(device)
    end = time.perf_counter()
    return {
        "iteration_s": end - start,
        "act_s": acted - start,
        "update_s": end - acted,
        "decisions": metrics["decisions"],
        "env_steps": metrics["rollout_env_steps"],
    }


def ppo_timing(flow_ckpt: str, diffusion_ckpt: str | None, quick: bool, device: str = "cpu") -> dict:
    """ReinFlow (K = 4, K = 1) against DPPO-style (K = 20, K' = 10) on the pick env, from the behaviour-cloned
    teachers (`diffusion_ckpt` None, as --quick passes: a diffusion network of the flow teacher's architecture with
    random weights: each network call costs what the trained teacher's does; its episodes can differ in length)."""
    import torch

    from policies.bc import read_bc_checkpoint
    from policies.chain import ChainPolicy
    from policies.flow import ChunkGenerator

    config = None if diffusion_ckpt else read_bc_checkpoint(flow_ckpt)["config"]  # the flow teacher's architecture

    def variants(space, adim):
        def dppo() -> ChainPolicy:
            kw = dict(steps=20, stochastic_steps=10, sigma_min=0.1, sigma_max=0.1)
            if diffusion_ckpt:
                return ChainPolicy(space, adim, diffusion_ckpt, "dppo", **kw)
            torch.manual_seed(0)
            generator = ChunkGenerator(**{**config, "kind": "diffusion", "steps": 20})
            return ChainPolicy(space, adim, None, "dppo", generator=generator, **kw)

        return {
            "reinflow_k4": lambda: ChainPolicy(space, adim, flow_ckpt, "reinflow", steps=4),
            "reinflow_k1": lambda: ChainPolicy(space, adim, flow_ckpt, "reinflow", steps=1),
            "dppo_k20_ft10": dppo,
        }

    return alternate_iterations(["experiment=rlpd"], variants, quick, device)


def ppo_timing_free_sim(
    quick: bool, device: str = "cpu", hidden: list[int] = HOPPER_HIDDEN, act_device: str = "cpu"
) -> dict:
    """The same three on a simulator that costs next to nothing (env=point_reach: 0.03 ms a step against pick's
    0.75 ms), with the networks of ReinFlow's and DPPO's Hopper recipes (3 × 512; random weights: a timing needs no
    training): the ratio where the policy, not the simulator, takes the time. `hidden`: another network (EXPERT_HIDDEN,
    SmolVLA's action expert's size, acting on the GPU with `act_device`)."""
    import torch

    from policies.chain import ChainPolicy
    from policies.flow import ChunkGenerator

    def variants(space, adim):
        def generator(kind: str, steps: int) -> ChunkGenerator:
            torch.manual_seed(0)
            return ChunkGenerator(
                space["state"].shape[0], adim, chunk_size=4, kind=kind, steps=steps, hidden=list(hidden)
            )

        return {
            "reinflow_k4": lambda: ChainPolicy(space, adim, None, "reinflow", steps=4, generator=generator("flow", 4)),
            "reinflow_k1": lambda: ChainPolicy(space, adim, None, "reinflow", steps=1, generator=generator("flow", 1)),
            "dppo_k20_ft10": lambda: ChainPolicy(
                space,
                adim,
                None,
                "dppo",
                steps=20,
                stochastic_steps=10,
                sigma_min=0.1,
                sigma_max=0.1,
                generator=generator("diffusion", 20),
            ),
        }

    out = alternate_iterations(["experiment=rlpd", "env=point_reach"], variants, quick, device, act_device)
    return {"hidden": list(hidden), "act_device": act_device, **out}


def expert_latency(device: str, hidden: list[int], calls: int, teacher_steps: int = 10) -> dict:
    """K-step against one-step chunk latency (p50/p99 ms) of a flow network of `hidden` on `device`, batch 1, CUDA
    synchronised: what a distilled one-step expert saves at that size (the student has the teacher's architecture).
    Alternating blocks of 20 calls after a warm-up."""
    import torch

    from policies.flow import ChunkGenerator

    torch.manual_seed(0)
    gen = ChunkGenerator(8, 6, chunk_size=4, kind="flow", steps=teacher_steps, hidden=list(hidden)).to(device).eval()
    params = sum(p.numel() for p in gen.parameters())
    obs = {"state": torch.randn(1, 8, device=device), "images": {}}
    noise = torch.randn(1, *gen.noise_shape, device=device)
    times: dict[str, list[float]] = {"teacher": [], "student": []}
    with torch.no_grad():
        for block in range(max(1, calls // 20) + 1):
            for name, steps in (("teacher", teacher_steps), ("student", 1)):
                for _ in range(20):
                    sync(device)
                    start = time.perf_counter()
                    gen.sample(gen.features(obs), noise, steps=steps)
                    sync(device)
                    if block:  # the first block warms up
                        times[name].append((time.perf_counter() - start) * 1e3)
    out = {"params": params, "hidden": list(hidden), "teacher_steps": teacher_steps}
    for name, t in times.items():
        p50, p99 = np.percentile(t, [50, 99])
        out[name] = {"p50_ms": round(float(p50), 4), "p99_ms": round(float(p99), 4), "n": len(t)}
    for q in ("p50", "p99"):
        out[f"speedup_{q}"] = round(out["teacher"][f"{q}_ms"] / out["student"][f"{q}_ms"], 2)
    return out


def alternate_iterations(overrides: list[str], variants, quick: bool, device: str, act_device: str = "cpu") -> dict:
    """PPO iterations of each of `variants(space, action_dim)` (name → policy factory) on the env of `overrides`,
    alternating, one torch thread; mean seconds of each and DPPO's over ReinFlow's."""
    import torch

    from robo_rl.config import load_config, make_env

    env = make_env(load_config(overrides))
    makers = variants(env.observation_space, env.action_space.shape[0])
    rollout, iterations = (300, 1) if quick else (2000, 3)
    times: dict[str, list[dict]] = {name: [] for name in makers}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(iterations):
            for name, make in makers.items():
                torch.manual_seed(i)
                times[name].append(ppo_iteration(make(), env, rollout, 1000 * i, device, act_device))
    finally:
        torch.set_num_threads(threads)
        env.close()
    out = {"rollout_env_steps": rollout, "iterations": iterations, "update_device": device}
    for name, runs in times.items():
        out[name] = {k: round(float(np.mean([r[k] for r in runs])), 3) for k in ("iteration_s", "act_s", "update_s")}
    dppo = out["dppo_k20_ft10"]["iteration_s"]
    out["dppo_over_reinflow_k4"] = round(dppo / out["reinflow_k4"]["iteration_s"], 2)
    out["dppo_over_reinflow_k1"] = round(dppo / out["reinflow_k1"]["iteration_s"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--expert",
        action="store_true",
        help="only the figures at SmolVLA's action-expert size "
        "(EXPERT_HIDDEN, random weights; acting and updates on --device): PPO iteration ReinFlow "
        "against DPPO-style on point_reach, K-step against one-step latency; --quick: a small network",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where BC trains, the policies' latency is timed and PPO "
        "updates: cpu (default), cuda, auto; acting and distillation stay on the CPU",
    )
    args = parser.parse_args()
    import torch

    from robo_rl.algos.base import resolve_device

    device = str(resolve_device(args.device))
    start = time.perf_counter()
    if args.expert:
        return expert_main(args.quick, device, start)
    kinds = ["flow"] if args.quick else ["flow", "diffusion"]
    with tempfile.TemporaryDirectory() as tmp:
        results = [one_kind(kind, args.quick, Path(tmp), device=device) for kind in kinds]
        # --quick: DPPO's iteration timed on a diffusion network with random weights (no second teacher to train)
        diffusion = None if args.quick else str(Path(tmp) / "diffusion" / "bc" / "policy.pt")
        ppo = ppo_timing(str(Path(tmp) / "flow" / "bc" / "policy.pt"), diffusion, args.quick, device)
    free = ppo_timing_free_sim(args.quick, device)
    load = os.getloadavg()[0]
    for r in results:
        lat = r["latency"]
        print(
            f"{r['kind']:>9} K={r['teacher_steps']}: teacher p50 {lat['teacher']['p50_ms']:.3f} ms p99 "
            f"{lat['teacher']['p99_ms']:.3f} | one step p50 {lat['student']['p50_ms']:.3f} ms p99 "
            f"{lat['student']['p99_ms']:.3f} | {lat['speedup_p50']:.1f}x (p50), {lat['speedup_p99']:.1f}x (p99) | "
            f"success {r['teacher_success']:.2f} -> {r['student_success']:.2f} ({r['success_points']:+.0f} points, "
            f"{r['eval_episodes']} episodes)"
        )
        if r["latency_in_actor_loop"]:
            loop = r["latency_in_actor_loop"]
            print(
                f"{'':>9} in the actor's loop (an env step between calls): teacher p50 "
                f"{loop['teacher']['p50_ms']:.3f}"
                f" ms | one step p50 {loop['student']['p50_ms']:.3f} ms | {loop['speedup_p50']:.1f}x (p50), "
                f"{loop['speedup_p99']:.1f}x (p99)"
            )
        for name, lat in (("back to back", r["latency"]), ("in the loop", r["latency_in_actor_loop"])):
            if lat and "teacher_torch" in lat:
                print(
                    f"{'':>9} torch's sampler {name}: teacher p50 {lat['teacher_torch']['p50_ms']:.3f} ms, one "
                    f"step {lat['student_torch']['p50_ms']:.3f} ms ({lat['speedup_torch_p50']:.1f}x); numpy's is "
                    f"{lat['teacher_numpy_over_torch_p50']:.1f}x / {lat['student_numpy_over_torch_p50']:.1f}x "
                    "faster"
                )
    for name, p in (("pick", ppo), ("free simulator, 3x512", free)):
        print(
            f"PPO iteration, {name} ({p['rollout_env_steps']} env steps + update): ReinFlow K=4 "
            f"{p['reinflow_k4']['iteration_s']:.2f} s, K=1 {p['reinflow_k1']['iteration_s']:.2f} s, DPPO K=20/10 "
            f"{p['dppo_k20_ft10']['iteration_s']:.2f} s: DPPO takes {p['dppo_over_reinflow_k4']:.1f}x (K=4), "
            f"{p['dppo_over_reinflow_k1']:.1f}x (K=1)"
        )
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    result = {
        "bench": "flow",
        "quick": args.quick,
        "device": device,
        "gpu": gpu,
        "load_avg_1m": round(load, 2),
        "wall_s": round(time.perf_counter() - start, 1),
        "results": results,
        "ppo": ppo,
        "ppo_free_sim": free,
    }
    write_result(f"flow{'_cuda' if gpu else ''}", result, args.quick)
    print(json.dumps(result))


def expert_main(quick: bool, device: str, start: float) -> None:
    """`--expert`: the PPO iteration and the one-step saving at SmolVLA's action-expert size, the policy acting and
    updating on `device` (a VLA-sized policy acts on the GPU), beside the Hopper-sized networks acting there too."""
    import torch

    hidden = [256, 256] if quick else EXPERT_HIDDEN
    torch.set_num_threads(1)
    results = {
        "expert": ppo_timing_free_sim(quick, device, hidden, act_device=device),
        "hopper": ppo_timing_free_sim(quick, device, HOPPER_HIDDEN, act_device=device),
        "latency_expert": expert_latency(device, hidden, 100 if quick else 400),
        "latency_hopper": expert_latency(device, HOPPER_HIDDEN, 100 if quick else 400),
    }
    for name in ("expert", "hopper"):
        p, lat = results[name], results[f"latency_{name}"]
        print(
            f"{name} ({lat['params'] / 1e6:.1f}M parameters, on {device}): PPO iteration on point_reach "
            f"({p['rollout_env_steps']} env steps + update): ReinFlow K=4 {p['reinflow_k4']['iteration_s']:.2f} s "
            f"(update {p['reinflow_k4']['update_s']:.2f}), K=1 {p['reinflow_k1']['iteration_s']:.2f} s (update "
            f"{p['reinflow_k1']['update_s']:.2f}), DPPO K=20/10 {p['dppo_k20_ft10']['iteration_s']:.2f} s (update "
            f"{p['dppo_k20_ft10']['update_s']:.2f}): DPPO takes {p['dppo_over_reinflow_k4']:.1f}x (K=4), "
            f"{p['dppo_over_reinflow_k1']:.1f}x (K=1) | chunk K=10 p50 {lat['teacher']['p50_ms']:.3f} ms p99 "
            f"{lat['teacher']['p99_ms']:.3f}, one step p50 {lat['student']['p50_ms']:.3f} p99 "
            f"{lat['student']['p99_ms']:.3f}: {lat['speedup_p50']:.1f}x / {lat['speedup_p99']:.1f}x"
        )
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    result = {
        "bench": "flow_expert",
        "quick": quick,
        "device": device,
        "gpu": gpu,
        "torch": torch.__version__,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "wall_s": round(time.perf_counter() - start, 1),
        **results,
    }
    folder = Path(os.environ["OUT"]) if os.environ.get("OUT") else None  # gpu.sh collects a device run's files there
    write_result(f"flow_expert{'_cuda' if gpu else ''}", result, quick, folder=folder)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
