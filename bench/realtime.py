"""What async inference and real-time chunking buy a slow chunked policy (issue 50, "the actor never waits").

Each policy acts on the pick task (sim/pick_cube.py, lift, 10 Hz) in a real-time loop paced as the actor paces
`actor.realtime=true` (robo_rl/actor.py: a step starts, the policy decides, the env steps, the loop sleeps to the
next tick of 1 / control_hz and catches up without sleeping when it is behind), through the executor the actor uses
(`ChunkedBase` over policies/chunking.py's `ChunkExecutor`, its delay measured against the control rate, the actor's
default), once per `actor.chunking` mode:

  synthetic  a chunked policy that takes 300 ms per chunk (a sleep: it loads no core) and answers a smooth wave in
             the episode's step, each chunk offset by ±0.2 in turn (chunks that disagree, as a multi-modal policy's
             do); it never solves the task: timing and boundaries only
  flow       a flow policy behaviour-cloned from 30 scripted demonstrations (`robo-rl bc policy=flow`, chunk 16, 4
             run per chunk), slowed to 300 ms per chunk by a wrapper that sleeps after the model's call
  expert     a flow network of SmolVLA's action-expert size (101M parameters, 7 x 4,096, bench/flow.py's
             EXPERT_HIDDEN; random weights, so timing only; chunk 50, 25 run per chunk, SmolVLA's chunk) at its own
             speed on this CPU, where it loads a core while the loop runs

and, with each, a reference: the policy at its own speed with no added latency under sync (for the flow policy,
about 1 ms a chunk: the success it has when nothing waits), or for the expert the synthetic policy without its
sleep: the loop's own jitter on this machine at this load, measured in the same run. The modes take turns episode
by episode on the same env seeds, so a loaded machine slows all alike. Each episode's clock starts once its first
action is in hand (the arm stands at its reset pose while the first chunk is computed, in every mode), so the
figures are the steady state. Per mode:

  jitter     |period - 1/control_hz| of every step within an episode, p50/p99/max ms (target with async/rtc: p99 <= 5)
  waits      steps the loop waited for a chunk (ChunkExecutor.waits, episode starts not counted), and the time
  jumps      the largest |Δaction| at a chunk boundary, against the policy's own largest step within a chunk (both
             on the executed actions; all dimensions, and the arm's alone: the gripper's ±1 flips dominate the first)
  success    k/n with its Wilson 95% interval; inference p50/p99 ms (the executor's timings: what the actor reports)

and for the flow policy, success unpaced with a fixed delay of d = 1 and 4 steps (async, rtc) against sync, on 100
episodes: what running each chunk's actions d steps after their observation costs this policy, apart from timing.

    python bench/realtime.py             # all three policies: ~20 min (bench/results/realtime_<date>_<commit>.json)
    python bench/realtime.py --quick     # synthetic and flow (a short training), 2 episodes per mode: ~2 min
"""

from __future__ import annotations

import argparse
import inspect
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

MODES = ("sync", "async", "rtc")
LATENCY_S = 0.3  # the slow policy: a VLA's chunk at 10 Hz
CHUNK, EXECUTE = 16, 4  # the synthetic and flow policies' chunk length, and the actions run per chunk
EXPERT_CHUNK, EXPERT_EXECUTE = 50, 25  # SmolVLA's chunk
EXPERT_HIDDEN = [4096] * 7  # bench/flow.py's SmolVLA-action-expert-sized flow network (101M parameters)
ARM = slice(0, 3)  # the pick task's end-effector move; the last dimension is the gripper
JITTER_TARGET_MS = 5.0
SEED = 1000  # the first episode's env seed; every mode runs the same seeds


