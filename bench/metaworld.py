"""Meta-World with language, the non-VLA baseline: one flow policy with a task embedding behaviour-cloned on several
tasks' demonstrations together, then improved per task by DSRL and by residual RL at a fixed env-step budget.

    python bench/metaworld.py --quick        # reach-v3 and button-press-v3, seed 0, 3,000 env steps per task and method
    python bench/metaworld.py --tasks reach-v3,button-press-v3,drawer-open-v3,drawer-close-v3,window-open-v3 \\
        --seeds 0 1 2 --steps 20000          # the issue's protocol (hours on 2 cores; see the result's note)
    python bench/metaworld.py --tasks ... --methods '' --episodes 20   # the bases alone: which tasks land in 20-70%
    python bench/metaworld.py --tasks <12 tasks> --rl-tasks <those in the band> --reuse   # RL on some, the base on all

`--reuse` goes on from `--out`: a seed's base, its evaluations and every RL run already finished at this `--steps`
are kept (partial.json), so the protocol's hours can be spread over several sittings. `--gather a,b,c` joins the RL
runs other `--out` folders made from this folder's bases (runs side by side need folders of their own), or that an
earlier sitting's result file recorded (`bench/results/x.json`: its folders gone with its machine; the base rebuilt
here must be the same one, which BC on the CPU reproduces exactly), runs nothing new, and writes the aggregate over
every task x seed:

    python bench/metaworld.py --tasks <5 tasks> --demos 10 --seeds 0 1 2 --steps 10000 \\
        --methods residual_ramped_mode_l2 --out outputs/mw5_flow --gather outputs/mw5_flow_s1_peg,...

Per seed: (1) per task, `--demos` episodes of Meta-World's scripted expert with action noise `--noise-std`, recorded
and cached by the project's recorder (`load_or_make_demos`, env.task=<task>; few and noisy, so the base is imperfect);
(2) one flow policy (`policy.base.model.task_embedding`: a learned vector per instruction) behaviour-cloned on all
tasks' demonstrations joined into one dataset (`train_bc`, as `robo-rl train` and `robo-rl bc` call it); (3) per task,
that base evaluated on `--episodes` fixed seeds (eval.seed on) the way BC evaluates it (its noise drawn per episode
from the episode's seed) and at zero noise (its mode, where DSRL's noise actor starts); (4) per task and method,
`robo-rl train` from that base on the task alone for `--steps` env steps (DSRL: algo.form=noise; residual: ResFiT's
residual; ReinFlow: PPO on the base's own noisy Euler steps, the base as policy.path; policy.base.task, or
policy.task, names the task's instruction for the learner's replay rows, which carry only its code), its
final checkpoint evaluated on the same seeds with deterministic actions. Success rates with Wilson 95% intervals;
aggregates over task x seed (IQM and mean with stratified bootstrap intervals, P(RL > base)) from
robo_rl/eval/aggregate.py; wall time of every stage. Env: Meta-World v3 state (39-d, goal visible), sparse success
reward, episodes of `--horizon` steps (the experts finish in 40-120).
Writes bench/results/metaworld.json (--quick: bench/results/metaworld_quick.json); the runs go to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# this file's folder first on the path would make `import metaworld` this file: the package must win
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._gather import gather_flow_results, gather_flow_runs  # noqa: E402
from bench._results import RESULTS, write_result  # noqa: E402

QUICK_TASKS = ("reach-v3", "button-press-v3")
METHODS = {
    # Meta-World's state is in metres (and holds a zero-padded second object): both read it normalised by the
    # base's statistics, as the robosuite experiments do (the first quick run did not: no gain, residual lost reach)
    # a 0/1 success reward: the soft value's entropy bonus swamped it (reach 0.45 -> 0.28; 0.52 without the backup)
    "dsrl": ["experiment=dsrl_pick_cube", "algo.form=noise", "policy.state_norm=base", "algo.backup_entropy=false"],
    "residual": ["experiment=residual_pick_cube", "policy.state_norm=base"],
    # PPO over the base's own noisy Euler steps (its checkpoint is the policy fine-tuned, its state statistics kept)
    "reinflow": ["experiment=reinflow_pick_cube"],
    # the preset moved these bases too little at 20k env steps (approximate KL 5e-5 an iteration); the best of four
    # probes on reach-v3 seed 0 (bench/results/metaworld_probes.json): a 3.3x learning rate, twice the iterations
    "reinflow_fast": ["experiment=reinflow_pick_cube", "algo.lr_policy=1e-4", "algo.rollout_env_steps=1000"],
    # the quick run's residual (bound 0.2 after 250 critic-only updates) saturated and lost reach-v3 (0.68 -> 0.00)
    "residual_ramped": [
        "experiment=residual_pick_cube",
        "policy.state_norm=base",
        "policy.scale=0.1",
        "algo.actor_start_updates=1000",
        "algo.bound_ramp_updates=3000",
    ],
}
# the same residual on the base's mode (every chunk from zero initial noise): ResFiT corrects a deterministic base, and
# these bases are mostly better at their mode than as they sample; its gain is read over the zero-noise evaluation
METHODS["residual_ramped_mode"] = [*METHODS["residual_ramped"], "policy.base.noise_scale=0"]
# with a weak pull towards the base (an L2 on the residual; 0.05 kept the flow base's residual at ~0.01 of its 0.1
# bound: no change): on the SmolVLA the unregularised one sat at its bound in every dimension and cost pick-place's
# grasps, and this one stopped at about a third of it and kept them (bench/metaworld_vla.py's residual_mode_l2)
METHODS["residual_ramped_mode_l2"] = [*METHODS["residual_ramped_mode"], "algo.residual_l2=0.01"]


# the presets whose base is the policy itself (policy.path), fine-tuned, not a frozen one beside it (policy.base)
FINE_TUNED = ("experiment=reinflow_pick_cube",)


def hydra_string(text: str) -> str:
    """`text` as a quoted hydra override value (an instruction may hold spaces, commas, quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def env_overrides(args, task: str) -> list[str]:
    """The env and demonstrations every stage shares (the same demos config: the RL runs reuse the cached demos)."""
    return [
        "env=metaworld",
        f"env.task={task}",
        f"env.max_episode_steps={args.horizon}",
        "env.reward_type=sparse",
        f"demos.num_episodes={args.demos}",
        f"demos.noise_std={args.noise_std}",
        f"cache_dir={Path(args.out) / 'cache'}",
    ]


def record_demos(args) -> tuple[dict, dict]:
    """Each task's demonstrations (recorded or read from the cache), joined into one self-describing step batch."""
    from robo_rl.config import load_config
    from robo_rl.data.datasets import join_episodes, split_episodes
    from robo_rl.data.demos import load_or_make_demos

    episodes, stats = [], {}
    for task in args.tasks:
        start = time.monotonic()
        batch, path, cached = load_or_make_demos(load_config(env_overrides(args, task)), progress=False)
        mine = split_episodes(batch)
        episodes += mine
        stats[task] = {
            "episodes": len(mine),
            "transitions": int(sum(len(e) for e in mine)),
            "mean_length": float(np.mean([len(e) for e in mine])),
            "instruction": mine[0].instruction,
            "cache": str(path),
            "cached": cached,
            "wall_s": round(time.monotonic() - start, 1),
        }
    return join_episodes(episodes), stats


def train_base(args, seed: int, batch: dict, folder: Path) -> dict:
    """The flow policy with a task embedding, behaviour-cloned on every task's demonstrations at once."""
    import torch

    from robo_rl.config import load_config
    from robo_rl.offline.bc import bc_settings, demos_dataset, train_bc

    cfg = load_config(
        [
            "experiment=dsrl_pick_cube",
            *env_overrides(args, hydra_string(",".join(args.tasks))),
            f"policy.base.model.task_embedding={args.task_embedding}",
            f"seed={seed}",
            "bc.eval_episodes=0",  # evaluated per task below
            f"bc.flow_updates={args.bc_updates}",
            "logger.progress=false",
        ]
    )
    torch.set_num_threads(1)
    data = demos_dataset(batch, bc_settings(cfg).val_fraction, seed, "per-task caches")
    start = time.monotonic()
    summary = train_bc(cfg, folder, data=data, progress=False)
    keep = ("epochs", "updates", "best_epoch", "val_loss", "episodes", "train_transitions")
    return {
        **{k: summary[k] for k in keep},
        "instructions": data.instructions,
        "checkpoint": summary["checkpoint"],
        "wall_s": round(time.monotonic() - start, 1),
    }


def figures(result: dict, wall_s: float) -> dict:
    """Success, its Wilson interval, mean length and the wall time of one evaluation."""
    keep = ("episodes", "successes", "success_rate", "success_ci95", "mean_length")
    return {**{k: result[k] for k in keep}, "wall_s": round(wall_s, 1)}


def evaluate_base(args, task: str, checkpoint: str) -> dict:
    """The base on `task` alone: sampled as BC evaluates it, and at zero noise."""
    from policies.base import NarrowedNoise
    from policies.bc import load_bc_base
    from robo_rl.config import load_config, make_env
    from robo_rl.offline.bc import evaluate_base as bc_evaluate

    cfg = load_config(env_overrides(args, task))
    env = make_env(cfg)
    out = {}
    try:
        base = load_bc_base(checkpoint, env.observation_space, env.action_space.shape[0])
        for way, acting in (("sampled", base), ("zero_noise", NarrowedNoise(base, 0.0))):
            start = time.monotonic()
            result = bc_evaluate(env, acting, args.episodes, int(cfg.eval.seed), base.execute_steps)
            out[way] = figures(result, time.monotonic() - start)
    finally:
        env.close()
    return out


def evaluate_final(run: Path, episodes: int) -> dict:
    """A run's last checkpoint on the evaluation seeds, deterministic actions (as bench/learning.py evaluates)."""
    import torch

    from robo_rl.config import load_saved_config, make_env, make_policy
    from robo_rl.eval.episodes import evaluate_policy
    from robo_rl.runs import load_checkpoint

    cfg = load_saved_config(run / "config.yaml")
    torch.set_num_threads(1)
    env = make_env(cfg)
    try:
        path = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
        payload = load_checkpoint(path)
        policy = make_policy(cfg, env)
        policy.load_state_dict(payload["algo"]["policy"])
        start = time.monotonic()
        result = evaluate_policy(env, policy.eval(), episodes, int(cfg.eval.seed))
        return {**figures(result, time.monotonic() - start), "env_steps": int(payload["counters"]["env_steps"])}
    finally:
        env.close()


def base_key(overrides: list[str]) -> str:
    """Where a method's overrides name the base: policy (ReinFlow fine-tunes it) or policy.base (a frozen one)."""
    return "policy" if set(overrides) & set(FINE_TUNED) else "policy.base"


def run_rl(
    args,
    seed: int,
    task: str,
    instruction: str,
    checkpoint: str,
    method: str,
    out: Path,
    extra: tuple = (),
    tag: str = "",
) -> dict:
    """`robo-rl train` of `method` from the base on `task` alone, then its final checkpoint's evaluation; `extra`:
    more overrides (recorded with the method's), `tag`: in the run's name (bench/metaworld_reward.py's reward=model)."""
    key = base_key(METHODS[method])
    overrides = [
        *METHODS[method],
        *env_overrides(args, task),
        f"{key}.path={checkpoint}",
        f"{key}.task={hydra_string(instruction)}",
        f"train.total_env_steps={args.steps}",
        f"train.checkpoint_every_env_steps={args.steps}",
        *extra,
    ]
    recorded = [*METHODS[method], *extra]
    return train_and_evaluate(f"{method}{tag}_{task}", overrides, seed, out, args.steps, args.episodes, recorded)


def train_and_evaluate(
    name: str, overrides: list[str], seed: int, out: Path, steps: int, episodes: int, method_overrides: list[str]
) -> dict:
    """`robo-rl train` with `overrides` (bench/learning.py's train), its wall time and its final checkpoint's
    evaluation on `episodes` fixed seeds; `method_overrides`: the method's own settings, recorded."""
    from bench.learning import train

    run = train(name, overrides, seed, out)
    wall = float((run / "bench_wall_s.txt").read_text())
    return {
        "run": str(run),
        "steps": steps,
        "overrides": method_overrides,
        "train_wall_s": wall,
        "env_steps_per_s": round(steps / wall, 2),
        "after": evaluate_final(run, episodes),
    }


def measure_seed(args, seed: int, demos: dict, batch: dict) -> dict:
    """One seed's base and RL runs; with --reuse, what an earlier (stopped) run of this seed measured is kept: its
    base checkpoint, base evaluations and finished RL runs (partial.json), so the protocol's hours can be spread."""
    folder = Path(args.out) / f"s{seed}"
    saved, partial = folder / "seed.json", folder / "partial.json"
    base_file = folder / "base" / "base.json"
    recipe = {k: getattr(args, k) for k in ("tasks", "demos", "noise_std", "horizon", "task_embedding", "bc_updates")}
    if args.reuse and base_file.exists():
        base = json.loads(base_file.read_text())
        if base.get("recipe") != recipe:
            raise SystemExit(f"--reuse: the base in {base_file} was trained with {base.get('recipe')}, not {recipe}")
    else:
        base = {**train_base(args, seed, batch, folder / "base"), "recipe": recipe}
        base_file.write_text(json.dumps(base, indent=1))
    print(f"seed {seed}: base trained in {base['wall_s']} s", flush=True)
    tasks = json.loads(partial.read_text()) if args.reuse and partial.exists() else {}
    for task in args.tasks:
        # the task's own instruction (two Meta-World tasks may share one: push-v3 and push-back-v3 in lerobot's table)
        record = tasks.get(task) or {"instruction": demos[task]["instruction"]}
        if record.get("base", {}).get("sampled", {}).get("episodes") != args.episodes:
            record["base"] = evaluate_base(args, task, base["checkpoint"])
        print(f"  {task}: base {record['base']['sampled']['success_rate']:.2f}", flush=True)
        for method in args.methods if task in args.rl_tasks else ():
            done = record.get(method, {})
            if (done.get("steps"), done.get("overrides")) != (args.steps, METHODS[method]):  # not run yet like this
                if args.gather:
                    raise SystemExit(f"--gather runs nothing: {task} s{seed} {method} at {args.steps} steps is missing")
                record[method] = run_rl(
                    args, seed, task, record["instruction"], base["checkpoint"], method, folder / "runs"
                )
            print(f"  {task}: {method} {record[method]['after']['success_rate']:.2f}", flush=True)
        tasks[task] = record
        partial.write_text(json.dumps(tasks, indent=1))  # what a stopped run had measured (--reuse goes on from it)
    record = {"seed": seed, "base_training": base, "tasks": tasks}
    saved.write_text(json.dumps(record, indent=1))
    return record


def summary(args, seeds: list[dict]) -> dict:
    """Per task the seeds' figures and gains (points); across task x seed the aggregates with intervals."""
    from robo_rl.eval.aggregate import REPORT_REPS, aggregate, aggregate_gain, probability_of_improvement

    def matrix(pick) -> list[list[float]]:  # runs (seeds) x the tasks RL ran on
        return [[pick(s["tasks"][t]) for t in args.rl_tasks] for s in seeds]

    scores = {
        "base": matrix(lambda r: r["base"]["sampled"]["success_rate"]),
        "base_zero_noise": matrix(lambda r: r["base"]["zero_noise"]["success_rate"]),
    }
    for method in args.methods:
        scores[method] = matrix(lambda r, m=method: r[m]["after"]["success_rate"])
    reps = 200 if args.quick else REPORT_REPS
    agg = {name: {k: asdict(v) for k, v in stats.items()} for name, stats in aggregate(scores, reps).items()}
    per_task = {}
    for i, task in enumerate(args.rl_tasks):
        per_task[task] = {name: [run[i] for run in m] for name, m in scores.items()}
        per_task[task]["gain_points"] = {
            m: [round(100 * (a - b), 1) for a, b in zip(per_task[task][m], per_task[task]["base"], strict=True)]
            for m in args.methods
        }
    gains = {m: np.subtract(scores[m], scores["base"]).ravel() for m in args.methods}
    bases = {t: [s["tasks"][t]["base"]["sampled"]["success_rate"] for s in seeds] for t in args.tasks}
    return {
        "base_per_task_all": bases,
        "per_task": per_task,
        "aggregate": agg,
        "mean_gain_points": {m: round(100 * float(g.mean()), 1) for m, g in gains.items()},
        # the gain paired per task x seed (IQM and mean, stratified bootstrap): over the base as it samples, and over
        # its mode (zero noise, where DSRL's noise actor starts: what RL adds beyond taking the mode)
        "gain": {
            m: {
                over: {k: asdict(v) for k, v in aggregate_gain(scores[m], scores[base], reps).items()}
                for over, base in (("over_base", "base"), ("over_zero_noise", "base_zero_noise"))
            }
            for m in args.methods
        },
        "tasks_below_base": {m: int((g < 0).sum()) for m, g in gains.items()},
        "p_improvement_over_base": {
            m: asdict(probability_of_improvement(scores[m], scores["base"], reps)) for m in args.methods
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK_TASKS)}; seed 0; 3,000 env steps")
    parser.add_argument("--tasks", default=None, help="comma-separated Meta-World tasks")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (--quick: 0)")
    parser.add_argument("--steps", type=int, default=None, help="RL env steps per task and method (20000; quick 3000)")
    parser.add_argument("--demos", type=int, default=5, help="demonstrations per task (few: an imperfect base)")
    parser.add_argument("--noise-std", type=float, default=0.3, help="the expert's action noise in the demos")
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes per task (fixed seeds)")
    parser.add_argument("--horizon", type=int, default=150, help="env.max_episode_steps")
    parser.add_argument("--task-embedding", type=int, default=32, help="width of the instruction's vector")
    parser.add_argument("--bc-updates", type=int, default=3000, help="the base's BC gradient steps at least")
    parser.add_argument(
        "--rl-tasks", default=None, help="the tasks RL runs on (default: all --tasks; the base is trained on all)"
    )
    parser.add_argument("--name", default=None, help="the result file's name (default metaworld / metaworld_quick)")
    parser.add_argument("--methods", default="dsrl,residual", help=f"RL methods from the base: {', '.join(METHODS)}")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "bench_metaworld"))
    parser.add_argument(
        "--reuse", action="store_true", help="go on from --out: each seed's base, base evaluations and finished runs"
    )
    parser.add_argument(
        "--gather",
        default=None,
        help="comma-separated --out folders or this bench's result files whose runs join --out's (implies --reuse)",
    )
    args = parser.parse_args()
    args.gather = [Path(f) for f in args.gather.split(",") if f] if args.gather else []
    args.reuse = args.reuse or bool(args.gather)
    args.tasks = args.tasks.split(",") if args.tasks else list(QUICK_TASKS)
    args.rl_tasks = args.rl_tasks.split(",") if args.rl_tasks else list(args.tasks)
    if set(args.rl_tasks) - set(args.tasks):
        raise SystemExit(f"--rl-tasks: {sorted(set(args.rl_tasks) - set(args.tasks))} are not among --tasks")
    args.seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    args.steps = args.steps or (3000 if args.quick else 20000)
    args.methods = [m for m in args.methods.split(",") if m]
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        raise SystemExit(f"--methods: {sorted(unknown)} unknown; choose from {sorted(METHODS)}")
    start = time.monotonic()
    for folder in args.gather:
        gather = gather_flow_results if folder.suffix == ".json" else gather_flow_runs
        added = gather(Path(args.out), folder, args.seeds, args.methods)
        print(f"gathered from {folder}: {', '.join(added) or 'nothing'}", flush=True)
    batch, demos = record_demos(args)
    seeds = [measure_seed(args, seed, demos, batch) for seed in args.seeds]
    settings = {
        k: getattr(args, k)
        for k in (
            "tasks",
            "rl_tasks",
            "seeds",
            "steps",
            "demos",
            "noise_std",
            "episodes",
            "horizon",
            "task_embedding",
            "bc_updates",
            "methods",
        )
    }
    result = {
        **settings,
        "demonstrations": demos,
        **summary(args, seeds),
        "wall_s": round(time.monotonic() - start),
        "seeds_detail": seeds,
    }
    name = args.name or ("metaworld_quick" if args.quick else "metaworld")
    path = write_result(name, result, quick=args.quick, folder=RESULTS)
    print(json.dumps({k: result[k] for k in ("mean_gain_points", "tasks_below_base", "wall_s")}))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
