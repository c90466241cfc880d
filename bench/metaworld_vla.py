"""Meta-World with a VLA: a SmolVLA trained here by lerobot's own trainer on several tasks' camera demonstrations,
its success per task, and DSRL (noise-space SAC over the frozen VLA, what a real robot runs) from it, per task.

    python bench/metaworld_vla.py --quick      # two tasks, a tiny SmolVLA for a few steps, a short DSRL run: plumbing
    python bench/metaworld_vla.py              # five tasks, the CPU-size SmolVLA (vlm=reduced), 10k DSRL env steps
    python bench/metaworld_vla.py --methods '' # the SmolVLA base alone: which tasks land in the issue's 20-70% band

Stages, each kept in `--out` and reused by `--reuse` (a stopped run goes on; outputs do not outlive the machine):
(1) per task, `--demos` episodes of Meta-World's scripted expert with action noise `--noise-std` and the fast-render
`corner2` camera at `--image-size` px, recorded and cached by the project's recorder; joined and exported as one
LeRobot dataset, each episode with its task's instruction (`task` in LeRobot's tables); (2) `robo-rl vla train`'s own
code: lerobot-train on that dataset, SmolVLA on a random-init SmolVLM of `--vlm`'s size (reduced: hidden 256, 4 text
and 3 vision layers, 64 px), chunks of `--chunk` actions, `max_action_dim` the env's 4 (DSRL's noise is then chunk x
4, not chunk x 32); (3) per task, that SmolVLA loaded back by path (`LeRobotBase`, its processors and its tokenizer,
the env's instruction) and evaluated on `--episodes` fixed seeds (torch's generator seeded once before each task),
as it samples and from zero initial noise (its mode, where DSRL's noise actor starts);
(4) per task and method, `robo-rl train` from it on the task alone for `--rl-steps` env steps (DSRL: algo.form=noise
over the frozen VLA, policy.base.kind=lerobot, the entropy bonus kept out of its TD target as bench/metaworld.py's;
residual: a bounded, ramped correction on its actions; ReinFlow: PPO on its action expert, policy.path=), its final
checkpoint evaluated on the same seeds with deterministic actions. Success with Wilson 95% intervals, the gain in
points per task, the wall time of every stage, the VLA's peak memory and acting time per chunk.

Env: Meta-World v3 (39-d state, goal visible; positions drawn per episode from Meta-World's seeded generator),
sparse success reward, `--horizon`-step episodes. Writes bench/results/<--name> (default metaworld_vla, --quick
metaworld_vla_quick) after every stage, `partial: true` until the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
os.environ.setdefault("MUJOCO_GL", "egl")

import bench.metaworld as mw  # noqa: E402
from bench._gather import gather_vla_results, gather_vla_runs  # noqa: E402
from bench._results import RESULTS, write_result  # noqa: E402
from bench.metaworld import figures, hydra_string, train_and_evaluate  # noqa: E402
from bench.methods import on_policy_rollouts  # noqa: E402

TASKS = ("reach-v3", "pick-place-v3", "peg-insert-side-v3", "push-back-v3", "shelf-place-v3")
QUICK_TASKS = ("reach-v3", "button-press-v3")
CAMERA = "corner2"
# bench/metaworld.py's recipes: DSRL without the entropy bonus in its TD target, the bounded and ramped residual on
# the VLA's actions, ReinFlow's PPO on its action expert (the VLM frozen; the VLA is the policy itself). DSRL's noise
# actor and the residual's actor, and their critics, read the 39-d state only (policy.encoder.cameras=[]): the VLA
# reads the camera. With the camera too (dsrl_pixels) the pixel learner on one core held the run to ~2 env steps/s.
STATE_ONLY = ["policy.encoder.cameras=[]"]
METHODS = {
    "dsrl": mw.METHODS["dsrl"] + STATE_ONLY,
    "residual": mw.METHODS["residual_ramped"] + STATE_ONLY,
    "reinflow": mw.METHODS["reinflow"],
    # the same residual on the VLA's mode (every chunk from zero initial noise), as ResFiT corrects a deterministic
    # base: its gain is read over base_zero_noise, RL beyond what taking the mode gives
    "residual_mode": mw.METHODS["residual_ramped_mode"] + STATE_ONLY,
    "dsrl_pixels": mw.METHODS["dsrl"],
    # DSRL whose noise actor may leave the box's uniform early: its temperature from 0.01 towards an entropy of -0.5
    # a noise dimension (10 x 4 of them). With the preset's (0.1, target 0) the actor kept ~27 nats for 20k env steps
    # on shelf-place, the entropy term's pull of a tanh-Gaussian's mean towards zero outweighed the critic's
    # differences between noises, and its mean (what evaluation acts on) stayed near zero: the VLA's mode
    "dsrl_sharp": [*mw.METHODS["dsrl"], "algo.init_temperature=0.01", "algo.target_entropy=-20", *STATE_ONLY],
    # PA-RL over the frozen SmolVLA: 16 of its chunks per decision, the chunk critic's best run (no distillation into
    # a LeRobot policy); the TD target ranks the 8 chunks the actor recorded at the next decision, so the learner
    # never runs the VLA (it would sample 8 x 256 chunks an update), but once per time-limit end
    "parl": [
        "experiment=parl_pick_cube",
        "policy.state_norm=base",
        "algo.distill_every=0",
        "policy.record_candidates=8",
        "algo.target_from=recorded",
        "algo.target_q_clip=[0,1]",
        *STATE_ONLY,
    ],
}
# the residual on the mode with a weak pull towards the base: bench/metaworld.py's recipe, on the state
METHODS["residual_mode_l2"] = mw.METHODS["residual_ramped_mode_l2"] + STATE_ONLY
# the same with the VLA's chunks drawn from initial noise of std 0.5, nearer its mode (0.44 -> 0.76 on pick-place at
# zero noise): the VLA sampled that way, unranked, is evaluated beside it (`base_noise_0.5`)
NARROW = 0.5
METHODS["parl_narrow"] = [*METHODS["parl"], f"policy.noise_scale={NARROW}"]


def env_overrides(args, task: str) -> list[str]:
    """The env and demonstrations every stage shares (the RL runs reuse the cached demonstrations)."""
    return [
        "env=metaworld",
        f"env.task={task}",
        f"env.cameras=[{CAMERA}]",
        f"env.image_size={args.image_size}",
        f"env.max_episode_steps={args.horizon}",
        "env.reward_type=sparse",
        f"demos.num_episodes={args.demos}",
        f"demos.noise_std={args.noise_std}",
        f"cache_dir={Path(args.out) / 'cache'}",
    ]


def record_and_export(args) -> dict:
    """Each task's camera demonstrations (recorded or cached), exported together as one LeRobot dataset."""
    from robo_rl.config import load_config
    from robo_rl.data.datasets import split_episodes
    from robo_rl.data.datasets.lerobot_v3 import export_lerobot
    from robo_rl.data.demos import load_or_make_demos

    episodes, stats = [], {}
    for task in args.tasks:
        start = time.monotonic()
        batch, _, cached = load_or_make_demos(load_config(env_overrides(args, task)), progress=False)
        mine = split_episodes(batch, partition="demos")
        episodes += mine
        stats[task] = {
            "episodes": len(mine),
            "frames": int(sum(len(e) for e in mine)),
            "instruction": mine[0].instruction,
            "cached": cached,
            "wall_s": round(time.monotonic() - start, 1),
        }
        print(f"demos {task}: {stats[task]}", flush=True)
    dataset = Path(args.out) / "dataset"
    if not (args.reuse and (dataset / "meta" / "info.json").is_file()):
        start = time.monotonic()
        export_lerobot(episodes, dataset, fps=10, progress=False)
        stats["export_wall_s"] = round(time.monotonic() - start, 1)
    return stats