class Paced:
    """A base whose chunk takes at least `latency_s` (it sleeps after the model's call), with its calls counted so
    an episode ends only after the worker's last call has come back (the next mode starts on an idle machine, as a
    robot's reset outlasts one inference). `guide` goes to a base that takes one, else the chunk is blended with it,
    as `ChunkedBase` does."""

    def __init__(self, base, latency_s: float = 0.0) -> None:
        self.base, self.latency_s = base, latency_s
        self.action_dim, self.chunk_size = base.action_dim, base.chunk_size
        self._guided = "guide" in inspect.signature(base.predict_chunk).parameters
        self._busy = threading.Condition()
        self._in_flight = 0

    def reset(self) -> None:
        self.base.reset()

    def predict_chunk(self, obs: dict, guide=None) -> np.ndarray:
        from policies.chunking import blend

        with self._busy:
            self._in_flight += 1
        try:
            start = time.perf_counter()
            if guide is not None and self._guided:
                chunk = self.base.predict_chunk(obs, guide=guide)
            else:
                chunk = self.base.predict_chunk(obs)
                chunk = chunk if guide is None else blend(chunk, guide)
            time.sleep(max(0.0, self.latency_s - (time.perf_counter() - start)))
            return chunk
        finally:
            with self._busy:
                self._in_flight -= 1
                self._busy.notify_all()

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        with self._busy:
            self._busy.wait_for(lambda: self._in_flight == 0, timeout_s)


class Wave:
    """The synthetic policy: for the observation of episode step t, the actions of steps t, t+1, ...: a sine of
    period `PERIOD` steps on each arm dimension (phase-shifted), the gripper open, and each chunk offset by ±0.2 in
    turn. Its own largest step within a chunk is 0.5·2π/20 ≈ 0.16; async's boundary jump adds the offsets' 0.4."""

    PERIOD, AMPLITUDE, OFFSET = 20, 0.5, 0.2

    def __init__(self, action_dim: int, chunk_size: int = CHUNK) -> None:
        self.action_dim, self.chunk_size, self.calls = action_dim, chunk_size, 0

    def reset(self) -> None:
        pass

    def predict_chunk(self, obs: dict) -> np.ndarray:
        steps = obs["step"] + np.arange(self.chunk_size)[:, None]
        phase = 2 * np.pi * steps / self.PERIOD + np.arange(self.action_dim)[None, :]
        chunk = self.AMPLITUDE * np.sin(phase) + (self.OFFSET if self.calls % 2 == 0 else -self.OFFSET)
        chunk[:, -1] = -1.0  # the gripper stays open
        self.calls += 1
        return chunk.astype(np.float32)


def pick_env(max_steps: int | None = None):
    from robo_rl.config import load_config, make_env

    return make_env(load_config(["experiment=rlpd", *([f"env.max_episode_steps={max_steps}"] if max_steps else [])]))


def flow_config(work: Path, quick: bool, chunk: int, execute: int, *task: str):
    """The config `robo-rl bc policy=flow` trains with on `task`'s overrides (the pick task when none) from the
    scripted expert's 30 demonstrations (cached under .cache/). Quick: 150 epochs without the 6,000-update floor (a
    weaker policy, seconds; the timing does not need a good one)."""
    from robo_rl.config import load_config

    short = ["bc.flow_updates=0", "bc.epochs=150"] if quick else []
    return load_config(
        [
            "experiment=rlpd",
            *task,
            "policy=flow",
            f"policy.chunk_size={chunk}",
            f"policy.execute_steps={execute}",
            "demos.num_episodes=30",
            f"cache_dir={ROOT / '.cache' / 'robo_rl'}",
            f"outputs_dir={work}",
            "torch_threads=1",
            "bc.eval_episodes=0",
            "bc.patience=1000",
            "logger.progress=false",
            *short,
        ]
    )


def train_flow(work: Path, quick: bool) -> str:
    """The pick task's flow policy (`flow_config`), trained; the checkpoint's path."""
    from robo_rl.offline.bc import train_bc

    cfg = flow_config(work, quick, CHUNK, EXECUTE)
    return str(train_bc(cfg, work / "flow", progress=False)["checkpoint"])


def flow_base(checkpoint: str, env):
    from policies.bc import read_bc_checkpoint
    from policies.flow import load_generative_base

    return load_generative_base(read_bc_checkpoint(checkpoint), env.observation_space, env.action_space.shape[0])


