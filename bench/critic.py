"""Learned rewards (issue 15): how good the reward models are before a robot-hour is spent on them, what scoring
costs the actor, and (with --train) what RL learns from them instead of the simulator's reward.

Data: our pick task from its two 64x64 cameras (front, wrist): the scripted expert's successful episodes (each held
up to 10 steps past its first success, so a success shows in more than one frame) and failed episodes of an
untrained policy (stochastic), for training; fresh ones of each (other seeds) held out.

  quality   the success classifier: held-out frame AUROC, false positives per frame and per episode at its
            threshold; the progress critic: value-order correlation on held-out successes, on them reversed, the
            final progress under a wrong instruction against the right one, stalled clips
  latency   one frame scored locally (each model) and through `robo-rl critic serve` (a separate process), p50/p99
  jitter    the pick env's 10 Hz loop with the learned reward on the actor (the critic scoring on its thread)
            against the same loop without it
  --train   RL on the same task with each learned reward against the simulator's reward, same budget and seeds
            (`bench/learning.py learned_classifier_pick`, `learned_progress_pick`, `gt_pick_pixels`): success judged
            by the simulator, never by the critic; wanted ≥ 0.9 × the ground truth's

    python bench/critic.py            # 40 + 40 episodes, full training: minutes
    python bench/critic.py --quick    # 6 + 6 episodes, a short training: within 60 s
    python bench/critic.py --task gym_hil   # the same on gym-hil's PandaPickCube (another scene, same code)
    python bench/critic.py --models classifier --expert-failures 40   # + the expert's own failed attempts
    python bench/critic.py --train --seeds 0 1 2   # then the RL runs (hours on 2 CPU cores)

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402

TASKS = {  # the same critic code on two scenes
    "pick": ["experiment=pick_cube_pixels"],
    "gym_hil": ["experiment=rlpd", "env=gym_hil_pick", "env.image_obs=true", "env.image_size=64"],
}
MODELS = ROOT / "outputs" / "bench_critic"  # the trained models (not committed); the RL runs read them from here
CAMERAS = ("front", "wrist")


HOLD_STEPS = 10  # an expert success goes on this many steps past its first success frame (the env does not end it)


def collect(
    n_success: int,
    n_failed: int,
    seed: int,
    overrides: list[str],
    hold: int = HOLD_STEPS,
    n_expert_failed: int = 0,
    failure_noise: float = 0.3,
):
    """Expert successes (each held `hold` steps past its first success where the env allows), untrained-policy
    failures and `n_expert_failed` failed attempts of the scripted expert with more action noise (`failure_noise`:
    grasps off centre, drops, cubes knocked away: failures that come near a success), as Episodes."""
    import torch

    from robo_rl.config import load_config, make_env, make_expert, make_policy
    from robo_rl.data.datasets import Episode
    from robo_rl.data.demos import rollout_episode
    from robo_rl.data.schema import fields_for_env, stack_records
    from robo_rl.policy_io import policy_step
    from robo_rl.rewards.relabel import instruction_of

    torch.manual_seed(seed)
    cfg = load_config([*overrides, f"seed={seed}"])
    if hold and "terminate_on_success" in cfg.env:
        cfg.env.terminate_on_success = False  # the episode goes on past the success: `rollout_episode` ends it
    env = make_env(cfg)
    fields = fields_for_env(env)
    expert = make_expert(cfg, env, noise_std=0.1, seed=seed)
    clumsy = make_expert(cfg, env, noise_std=failure_noise, seed=seed + 1)
    policy = make_policy(cfg, env).eval()
    untrained = lambda o: policy_step(policy, o, deterministic=False)[0]  # noqa: E731
    episodes, attempt = [], 0
    for want, who, success_wanted in (
        (n_success, expert, True),
        (n_failed, None, False),
        (n_expert_failed, clumsy, False),
    ):
        got, tries = 0, 0
        while got < want and tries < 10 * want:
            if who is not None:
                who.reset()
            act = untrained if who is None else who.act
            records, success = rollout_episode(env, act, seed * 1000 + attempt, attempt, hold_success=hold)
            attempt, tries = attempt + 1, tries + 1
            if success == success_wanted:
                episodes.append(Episode(stack_records(records, fields), "demos" if success else "online"))
                got += 1
    env.close()
    return episodes, instruction_of(cfg)


def _pct(values, q) -> float:
    return round(float(np.percentile(values, q)), 3) if len(values) else float("nan")


def latency(model, frames: dict, n: int) -> dict:
    from robo_rl.rewards.base import Task

    times = []
    for i in range(n):
        one = {c: f[i % len(f)][None] for c, f in frames.items()}
        start = time.perf_counter()
        model.score(one, Task(model.instructions[0] if model.instructions else ""))
        times.append((time.perf_counter() - start) * 1e3)
    return {"ms_p50": _pct(times, 50), "ms_p99": _pct(times, 99), "frames": n}


def remote_latency(model_dir: Path, frames: dict, n: int) -> dict:

    from robo_rl.rewards.remote import RemoteRewardModel
    from robo_rl.transport.link import free_ports

    port = free_ports(1)[0]
    cmd = [sys.executable, "-m", "robo_rl.cli", "critic", "serve", f"model={model_dir}", f"port={port}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                remote = RemoteRewardModel(f"tcp://127.0.0.1:{port}", timeout_s=2.0)
                break
            except Exception:  # noqa: BLE001 - still starting (a torch import)
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
        try:
            return latency(remote, frames, n)
        finally:
            remote.close()
    finally:
        proc.terminate()
        proc.wait(10)


def loop_jitter(model_dir: Path | None, seconds: float, overrides: list[str]) -> dict:
    """The pick env at 10 Hz in real time, random actions, with the learned reward wrapper (async) or without."""
    from robo_rl.config import load_config, make_env
    from robo_rl.rewards.wrapper import RewardWrapper

    env = make_env(load_config(overrides))
    if model_dir is not None:
        env = RewardWrapper(env, str(model_dir))
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    period, starts = 0.1, []
    tick = time.monotonic()
    end = tick + seconds
    while time.monotonic() < end:
        starts.append(time.monotonic())
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        if terminated or truncated:
            env.reset()
        tick += period
        time.sleep(max(0.0, tick - time.monotonic()))
    stats = {}
    if model_dir is not None:
        stats = {k: v for k, v in env.stats().items() if k.startswith("reward_")}
    env.close()
    jitter = np.abs(np.diff(starts) - period) * 1e3
    return {"jitter_ms_p50": _pct(jitter, 50), "jitter_ms_p99": _pct(jitter, 99), **stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--train", action="store_true", help="then the RL runs with each reward")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--task", choices=sorted(TASKS), default="pick", help="the scene (gym_hil: gym-hil's)")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=["classifier", "progress"],
        default=["classifier", "progress"],
        help="which models to train, save and measure (the others' saved folders are left as they are)",
    )
    parser.add_argument(
        "--expert-failures",
        type=int,
        default=0,
        metavar="N",
        help="N failed attempts of the scripted expert with more action noise as further negatives "
        "(N/2 held out); the models are saved with the suffix _xf",
    )
    parser.add_argument(
        "--gate-quantile",
        type=float,
        default=0.99,
        help="the classifier's novelty gate keeps this share of held-out success frames (0: no gate)",
    )
    args = parser.parse_args()
    args.gate_quantile = args.gate_quantile or None
    import torch

    torch.set_num_threads(1)
    n, held = (6, 4) if args.quick else (40, 20)
    t0 = time.monotonic()
    overrides = TASKS[args.task]
    xf = args.expert_failures
    train_eps, instruction = collect(n, n, seed=1, overrides=overrides, n_expert_failed=xf)
    test_eps, _ = collect(held, held, seed=2, overrides=overrides, n_expert_failed=xf // 2)
    prefix, suffix = ("" if args.task == "pick" else f"{args.task}_"), ("_xf" if xf else "") + ("_quick" * args.quick)
    result: dict = {
        "task": args.task,
        "expert_failures": xf,
        "episodes": {"train": len(train_eps), "held_out": len(test_eps)},
        "collect_s": round(time.monotonic() - t0, 1),
    }

    frames = {c: test_eps[0].records[f"image/{c}"] for c in CAMERAS}
    samples = 20 if args.quick else 200
    seconds = 4.0 if args.quick else 30.0
    result["latency"], result["jitter"] = {}, {}
    if "classifier" in args.models:
        clf_dir = MODELS / f"{prefix}classifier{suffix}"
        result["classifier"], result["latency"]["classifier_local"] = classifier(
            args, train_eps, test_eps, instruction, clf_dir, frames, samples
        )
    if "progress" in args.models:
        result["progress"], critic, critic_dir = progress(
            args, train_eps, test_eps, instruction, MODELS / f"{prefix}progress{suffix}"
        )
        result["latency"].update(
            progress_local=latency(critic, frames, samples), progress_remote=remote_latency(critic_dir, frames, samples)
        )
        result["jitter"] = {
            "without": loop_jitter(None, seconds, overrides),
            "with_progress_critic": loop_jitter(critic_dir, seconds, overrides),
        }
    if args.train and not args.quick and args.task == "pick":
        for name in ("gt_pick_pixels", "learned_classifier_pick", "learned_progress_pick"):
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "learning.py"), name, "--seeds", *map(str, args.seeds)],
                check=True,
            )
    report(result)
    write_result(
        "critic" + (f"_{args.task}" if args.task != "pick" else "") + ("_xf" if xf else ""), result, args.quick
    )


def classifier(args, train_eps, test_eps, instruction, model_dir: Path, frames, samples) -> tuple[dict, dict]:
    from robo_rl.rewards.classifier_fit import evaluate_classifier, train_classifier

    t = time.monotonic()
    clf, trained = train_classifier(
        train_eps,
        CAMERAS,
        epochs=3 if args.quick else 20,
        progress=not args.quick,
        resize=[64, 64],
        channels=16,
        gate_quantile=args.gate_quantile,
    )
    clf.instructions = (instruction,)
    clf.save(model_dir)
    # its training episodes beside it, named in its report, so `robo-rl reward retrain` refits it on them plus a
    # person's marks (rewards/live.py) instead of on a run's own episodes, whose success flags the model itself set
    from robo_rl.data.datasets.io import save_store

    data = save_store(train_eps, model_dir.with_name(model_dir.name + "_data"), progress=False)
    (model_dir / "train_report.json").write_text(json.dumps({"data": str(data), **trained}, default=float, indent=1))
    quality = {
        **{k: v for k, v in evaluate_classifier(clf, test_eps).items() if isinstance(v, int | float)},
        **{k: trained.get(k) for k in ("gate", "gate_quantile", "bank_frames")},
        "train_s": round(time.monotonic() - t, 1),
    }
    return quality, latency(clf, frames, samples)


def progress(args, train_eps, test_eps, instruction, model_dir: Path) -> tuple[dict, object, Path]:
    from robo_rl.rewards.progress import evaluate_progress, train_progress_critic

    t = time.monotonic()
    critic = train_progress_critic(
        train_eps,
        CAMERAS,
        [instruction] * len(train_eps),
        other_instructions=("open the drawer", "push the cube off the table"),
        steps=60 if args.quick else 3000,
        batch_size=32,
        progress=not args.quick,
        size=48,
    )
    critic_dir = critic.save(model_dir)
    quality = evaluate_progress(critic, test_eps, [instruction] * len(test_eps), "open the drawer")
    return {**quality, "train_s": round(time.monotonic() - t, 1)}, critic, critic_dir


def report(result: dict) -> None:
    lat, j = result["latency"], result["jitter"]
    if c := result.get("classifier"):
        print(
            f"classifier: held-out AUROC {c['auroc']:.3f}, episode false-success rate {c['episode_fpr']:.3f} "
            f"(threshold {c['threshold']:.2f}, novelty gate {c['gate'] and round(c['gate'], 1)}), trained in "
            f"{c['train_s']} s; one frame "
            f"{lat['classifier_local']['ms_p50']} ms (p50)"
        )
    if p := result.get("progress"):
        print(
            f"progress critic: VOC {p['voc']:.3f}, reversed {p['voc_reversed']:.3f}, final progress right "
            f"{p['final_progress_right']:.2f} vs wrong instruction {p['final_progress_wrong']:.2f}, stalled |Δ| "
            f"{p['stalled_abs_delta']:.3f}, done head AUROC {p['done_auroc']:.3f} (TPR / FPR at 0.5: "
            f"{p['done_tpr_at_0.5']:.2f} / {p['done_fpr_at_0.5']:.3f}), trained in {p['train_s']} s; one frame "
            f"{lat['progress_local']['ms_p50']} ms locally, {lat['progress_remote']['ms_p50']} ms remote (p50)"
        )
        print(
            f"10 Hz loop jitter p99: {j['without']['jitter_ms_p99']} ms without, "
            f"{j['with_progress_critic']['jitter_ms_p99']} ms with the critic on the actor"
        )
    result["load"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