def train_vla(args, dataset: Path) -> dict:
    """`robo-rl vla train`'s code on the exported dataset; the run's vla_train.json (time, peak memory)."""
    from robo_rl.offline.smolvla_train import LAST_MODEL, SUMMARY, train_smolvla

    out = Path(args.out) / "vla"
    if not (args.reuse and (out / LAST_MODEL / "model.safetensors").is_file()):
        lerobot = [f"--policy.chunk_size={args.chunk}", f"--policy.n_action_steps={args.chunk}"]
        lerobot += ["--policy.max_action_dim=4", f"--log_freq={max(1, min(100, args.vla_steps // 20))}"]
        train_smolvla(
            dataset, out, vlm=args.vlm, steps=args.vla_steps, batch_size=args.batch_size, seed=1000,
            workers=1, threads=args.threads, extra=lerobot,
        )  # fmt: skip
    summary = json.loads((out / SUMMARY).read_text())
    keep = ("vlm", "steps", "batch_size", "threads", "wall_s", "peak_rss_gb", "pretrained_model")
    return {k: summary[k] for k in keep} | {"s_per_step": round(summary["wall_s"] / summary["steps"], 3)}


def evaluate_vla(args, task: str, model: str, noise_scale: float | None = None) -> dict:
    """The SmolVLA on `task` alone, loaded back by path with the env's instruction; its acting time per chunk.
    `noise_scale`: its initial noise drawn with that std (from eval.seed) instead of its own sampler's. At 0 its flow
    runs from zero initial noise (its mode), where DSRL's noise actor starts (its mean is zero at first, and the final
    evaluation acts on its mean): the part of a DSRL gain that taking the mode alone would give."""
    import torch

    from policies.base import NarrowedNoise
    from policies.lerobot_base import LeRobotBase
    from robo_rl.config import load_config, make_env
    from robo_rl.offline.bc import evaluate_base

    cfg = load_config(env_overrides(args, task))
    env = make_env(cfg)
    try:
        obs, _ = env.reset(seed=int(cfg.eval.seed))
        base = LeRobotBase.load(model, env.observation_space, env.action_space.shape[0], task=obs["instruction"])
        torch.manual_seed(int(cfg.eval.seed))  # the flow's own noise: the same file scores the same on these seeds
        start = time.monotonic()
        rng = np.random.default_rng(int(cfg.eval.seed))
        acting = base if noise_scale is None else NarrowedNoise(base, noise_scale, rng)
        result = evaluate_base(env, acting, args.episodes, int(cfg.eval.seed), base.chunk_size)
        out = figures(result, time.monotonic() - start)
        ms = []
        for _ in range(12):  # the first two warm up
            t = time.perf_counter()
            base.predict_chunk(obs)
            ms.append(1000 * (time.perf_counter() - t))
        return out | {"chunk_ms_p50": round(float(np.median(ms[2:])), 1), "instruction": obs["instruction"]}
    finally:
        env.close()