def expert_base(env):
    import torch

    from policies.flow import ChunkGenerator, GenerativeBase

    torch.manual_seed(0)
    state_dim, action_dim = env.observation_space["state"].shape[0], env.action_space.shape[0]
    model = ChunkGenerator(state_dim, action_dim, EXPERT_CHUNK, steps=10, hidden=EXPERT_HIDDEN)
    return GenerativeBase(model, "cpu", EXPERT_EXECUTE, None)


def episode(env, policy, paced: Paced, seed: int) -> dict:
    """One episode in real time; the step starts, executed actions and the chunk each came from, and its success."""
    period = 1.0 / env.control_hz
    if hasattr(paced.base, "reseed"):  # each mode draws the same noises from the episode's seed
        paced.base.reseed(seed)
    obs, _ = env.reset(seed=seed)
    policy.reset()
    action = policy.act({**obs, "step": 0})  # the first chunk: the arm stands at its reset pose until it comes
    starts, actions, chunk_ids, t = [], [], [], 0
    next_tick = time.monotonic()
    while True:
        starts.append(time.monotonic())
        if t:
            action = policy.act({**obs, "step": t})
        actions.append(np.asarray(action, np.float32))
        chunk_ids.append(policy.executor.chunk_id)
        obs, _, terminated, truncated, info = env.step(action)
        t += 1
        if terminated or truncated:
            break
        next_tick += period  # the actor's pacing: sleep to the next tick, none when behind
        time.sleep(max(0.0, next_tick - time.monotonic()))
    paced.wait_idle()
    return {"starts": starts, "actions": actions, "chunks": chunk_ids, "success": bool(info.get("success"))}


