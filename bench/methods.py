"""The methods that improve a policy, side by side from one flow base (issue 51): online RL (residual, DSRL, ReinFlow,
GRPO, WSRL, PA-RL) at one env-step budget, and offline iterative improvement (RECAP, STEAM: collect, label,
fine-tune) at a number of collected episodes, on the same task, seeds and evaluation episodes.

    python bench/methods.py                      # pick, seeds 0 1 2, 20k env steps, RECAP 2 x 200 episodes, 50 eval
    python bench/methods.py --quick              # one seed, 1.5k env steps, RECAP 2 x 10 episodes, 10 eval: minutes
    python bench/methods.py --methods recap dsrl --seeds 0 1 --steps 10000
    OMP_NUM_THREADS=1 python bench/methods.py --methods recap --seeds 1 --tag s1 ...   # seeds side by side, merged:
    python bench/methods.py --combine bench/results/methods_pick_s0.json bench/results/methods_pick_s1.json --tag both
    (files may hold other seeds, or the same seeds with other methods: the online ones beside a RECAP run)

For each seed the base is `robo-rl bc env=<task> policy=flow` from the task's scripted demonstrations (the same
cached demonstrations and seed for every method); each online method is its preset (`experiment=<method>_<task>`)
with that base and `train.total_env_steps` = the budget; RECAP (and STEAM, `recap.value=steam`) is `robo-rl recap
collect | label | finetune | tune`, twice, in a copy of the base's run folder: `tune` picks the guidance scale from
--guidances on 30 validation episodes each (seeds of their own, not stored; counted as validation robot time beside
the collected episodes), and the next collection and the evaluation act at it. Each final policy is evaluated on the
same held-out env seeds (eval.seed onwards): a training run's final checkpoint deterministically (`evaluate_policy`, as
`robo-rl eval` does), a flow file (the base, RECAP's policy) as `robo-rl recap collect store=false` acts, its noise
reseeded per episode. The two modes differ (a flow run deterministically succeeds more often), so each online row
whose untrained policy is the base also carries that policy evaluated its own way (`initial_policy`): compare a
row with it, and RECAP with the base row.

`dsrl_no_entropy_backup` is DSRL's preset with `algo.backup_entropy=false` (VARIANTS): its own row, so a merged table
keeps both.

Reported per method: success per seed with Wilson intervals; the IQM / mean / optimality gap over seeds with
stratified bootstrap intervals and the probability of improvement over the base (rliable, via
robo_rl/eval/aggregate.py); the robot-time cost (env steps, episodes, wall seconds) and the CPU seconds of all its
processes. Writes bench/results/methods_<task>.json (--quick: bench/results/quick/) and prints one JSON object last.

Side by side, give each run one torch thread (OMP_NUM_THREADS=1). With two threads a process on the shared 2-core VM,
pick's STEAM seed 0 took 72 min beside three Lift runs; seeds 1 and 2 side by side with one thread each took 12.

Tasks: pick (our pick-and-lift, `sim/pick_cube.py`, from state; STEAM's collections also render the 64x64 front
camera its progress critics compare) with every method; lift (robosuite Lift, low-dim; STEAM's collections in
robosuite's image mode with the same state and agentview at 64x64) with RECAP, STEAM and the methods that have a Lift
preset (residual, dsrl, reinflow, wsrl: `--task lift --methods recap residual`;
GRPO and PA-RL have none yet, and asked for they are refused in one line). Meta-World needs the SmolVLA base of issue
49: refused as an unknown task.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402
from robo_rl.commands.recap import GUIDANCES, TUNE_EPISODES  # noqa: E402
from robo_rl.eval.wilson import wilson_interval  # noqa: E402

# each online method: the setting that names the base (a frozen base, or the policy fine-tuned itself)
ONLINE = {
    "residual": "policy.base.path",
    "dsrl": "policy.base.path",
    "reinflow": "policy.path",
    "grpo": "policy.path",
    "wsrl": "policy.base.path",
    "parl": "policy.base.path",
    "dsrl_no_entropy_backup": "policy.base.path",
}
# a method that is another's preset with settings of its own: DSRL without SAC's entropy bonus in its TD target (with
# a 0/1 reward the bonus outgrows success: Q rose to 7-11 and DSRL fell below its base on every seed, 2026-12-01)
VARIANTS = {"dsrl_no_entropy_backup": ("dsrl", ["algo.backup_entropy=false"])}


def variant(method: str) -> tuple[str, list[str]]:
    """(the method whose preset it runs, its own settings): a method that is no variant is itself, with none."""
    return VARIANTS.get(method, (method, []))


# each task: its env, the scripted demonstrations and BC settings that put a flow base at 30-70% success (bc's default
# 6,000 flow updates at least make pick's base succeed almost always: nothing left to improve), and each online
# method's preset for it. Pick (2026-12-01, 100 episodes from EVAL_SEED): 17 demonstrations give 0.54, 0.66, 0.62 on
# seeds 0-2; 30 give 0.80, 0.83, 0.67, 20 give 0.66, 0.79, 0.55, 15 give 0.14 (seed 0). Lift: 10 give 0.37, 0.53,
# 0.61 on seeds 0-2; 13 give 0.71 and 20 give 0.89 (seed 0).
TASKS = {
    "pick": {
        "env": "pick_cube",
        "demos": 17,
        "bc": ["bc.flow_updates=0"],
        "presets": {m: f"{variant(m)[0]}_pick_cube" for m in ONLINE},
        # STEAM's progress critics compare frames: its collections render the front camera (the policy reads the
        # state, as the base was trained; the demonstrations have no frames, so STEAM labels its own episodes only)
        "cameras": ["env.cameras=[front]", "env.image_size=64"],
    },
    "lift": {
        "env": "robosuite_lift",
        "demos": 10,
        "bc": ["bc.flow_updates=0"],
        "presets": {
            m: f"{variant(m)[0]}_lift" for m in ("residual", "dsrl", "dsrl_no_entropy_backup", "reinflow", "wsrl")
        },
        # robosuite renders only in image mode, whose state drops the object unless its keys are named: the low-dim
        # state the base reads, and agentview at 64 px beside it for STEAM's progress critics
        "cameras": [
            "env.observation=image",
            "env.state_keys=[robot0_eef_pos,robot0_eef_quat,robot0_gripper_qpos,object]",
            "env.cameras=[agentview]",
            "env.image_size=64",
        ],
    },
}
OFFLINE = {"recap": [], "steam": ["recap.value=steam"]}
# the methods whose untrained policy acts as the base does (a zero residual, the chain itself, a critic that cannot yet
# rank): their row also evaluates it the same way as the trained one; DSRL's untrained noise actor steers already
STARTS_AT_BASE = ("residual", "wsrl", "reinflow", "grpo", "parl")
METHODS = [*ONLINE, *OFFLINE]
EVAL_SEED = 1000000  # eval.seed's default: held out from training (0...) and demonstrations (100000...)
SUCCESS = re.compile(r"success (\d+)/(\d+) = [0-9.]+ \(Wilson .*\), mean length ([0-9.]+)")


def cli(args: list[str], log: Path) -> tuple[str, float, float]:
    """Run `robo-rl <args>`; its output (also written to `log`), wall seconds and CPU seconds of it and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "robo_rl.cli", *args], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout + proc.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"$ robo-rl {' '.join(args)}\n{out}\n")
    if proc.returncode != 0:
        raise RuntimeError(f"robo-rl {' '.join(args)} failed (exit {proc.returncode}): {out[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, wall, cpu


def new_folder(out: Path, name: str, before: set[Path]) -> Path:
    (run,) = {r for r in set(out.glob("*/*")) - before if r.name.endswith(f"_{name}")}
    return run


def make_base(task: str, seed: int, out: Path) -> tuple[Path, dict]:
    """The seed's flow base: `robo-rl bc policy=flow` on the task's scripted demonstrations."""
    spec, name, before = TASKS[task], f"base_{task}_s{seed}", set(out.glob("*/*"))
    _, wall, cpu = cli(
        [
            "bc",
            f"env={spec['env']}",
            "experiment=rlpd",  # the default experiment is for policy=residual
            "policy=flow",
            f"demos.num_episodes={spec['demos']}",
            *spec.get("bc", []),
            f"seed={seed}",
            f"outputs_dir={out}",
            f"name={name}",
            "bc.eval_episodes=0",
            "logger.progress=false",
        ],
        out / "logs" / f"{name}.log",
    )
    return new_folder(out, name, before), {"wall_s": wall, "cpu_s": cpu}


def evaluate_flow(folder: Path, policy: Path, episodes: int, log: Path) -> dict:
    """A flow file (the base, RECAP's policy) on the held-out seeds, as `recap collect` acts."""
    out, _, _ = cli(
        ["recap", "collect", str(folder), f"policy={policy}", f"episodes={episodes}", f"seed={EVAL_SEED}",
         "store=false", "logger.progress=false"],
        log,
    )  # fmt: skip
    k, n, _ = SUCCESS.search(out).groups()
    return success(int(k), int(n))


def evaluate_checkpoint(run: Path, episodes: int, initial: bool = False) -> dict:
    """A training run's final checkpoint on the held-out seeds, deterministic actions (`robo-rl eval`'s way); with
    `initial`, the policy as built before any update instead (for these methods the base itself, so the gain is
    measured in one evaluation mode: a flow evaluated deterministically succeeds more often than sampled)."""
    import torch

    from robo_rl.config import load_saved_config, make_env, make_policy
    from robo_rl.eval.episodes import evaluate_policy, load_policy
    from robo_rl.runs import load_checkpoint

    cfg = load_saved_config(run / "config.yaml")
    torch.set_num_threads(1)
    env = make_env(cfg)
    try:
        if initial:  # the weights a fresh learner starts from: the base, its residual zero or its critic untrained
            payload = {"algo": {"policy": make_policy(cfg, env).state_dict()}}
        else:
            payload = load_checkpoint(sorted((run / "checkpoints").glob("step_*.pt"))[-1])
        result = evaluate_policy(env, load_policy(cfg, env, payload), episodes, EVAL_SEED, progress=False)
    finally:
        env.close()
    return success(round(result["success_rate"] * episodes), episodes)


def success(k: int, n: int) -> dict:
    return {"successes": k, "episodes": n, "rate": k / n, "ci95": list(wilson_interval(k, n))}


def on_policy_rollouts(method: str, steps: int) -> list[str]:
    """ReinFlow and GRPO update after each rollout of algo.rollout_env_steps (2,000): a budget too small for three of
    them (a --quick one) gets rollouts of a third of it, so the run still takes three PPO iterations."""
    if method in ("reinflow", "grpo") and steps < 3 * 2000:
        return [f"algo.rollout_env_steps={steps // 3}"]
    return []


def run_online(task: str, method: str, base: Path, seed: int, steps: int, reward: str, out: Path) -> tuple[Path, dict]:
    from robo_rl.transport.link import free_ports

    preset, base_key = TASKS[task]["presets"][method], ONLINE[method]
    name, before = f"{method}_s{seed}", set(out.glob("*/*"))
    ports = [
        f"transport.{k}={p}" for k, p in zip(("data_port", "weights_port", "ctrl_port"), free_ports(3), strict=True)
    ]
    args = [
        "train",
        f"experiment={preset}",
        f"{base_key}={base}",
        f"env.reward_type={reward}",
        *variant(method)[1],
        f"train.total_env_steps={steps}",
        *on_policy_rollouts(method, steps),
        f"seed={seed}",
        f"outputs_dir={out}",
        f"name={name}",
        "logger.progress=false",
        "eval.episodes=1",
        *ports,
    ]
    _, wall, cpu = cli(args, out / "logs" / f"{name}.log")
    run = new_folder(out, name, before)
    counts = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learner = [m for m in counts if m.get("kind") == "learner" and "episodes" in m]
    return run, {
        "env_steps": max(m.get("env_steps", 0) for m in counts),
        "episodes": learner[-1]["episodes"] if learner else None,
        "wall_s": wall,
        "cpu_s": cpu,
    }


def run_offline(
    task: str,
    method: str,
    base_run: Path,
    seed: int,
    episodes: int,
    iterations: int,
    out: Path,
    quick: bool = False,
    tune: tuple[str, int] | None = None,
) -> tuple[Path, dict]:
    """RECAP/STEAM in a copy of the base's run folder: `iterations` rounds of collect (the newest policy; STEAM's with
    the task's cameras), label (everything collected so far and, RECAP's, the demonstrations), fine-tune (from the
    base) and, with `tune` = (guidances, episodes), `recap tune`: the guidance scale chosen on validation episodes
    (seeds of their own, not stored, counted apart as robot time), used by the next collection and the evaluation.
    Quick: a tenth of the value fit's and the fine-tune's gradient steps (the plumbing, not a result)."""
    folder = out / f"{method}_s{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base_run, folder, ignore=shutil.ignore_patterns("replay", "recap", "eval"))
    log, settings = out / "logs" / f"{folder.name}.log", [*OFFLINE[method], f"recap.seed={seed}"]
    cameras = TASKS[task].get("cameras", []) if method == "steam" else []
    if quick:
        settings += ["recap.value_steps=300", "recap.updates=300", "recap.critic_steps=150"]
    cost = {"env_steps": 0, "episodes": 0, "wall_s": 0.0, "cpu_s": 0.0, "iterations": []}
    cost |= {"validation_env_steps": 0, "validation_episodes": 0} if tune else {}
    for i in range(iterations):
        seed_i = 200000 + 10000 * seed + 1000 * i  # collection seeds: apart from training, demos and evaluation
        steps = [
            [
                "recap",
                "collect",
                str(folder),
                f"episodes={episodes}",
                f"seed={seed_i}",
                "logger.progress=false",
                *cameras,
            ],
            ["recap", "label", str(folder), *settings, *(["demos=false"] if cameras else [])],
            ["recap", "finetune", str(folder), *settings],
        ]
        if tune:  # validation seeds: apart from collection (200000...) and evaluation (EVAL_SEED...)
            steps.append(["recap", "tune", str(folder), f"guidances={tune[0]}", f"episodes={tune[1]}",
                          f"seed={300000 + 10000 * seed + 1000 * i}", "logger.progress=false"])  # fmt: skip
        for args in steps:
            recap_step(args, log, cost, folder / "recap" / "policy.guidance.json")
    return folder, cost


def recap_step(args: list[str], log: Path, cost: dict, guidance_table: Path) -> float:
    """Run one `robo-rl recap` step, adding its wall and CPU seconds to `cost`, and its robot time: a collection's
    env steps and episodes (its success rate as a new iteration's), a tune's validation episodes (read from
    `guidance_table`, its <policy>.guidance.json). Returns its wall seconds."""
    text, wall, cpu = cli(args, log)
    cost["wall_s"] += wall
    cost["cpu_s"] += cpu
    if args[1] == "collect":
        k, n, length = SUCCESS.search(text).groups()
        cost["env_steps"] += round(int(n) * float(length))
        cost["episodes"] += int(n)
        cost["iterations"].append({"collected_success": int(k) / int(n)})
    if args[1] == "tune":
        add_validation(cost, json.loads(guidance_table.read_text()))
    return wall


def add_validation(cost: dict, tuned: dict) -> None:
    """`recap tune`'s table (<policy>.guidance.json) into the cost: its episodes are robot time, counted apart from the
    collected ones, and the scale it chose goes with its iteration."""
    for r in tuned["results"].values():
        cost["validation_episodes"] += r["episodes"]
        cost["validation_env_steps"] += round(r["episodes"] * r["mean_length"])
    cost["iterations"][-1] |= {"guidance": tuned["guidance"], "validation": tuned["results"]}


def summarise(table: dict, reps: int | None = None) -> dict:
    """rliable's IQM / mean / optimality gap per method over seeds, and P(method > base) (`reps` bootstrap
    repetitions; the report's default)."""
    from robo_rl.eval.aggregate import REPORT_REPS, aggregate, probability_of_improvement

    reps = reps or REPORT_REPS
    scores = {m: [[r["success"]["rate"]] for r in rows] for m, rows in table.items() if rows}
    stats = aggregate(scores, reps=reps)
    out = {m: {k: [e.point, e.low, e.high] for k, e in s.items()} for m, s in stats.items()}
    for m in scores:
        if m != "base":
            p = probability_of_improvement(scores[m], scores["base"], reps=reps)
            out[m]["p_improvement_over_base"] = [p.point, p.low, p.high]
        if table[m] and all("initial_policy" in r for r in table[m]):  # the same evaluation mode as the trained policy
            initial = [[r["initial_policy"]["rate"]] for r in table[m]]
            p = probability_of_improvement(scores[m], initial, reps=reps)
            out[m]["p_improvement_over_initial_policy"] = [p.point, p.low, p.high]
    return out


def summary_over(table: dict, seeds: list[int], reps: int | None = None) -> dict:
    """`summarise` over the methods measured on every seed (a failed or stopped run leaves its method out)."""
    measured = {m: [r for r in rows if "success" in r] for m, rows in table.items()}
    return summarise({m: rows for m, rows in measured.items() if len(rows) == len(seeds)}, reps)


def result_name(task: str, tag: str) -> str:
    return f"methods_{task}" + (f"_{tag}" if tag else "")


SAME_PROTOCOL = ("task", "eval")  # every file's; the budget of a kind only where the file ran a method of that kind
ONLINE_PROTOCOL, OFFLINE_PROTOCOL = ("online_env_steps", "reward"), ("offline",)


def merge_results(results: list[dict], reps: int | None = None) -> dict:
    """Result files of runs side by side as one: the same seeds with other methods (the online methods beside a RECAP
    run) or other seeds, runs per method joined and the summary recomputed over every seed. Refused: files that differ
    in the task, the evaluation or the budget of the methods they ran (online env steps and reward, offline episodes),
    a method measured twice on one seed, or one seed's base measured differently in two files."""
    protocol = {k: results[0].get(k) for k in SAME_PROTOCOL}
    differ = {k for r in results for k in SAME_PROTOCOL if r.get(k) != protocol[k]}
    for kind, keys in ((ONLINE, ONLINE_PROTOCOL), (OFFLINE, OFFLINE_PROTOCOL)):
        ran = [r for r in results if any(m in kind and "success" in x for m, xs in r["runs"].items() for x in xs)]
        differ |= {k for r in ran for k in keys if r.get(k) != ran[0].get(k)}
        protocol |= {k: ran[0].get(k) if ran else None for k in keys}
    if differ:
        raise SystemExit(f"bench/methods.py --combine: the files differ in {', '.join(sorted(differ))}")
    table: dict[str, dict[int, dict]] = {}
    for r in results:
        for method, rows in r["runs"].items():
            for row in rows:
                have = table.setdefault(method, {}).get(row["seed"])
                if have is None or "success" not in have:
                    table[method][row["seed"]] = row
                elif method == "base" and have["success"]["rate"] != row["success"]["rate"]:
                    raise SystemExit(f"bench/methods.py --combine: seed {row['seed']}'s base differs between files")
                elif method != "base" and "success" in row:
                    raise SystemExit(f"bench/methods.py --combine: {method} seed {row['seed']} is in two files")
    seeds = sorted({s for r in results for s in r["seeds"]})
    runs = {m: [rows[s] for s in seeds if s in rows] for m, rows in table.items()}
    partial = {"partial": True} if any(r.get("partial") for r in results) else {}  # a run stopped before its end
    return {**protocol, "seeds": seeds, "runs": runs, "summary": summary_over(runs, seeds, reps), **partial}


def combine(paths: list[Path], tag: str) -> None:
    results = [json.loads(p.read_text()) for p in paths]
    merged = merge_results(results)
    merged["combined_from"] = [
        {"file": str(p), "commit": r.get("commit"), "date": r.get("date")} for p, r in zip(paths, results, strict=True)
    ]
    path = write_result(result_name(merged["task"], tag), merged)
    print(f"wrote {path}")
    print(json.dumps({"task": merged["task"], "seeds": merged["seeds"], "summary": merged["summary"]}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="pick")
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS, help="all by default (lift: name them)")
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--steps", type=int, help="env steps of each online method")
    p.add_argument("--episodes", type=int, help="episodes RECAP/STEAM collect per iteration")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--guidances", default=GUIDANCES, help="RECAP's guidance scales tried by `recap tune` ('1': none)")
    p.add_argument(
        "--validation-episodes", type=int, help=f"episodes per scale of `recap tune` (quick 5, else {TUNE_EPISODES})"
    )
    p.add_argument("--tag", default="", help="appended to the result file's name (runs side by side)")
    p.add_argument("--eval-episodes", type=int)
    p.add_argument("--reward", default="sparse", choices=("sparse", "dense"), help="every online method's env reward")
    p.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench_methods")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--combine", nargs="+", type=Path, help="result files of runs side by side (other seeds): merged")
    a = p.parse_args()
    if a.combine:
        return combine(a.combine, a.tag)
    if a.task not in TASKS:
        sys.exit(f"bench/methods.py: unknown task '{a.task}' (known: {', '.join(TASKS)})")
    missing = [m for m in a.methods if m in ONLINE and m not in TASKS[a.task]["presets"]]
    if missing:
        sys.exit(f"bench/methods.py: {a.task} has no preset for {', '.join(missing)} yet (pass --methods without them)")
    seeds = a.seeds or ([0] if a.quick else [0, 1, 2])
    steps = a.steps or (1500 if a.quick else 20000)
    episodes = a.episodes or (10 if a.quick else 200)
    n_eval = a.eval_episodes or (10 if a.quick else 50)
    out = a.out / ("quick" if a.quick else a.task)
    out.mkdir(parents=True, exist_ok=True)
    table: dict[str, list] = {"base": [], **{m: [] for m in a.methods}}
    protocol = {
        "task": a.task,
        "seeds": seeds,
        "online_env_steps": steps,
        "offline": {"episodes_per_iteration": episodes, "iterations": a.iterations, "guidances": a.guidances},
        "eval": {"episodes": n_eval, "seed": EVAL_SEED},
        "reward": a.reward,
    }
    for seed in seeds:
        base_run, cost = make_base(a.task, seed, out)
        base = base_run / "bc" / "policy.pt"
        log = out / "logs" / f"eval_s{seed}.log"
        table["base"].append({"seed": seed, "success": evaluate_flow(base_run, base, n_eval, log), **cost})
        print(f"seed {seed} base: {table['base'][-1]['success']}", flush=True)
        for method in a.methods:
            try:
                if method in ONLINE:
                    run, cost = run_online(a.task, method, base, seed, steps, a.reward, out)
                    result = evaluate_checkpoint(run, n_eval)
                    if method in STARTS_AT_BASE:
                        cost["initial_policy"] = evaluate_checkpoint(run, n_eval, initial=True)
                else:
                    tune = (
                        None
                        if a.guidances == "1"
                        else (a.guidances, a.validation_episodes or (5 if a.quick else TUNE_EPISODES))
                    )
                    run, cost = run_offline(a.task, method, base_run, seed, episodes, a.iterations, out, a.quick, tune)
                    result = evaluate_flow(run, run / "recap" / "policy.pt", n_eval, log)
            except Exception as e:  # one method's failure is reported, the others still measured
                print(f"seed {seed} {method}: FAILED {str(e)[-600:]}", flush=True)
                table[method].append({"seed": seed, "failed": str(e)[-2000:]})
                continue
            table[method].append({"seed": seed, "run": str(run), "success": result, **cost})
            print(f"seed {seed} {method}: {result} cost {cost}", flush=True)
            # hours of runs: what is measured so far is kept, should the rest be stopped (no summary until the end)
            write_result(result_name(a.task, a.tag), protocol | {"runs": table, "partial": True}, quick=a.quick)
    summary = summary_over(table, seeds)
    path = write_result(result_name(a.task, a.tag), protocol | {"runs": table, "summary": summary}, quick=a.quick)
    for m, s in summary.items():
        iqm = s["iqm"]
        print(f"{m:9s} IQM {iqm[0]:.2f} [{iqm[1]:.2f}, {iqm[2]:.2f}]", s.get("p_improvement_over_base", ""))
    print(f"wrote {path}")
    print(json.dumps({"task": a.task, "summary": summary}))


if __name__ == "__main__":
    main()