def run_rl(args, task: str, instruction: str, model: str, method: str, extra: tuple = (), tag: str = "") -> dict:
    """`robo-rl train` of `method` from the SmolVLA on `task` alone, then its final checkpoint's evaluation; `extra`:
    more overrides (recorded with the method's), `tag`: in the run's name (bench/metaworld_reward.py's reward=model)."""
    key = mw.base_key(METHODS[method])
    overrides = [
        *METHODS[method],
        *env_overrides(args, task),
        *(["policy.base.kind=lerobot"] if key == "policy.base" else []),
        f"{key}.path={model}",
        f"{key}.task={hydra_string(instruction)}",
        f"train.total_env_steps={args.rl_steps}",
        f"train.checkpoint_every_env_steps={args.rl_steps}",
        *on_policy_rollouts(method, args.rl_steps),  # --quick's 300 steps: ReinFlow still gets three PPO iterations
        *extra,
    ]
    out = Path(args.out) / "runs"
    return train_and_evaluate(
        f"vla_{method}{tag}_{task}", overrides, args.seed, out, args.rl_steps, args.episodes, [*METHODS[method], *extra]
    )


def rl_records(record: dict, seed: int) -> dict:
    """A task's RL results for one seed (its `rl.s<seed>`); a stages.json written before seeds were kept has seed 0's
    methods beside the base: they move there."""
    rl = record.setdefault("rl", {})
    for method in [k for k in record if k in METHODS]:
        rl.setdefault("s0", {})[method] = record.pop(method)
    return rl.setdefault(f"s{seed}", {})