def steps_within_and_across(runs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """|Δaction| [n, A] between consecutive executed actions of one chunk, and at each chunk boundary."""
    within, across = [], []
    for run in runs:
        a, c = np.asarray(run["actions"]), np.asarray(run["chunks"])
        if len(a) < 2:
            continue
        delta, same = np.abs(np.diff(a, axis=0)), c[1:] == c[:-1]
        within.append(delta[same])
        across.append(delta[~same])
    dim = runs[0]["actions"][0].shape[0]
    return tuple(np.concatenate(x) if x else np.zeros((0, dim)) for x in (within, across))


def largest(deltas: np.ndarray, dims=slice(None)) -> dict:
    if not len(deltas):
        return {"max": 0.0, "p95": 0.0, "n": 0}
    per_step = deltas[:, dims].max(axis=1)
    return {"max": float(per_step.max()), "p95": float(np.percentile(per_step, 95)), "n": int(len(per_step))}


def summarise(runs: list[dict], executor, period_s: float, success: bool) -> dict:
    from robo_rl.eval.wilson import wilson_interval

    jitter = np.concatenate([np.abs(np.diff(r["starts"]) - period_s) for r in runs]) * 1e3
    within, across = steps_within_and_across(runs)
    stats = executor.stats()
    out = {
        "episodes": len(runs),
        "steps": int(sum(len(r["actions"]) for r in runs)),
        "jitter_ms": {q: float(np.percentile(jitter, p)) for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
        "periods_over_5ms": round(float(np.mean(jitter > JITTER_TARGET_MS)), 4),
        "waits": executor.waits,
        "wait_s": round(executor.wait_s, 3),
        "wait_periods_per_wait": round(executor.wait_s / executor.waits / period_s, 2) if executor.waits else 0.0,
        "start_waits": executor.start_waits,
        "switches": executor.switches,
        "delay_steps": executor.delay,
        "skipped": executor.skipped,
        "inference_ms": {"p50": stats.get("chunk_inference_ms_p50"), "p99": stats.get("chunk_inference_ms_p99")},
        # inferences that outlasted the delay the executor plans with now: async/rtc can wait only on these
        "inferences_over_delay": int(np.sum(np.asarray(executor.inference_ms) > executor.delay * period_s * 1e3)),
        "boundary_jump": largest(across),
        "within_chunk_step": largest(within),
        "boundary_jump_arm": largest(across, ARM),
        "within_chunk_step_arm": largest(within, ARM),
        "executor_jump_max": executor.max_jump,
    }
    if success:
        k = sum(r["success"] for r in runs)
        out["success"] = {"k": k, "n": len(runs), "rate": k / len(runs), "ci95": list(wilson_interval(k, len(runs)))}
    return out


def measure(base, env, execute_steps: int, latency_s: float, modes, episodes: int, success: bool, reference) -> dict:
    """Each mode's figures, and the reference's (`reference`, a base run under sync with no added latency: the floor
    this loop has on this machine now, and for a real policy the success it has when nothing waits): `episodes`
    episodes each, all taking turns on the same seeds."""
    from policies.base import ChunkedBase

    paced = Paced(base, latency_s)
    policies = {"reference": ChunkedBase(Paced(reference), execute_steps)}
    for mode in modes:
        policies[mode] = ChunkedBase(paced, execute_steps)
        policies[mode].use_chunking(mode, None, 1.0 / env.control_hz)  # the delay measured: the actor's default
    runs = {name: [] for name in policies}
    try:
        for i in range(episodes):
            for name, policy in policies.items():
                runs[name].append(episode(env, policy, policy.base, SEED + i))
    finally:
        for policy in policies.values():
            policy.executor.close()
    period = 1.0 / env.control_hz
    return {name: summarise(runs[name], policies[name].executor, period, success) for name in policies}


def staleness(base, env, episodes: int) -> dict:
    """Success with each chunk's actions run d steps after their observation, unpaced: the executor's fixed delay (a
    simulated robot with that delay; the inference itself takes ~1 ms). What the policy, trained with no delay, loses
    to stale actions alone, apart from any timing."""
    from policies.base import ChunkedBase
    from robo_rl.eval.wilson import wilson_interval

    out = {}
    for mode, delay in (("sync", None), ("async", 1), ("async", 4), ("rtc", 1), ("rtc", 4)):
        policy, k = ChunkedBase(base, EXECUTE), 0
        policy.use_chunking(mode, delay, None)
        for i in range(episodes):
            base.reseed(SEED + i)
            (obs, _), done = env.reset(seed=SEED + i), False
            policy.reset()
            while not done:
                obs, _, terminated, truncated, info = env.step(policy.act(obs))
                done = terminated or truncated
            k += bool(info.get("success"))
        policy.executor.close()
        name = mode if delay is None else f"{mode}_d{delay}"
        out[name] = {"k": k, "n": episodes, "rate": k / episodes, "ci95": list(wilson_interval(k, episodes))}
    return out


def verdicts(figures: dict) -> dict:
    """The issue's targets against one policy's figures."""
    out = {}
    sync = figures.get("sync", {})
    for mode in ("async", "rtc"):
        f = figures.get(mode)
        if f:
            out[f"{mode}_jitter_p99_le_5ms"] = f["jitter_ms"]["p99"] <= JITTER_TARGET_MS
            out[f"{mode}_no_waits"] = f["waits"] == 0
            if "success" in f and "success" in sync:
                out[f"{mode}_success_not_below_sync"] = f["success"]["rate"] >= sync["success"]["rate"]
    if sync:
        out["sync_waits_periods_per_chunk"] = sync["wait_periods_per_wait"]
    if "reference" in figures:  # the loop's own floor on this machine at this load
        out["reference_jitter_p99_ms"] = figures["reference"]["jitter_ms"]["p99"]
    if "rtc" in figures:
        rtc = figures["rtc"]
        out["rtc_jump_le_within_chunk_step"] = rtc["boundary_jump"]["max"] <= rtc["within_chunk_step"]["max"]
        out["rtc_arm_jump_le_within_chunk_step"] = (
            rtc["boundary_jump_arm"]["max"] <= rtc["within_chunk_step_arm"]["max"]
        )
    return out


def table(name: str, figures: dict) -> None:
    print(f"\n{name}  (jumps: the arm's largest |Δaction| at a boundary / within a chunk, max and p95)")
    print("mode        jitter p50/p99 ms  waits (s)    chunks  d  inference p50/p99 ms  jump/within max  p95   success")
    for mode, f in figures.items():
        j, inf, s = f["jitter_ms"], f["inference_ms"], f.get("success")
        won = f"{s['k']}/{s['n']} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]" if s else "n/a"
        b, w = f["boundary_jump_arm"], f["within_chunk_step_arm"]
        print(
            f"{mode:11s} {j['p50']:7.2f} / {j['p99']:7.2f}  {f['waits']:4d} ({f['wait_s']:5.1f})  {f['switches']:5d} "
            f"{f['delay_steps']:2d}  {inf['p50'] or 0:8.1f} / {inf['p99'] or 0:8.1f}  {b['max']:.2f}/{w['max']:.2f}"
            f"  {b['p95']:.2f}/{w['p95']:.2f}  {won}",
            flush=True,
        )


def run_synthetic(modes=MODES, episodes: int = 2, max_steps: int | None = None, latency_s: float = LATENCY_S) -> dict:
    """The synthetic 300 ms policy on the pick env: the figures per mode (what tests/test_bench_realtime.py runs)."""
    import torch

    torch.set_num_threads(1)
    env = pick_env(max_steps)
    try:
        wave = Wave(env.action_space.shape[0])
        return measure(wave, env, EXECUTE, latency_s, modes, episodes, False, reference=Wave(wave.action_dim))
    finally:
        env.close()


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--policies", default=None, help="comma-separated: synthetic,flow,expert")
    parser.add_argument("--episodes", type=int, default=None, help="flow's episodes per mode (default 30; quick 2)")
    parser.add_argument("--checkpoint", default=None, help="a `robo-rl bc policy=flow` checkpoint (chunk 16) to reuse")
    parser.add_argument("--out", default=None, help="where the flow policy is trained (default: a temporary folder)")
    args = parser.parse_args()
    names = (args.policies or ("synthetic,flow" if args.quick else "synthetic,flow,expert")).split(",")
    episodes = args.episodes or (2 if args.quick else 30)
    torch.set_num_threads(1)  # the actor's torch_threads: the loop keeps the other core
    started, load_start = time.time(), os.getloadavg()
    results = {}
    for name in names:
        if name == "synthetic":
            results[name] = run_synthetic(MODES, max(2, episodes // 3))
        elif name == "flow":
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(args.out or tmp)
                start = time.perf_counter()
                checkpoint = args.checkpoint or train_flow(work, args.quick)
                train_s = time.perf_counter() - start
                env = pick_env()
                try:
                    flow = flow_base(checkpoint, env)
                    results[name] = measure(flow, env, EXECUTE, LATENCY_S, MODES, episodes, True, reference=flow)
                    results[name]["staleness"] = staleness(flow, env, 10 if args.quick else 100)
                finally:
                    env.close()
            results[name]["train_s"] = round(train_s, 1) if not args.checkpoint else None
        elif name == "expert":
            env = pick_env(150)  # longer episodes: a chunk of 50 switches every 25 steps
            try:
                n, wave = max(2, episodes // 8), Wave(env.action_space.shape[0], EXPERT_CHUNK)
                results[name] = measure(expert_base(env), env, EXPERT_EXECUTE, 0.0, MODES, n, False, reference=wave)
            finally:
                env.close()
        else:
            parser.error(f"--policies: unknown policy '{name}' (synthetic, flow, expert)")
        results[name]["targets"] = verdicts(results[name])
        table(name, {m: f for m, f in results[name].items() if isinstance(f, dict) and "jitter_ms" in f})
        if "staleness" in results[name]:
            print(
                "success unpaced, actions d steps stale:",
                {m: f"{f['k']}/{f['n']}" for m, f in results[name]["staleness"].items()},
            )
    record = {
        "latency_s": LATENCY_S,
        "control_hz": 10.0,
        "chunk": {"synthetic_flow": [CHUNK, EXECUTE], "expert": [EXPERT_CHUNK, EXPERT_EXECUTE]},
        "load_avg_1_5_15_at_start": [round(x, 2) for x in load_start],
        "wall_s": round(time.time() - started, 1),
        "results": results,
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    name = "realtime" if args.quick else f"realtime_{time.strftime('%Y_%m_%d')}_{commit.strip() or 'unknown'}"
    path = write_result(name, record, args.quick, measured_code=["bench/realtime.py", "policies", "robo_rl"])
    print(f"\nwritten to {path}")
    print(json.dumps({n: r["targets"] for n, r in results.items()}))


if __name__ == "__main__":
    main()