def across_seeds(per_task: dict, tasks: list[str], method: str, quick: bool) -> dict:
    """`method`'s gain over the SmolVLA across task x seed, over the seeds that ran it on every task: IQM and mean
    with stratified bootstrap intervals (robo_rl/eval/aggregate.py, rliable), and the tasks x seeds below the base."""
    from robo_rl.eval.aggregate import REPORT_REPS, aggregate, aggregate_gain

    ran = lambda s: all(method in per_task[t].get("rl", {}).get(s, {}) for t in tasks)  # noqa: E731
    seeds = sorted(filter(ran, per_task[tasks[0]].get("rl", {})), key=lambda s: int(s[1:]))
    if not seeds:
        return {}
    after = [[per_task[t]["rl"][s][method]["after"]["success_rate"] for t in tasks] for s in seeds]
    before = [[per_task[t]["base"]["success_rate"] for t in tasks] for _ in seeds]
    reps = 200 if quick else REPORT_REPS
    gain = aggregate_gain(after, before, reps)
    rates = {"base": before, method: after}
    out = {"seeds": seeds, "tasks": tasks, "gain_iqm": gain["iqm"].as_dict(), "gain_mean": gain["mean"].as_dict()}
    if all("base_zero_noise" in per_task[t] for t in tasks):
        # over the SmolVLA at zero noise (its mode, where DSRL starts): what RL added beyond taking the mode
        rates["base_zero_noise"] = [[per_task[t]["base_zero_noise"]["success_rate"] for t in tasks] for _ in seeds]
        over_zero = aggregate_gain(after, rates["base_zero_noise"], reps)
        out["gain_over_zero_noise_iqm"] = over_zero["iqm"].as_dict()
        out["gain_over_zero_noise_mean"] = over_zero["mean"].as_dict()
        out["task_seeds_below_zero_noise"] = int((np.subtract(after, rates["base_zero_noise"]) < 0).sum())
    rates = aggregate(rates, reps)
    return {
        **out,
        "success_iqm": {name: stats["iqm"].as_dict() for name, stats in rates.items()},
        "task_seeds_below_base": int((np.subtract(after, before) < 0).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two tasks, a tiny SmolVLA, short runs")
    parser.add_argument("--tasks", default=None, help=f"comma-separated Meta-World tasks (default {','.join(TASKS)})")
    parser.add_argument("--demos", type=int, default=None, help="demonstrations per task (10; quick 2)")
    parser.add_argument("--noise-std", type=float, default=0.3, help="the expert's action noise in the demos")
    parser.add_argument("--image-size", type=int, default=64, help="the corner2 camera's pixels (reduced: 64)")
    parser.add_argument("--horizon", type=int, default=150, help="env.max_episode_steps")
    parser.add_argument("--vlm", default=None, help="the SmolVLM size (reduced; quick tiny)")
    parser.add_argument("--vla-steps", type=int, default=None, help="lerobot-train steps (6000; quick 20)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch's threads in lerobot-train")
    parser.add_argument("--chunk", type=int, default=10, help="SmolVLA's chunk_size and n_action_steps")
    parser.add_argument("--episodes", type=int, default=None, help="evaluation episodes per task (50; quick 5)")
    parser.add_argument("--rl-steps", type=int, default=None, help="RL env steps per task and method (10k; quick 300)")
    parser.add_argument("--methods", default="dsrl", help=f"RL methods from the VLA: {', '.join(METHODS)}")
    parser.add_argument("--rl-tasks", default=None, help="the tasks RL runs on (default: every task)")
    parser.add_argument("--seed", type=int, default=0, help="the RL runs' seed (the VLA and its evaluation: seed 0's)")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default=str(ROOT / "outputs" / "bench_metaworld_vla"))
    parser.add_argument("--reuse", action="store_true", help="go on from --out: its dataset, VLA and finished stages")
    parser.add_argument(
        "--gather",
        default=None,
        help="comma-separated other --out folders of the same SmolVLA, or result files of earlier sittings (checked "
        "by its evaluations), whose RL runs of --methods join --out's; then nothing new runs, only the aggregate "
        "across the seeds that ran every --rl-tasks",
    )
    args = parser.parse_args()
    q = args.quick
    args.tasks = args.tasks.split(",") if args.tasks else list(QUICK_TASKS if q else TASKS)
    args.rl_tasks = args.rl_tasks.split(",") if args.rl_tasks else list(args.tasks)
    args.demos = args.demos or (2 if q else 10)
    args.vlm = args.vlm or ("tiny" if q else "reduced")
    args.vla_steps = args.vla_steps or (20 if q else 6000)
    args.episodes = args.episodes or (5 if q else 50)
    args.rl_steps = args.rl_steps or (300 if q else 10000)
    args.methods = [m for m in args.methods.split(",") if m]
    args.gather = [Path(f) for f in args.gather.split(",") if f] if args.gather else []
    if set(args.methods) - set(METHODS) or set(args.rl_tasks) - set(args.tasks):
        raise SystemExit(f"--methods from {sorted(METHODS)}; --rl-tasks among --tasks")
    name = args.name or ("metaworld_vla_quick" if q else "metaworld_vla")
    keys = ("tasks", "rl_tasks", "demos", "noise_std", "image_size", "horizon", "vlm", "vla_steps", "batch_size")
    keys += ("threads", "chunk", "episodes", "rl_steps", "methods", "seed")
    result: dict = {k: getattr(args, k) for k in keys} | {"partial": True}
    saved = Path(args.out) / "stages.json"
    stages = json.loads(saved.read_text()) if args.reuse and saved.is_file() else {}

    def keep() -> None:
        saved.write_text(json.dumps(stages, indent=1))
        write_result(name, result | stages, quick=q, folder=RESULTS)

    start = time.monotonic()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    stages["demonstrations"] = record_and_export(args)
    stages["vla_training"] = train_vla(args, Path(args.out) / "dataset")
    keep()
    print(f"SmolVLA trained: {stages['vla_training']}", flush=True)
    model = stages["vla_training"]["pretrained_model"]
    per_task = stages.setdefault("per_task", {})
    for task in args.tasks:
        record = per_task.setdefault(task, {})
        if "base" not in record:
            record["base"] = evaluate_vla(args, task, model)
            keep()
        if "base_zero_noise" not in record:
            record["base_zero_noise"] = evaluate_vla(args, task, model, noise_scale=0.0)
            keep()
        if "parl_narrow" in args.methods and task in args.rl_tasks and f"base_noise_{NARROW}" not in record:
            record[f"base_noise_{NARROW}"] = evaluate_vla(args, task, model, noise_scale=NARROW)
            keep()
        zero = record["base_zero_noise"]["success_rate"]
        rate, ci = record["base"]["success_rate"], record["base"]["success_ci95"]
        print(f"{task}: SmolVLA {rate:.2f} {ci}, from zero noise {zero:.2f}", flush=True)
    for folder in args.gather:
        if folder.suffix == ".json":
            added = gather_vla_results(per_task, folder, args.methods)
        else:
            added = gather_vla_runs(per_task, folder, args.methods, model)
        print(f"gathered from {folder}: {', '.join(added) or 'nothing'}", flush=True)
    for task in [] if args.gather else args.rl_tasks:
        record = per_task[task]
        runs = rl_records(record, args.seed)
        for method in args.methods:
            if runs.get(method, {}).get("steps") != args.rl_steps:
                runs[method] = run_rl(args, task, record["base"]["instruction"], model, method)
            after = runs[method]["after"]["success_rate"]
            runs[method]["gain_points"] = round(100 * (after - record["base"]["success_rate"]), 1)
            zero = record["base_zero_noise"]["success_rate"]
            runs[method]["gain_points_over_zero_noise"] = round(100 * (after - zero), 1)
            keep()
            print(f"{task} seed {args.seed}: {method} {after:.2f} ({runs[method]['gain_points']:+} points)", flush=True)
    if not args.methods:  # the bases alone
        result.pop("partial")
        keep()
        return
    means = stages.setdefault("mean_gain_points", {})
    if means and not all(k.startswith("s") and k[1:].isdigit() for k in means):
        stages["mean_gain_points"] = means = {"s0": means}  # written before seeds were kept: seed 0's
    seeds = {s for t in args.rl_tasks for s in per_task[t].get("rl", {})} if args.gather else {f"s{args.seed}"}
    for seed in sorted(seeds, key=lambda s: int(s[1:])):
        gains = {
            m: [per_task[t]["rl"][seed][m]["gain_points"] for t in args.rl_tasks]
            for m in args.methods
            if all(m in per_task[t].get("rl", {}).get(seed, {}) for t in args.rl_tasks)
        }
        means.setdefault(seed, {}).update({m: round(float(np.mean(g)), 1) for m, g in gains.items()})
    stages["aggregate"] = {m: across_seeds(per_task, args.rl_tasks, m, quick=q) for m in args.methods}
    stages["wall_s"] = round(time.monotonic() - start)
    result.pop("partial")
    keep()
    print(json.dumps({"base": {t: r["base"]["success_rate"] for t, r in per_task.items()}, **means}))


if __name__ == "__main__":
    main()
