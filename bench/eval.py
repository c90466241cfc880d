"""Evaluation and launching (issue 18): episodes per second of an evaluation suite with 1 and 2 env worker
processes, env steps per second into one learner from N sim actors started by `robo-rl launch` against 1 actor,
and (given two runs) the robustness table of two policies on the pick suite. Issue 48: each suite run reports its
throughput and time (successes per hour, cycle time: robo_rl/eval/throughput.py), and `--recipes` compares two
recipes x three seeds with `robo-rl eval compare <recipe>=<run>,<run>,<run> ...` (rliable's IQM and probability of
improvement with stratified bootstrap intervals).

Suite throughput: the `pick_robustness` suite (27 conditions) on the pick task, `eval.episodes` per condition, with an
untrained policy (the episodes run their full 50 steps, the slowest case) or `--checkpoint`, clips off; ours with 2
workers against the same suite with 1 (the baseline, same run). Launcher throughput: `robo-rl launch sim_four
launch.actors=N` on point_reach with SAC/RLPD, unthrottled actors (`actor.throttle_to_learner=false`), the env
steps the learner received per second of wall time between its first and last metrics line (episode and learner
lines), against `sim_one`
(1 actor) in the same run. Robustness (`--compare run_a run_b`): `robo-rl eval compare` on `pick_robustness`.

    python bench/eval.py                 # 10 episodes per condition; launcher 8 actors vs 1 (a few minutes)
    python bench/eval.py --quick         # within 60 s: 2 conditions x 4 episodes; launcher skipped unless --launch
    python bench/eval.py --compare outputs/<nominal run> outputs/<randomised run>
    python bench/eval.py --recipes       # BC base alone vs the default residual on it, seeds 0-2, each trained here
                                         # and evaluated on pick_robustness, then the grouped eval compare (30-60 min)
    python bench/eval.py --quick --recipes   # the same with 2 seeds, 600 env steps, 2 conditions x 4 episodes

Recipes (`--recipes`): per seed, `robo-rl bc seed=S` clones a base from the 30 scripted demonstrations; `bc_base` is
that base alone (a residual run folder at env step 0, whose zero-initialised residual adds nothing), `residual` is
`robo-rl train seed=S train.total_env_steps=3000 policy.base.path=<that base>` (the default experiment on the same
base). Each run is evaluated on the suite (`robo-rl eval`, 2 workers); the probability of improvement is residual's
over bc_base, paired by nothing but the suite's seeds (the same initial states for every run).

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from bench._results import write_result  # noqa: E402


def fresh_run(run: Path, overrides: list[str]) -> Path:
    """A run folder holding the config's policy as built, unlearnt, as its checkpoint at env step 0."""
    from robo_rl.config import load_config, make_env, make_policy, save_config
    from robo_rl.runs import save_checkpoint

    cfg = load_config([*overrides, "logger.progress=false"])
    run.mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    env = make_env(cfg)
    policy = make_policy(cfg, env)
    env.close()
    save_checkpoint(run, 0, {"algo": {"policy": policy.state_dict()}, "counters": {"env_steps": 0}})
    return run


def untrained_checkpoint(root: Path) -> Path:
    """A pick-task run folder whose policy is freshly initialised (its episodes run to the time limit)."""
    return fresh_run(root / "untrained", ["experiment=rlpd"])


def quick_suite(root: Path) -> Path:
    """Two conditions of pick_robustness (nominal and all-strong), for --quick."""
    import yaml

    from robo_rl.eval.conditions import SUITE_DIR

    suite = yaml.safe_load((SUITE_DIR / "pick_robustness.yaml").read_text())
    suite["conditions"] = [c for c in suite["conditions"] if c["name"] in ("nominal", "all_strong")]
    suite["name"] = "pick_quick"  # its reports are not the whole suite's
    path = root / "pick_quick.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def suite_time(report: dict) -> dict:
    """A suite report's success over all its episodes (Wilson 95%) and its throughput and time on the primary clock
    (robo_rl/eval/throughput.py: robot time at the control rate in a simulator, resets counted)."""
    from robo_rl.eval.throughput import throughput
    from robo_rl.eval.wilson import wilson_interval

    episodes = [e for c in report["conditions"] for e in c["episodes"]]
    k, n = sum(bool(e["success"]) for e in episodes), len(episodes)
    whole = throughput(episodes)
    figures = whole.get(whole["primary"]) or {}
    return {
        "episodes": n,
        "successes": k,
        "success_rate": round(k / n, 4) if n else None,
        "success_ci95": [round(b, 4) for b in wilson_interval(k, n)],
        "clock": whole["primary"],
        "control_hz": whole["control_hz"],
        **{key: None if v is None else round(v, 4) for key, v in figures.items()},
        "successes_per_hour_by_condition": {
            c["name"]: _rounded((c.get("throughput") or {}).get(whole["primary"]) or {}, "successes_per_hour")
            for c in report["conditions"]
        },
    }


def _rounded(figures: dict, key: str) -> float | None:
    return None if figures.get(key) is None else round(figures[key], 1)


def evaluate(checkpoint: Path, suite: str, episodes: int, workers: int) -> tuple[dict, float]:
    """`robo-rl eval checkpoint=<checkpoint> suite=<suite>` in this process: (its report, seconds)."""
    from robo_rl.commands.eval import evaluate_on_suite

    start = time.perf_counter()
    report, _ = evaluate_on_suite(
        [
            f"checkpoint={checkpoint}",
            f"suite={suite}",
            f"eval.workers={workers}",
            f"eval.episodes={episodes}",
            "eval.video=false",
            "logger.progress=false",
        ],
        say=lambda *_: None,
    )
    return report, time.perf_counter() - start


def suite_throughput(checkpoint: Path, suite: str, episodes: int, workers: int) -> dict:
    report, seconds = evaluate(checkpoint, suite, episodes, workers)
    n = sum(c["n"] for c in report["conditions"])
    return {
        "workers": workers,
        "episodes": n,
        "seconds": round(seconds, 2),
        "episodes_per_s": round(n / seconds, 3),
        "successes": [c["successes"] for c in report["conditions"]],
        "time": suite_time(report),
    }


def robo_rl(*args: str) -> str:
    """A `robo-rl` command in its own process (as a user runs it); its stdout, or a RuntimeError with its stderr."""
    proc = subprocess.run([sys.executable, "-m", "robo_rl.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"robo-rl {' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return proc.stdout


def run_folder(outputs: Path) -> Path:
    """The one run folder a command made under `outputs` (outputs/<date>/<time>_<name>/)."""
    (config,) = outputs.glob("*/*/config.yaml")
    return config.parent


def base_alone(root: Path, seed: int, base: Path) -> Path:
    """A residual run folder at env step 0 on `base`: its residual head is zero-initialised, so it acts as the base."""
    return fresh_run(root / f"bc_base_s{seed}", [f"seed={seed}", f"name=bc_base_s{seed}", f"policy.base.path={base}"])


def recipes(root: Path, seeds: list[int], steps: int, suite: str, episodes: int) -> dict:
    """BC base alone against the default residual on it, per seed, each evaluated on `suite`, then compared by
    `robo-rl eval compare bc_base=<runs> residual=<runs>` (rliable: IQM, probability of improvement)."""
    groups: dict[str, list[Path]] = {"bc_base": [], "residual": []}
    records = []
    for seed in seeds:
        start = time.perf_counter()
        robo_rl("bc", f"seed={seed}", f"outputs_dir={root / f'bc_s{seed}'}", "logger.progress=false")
        base = run_folder(root / f"bc_s{seed}") / "bc" / "policy.pt"
        bc_s = time.perf_counter() - start
        alone = base_alone(root, seed, base)
        start = time.perf_counter()
        robo_rl(
            "train",
            f"seed={seed}",
            f"name=residual_s{seed}",
            f"train.total_env_steps={steps}",
            f"policy.base.path={base}",
            f"outputs_dir={root / f'residual_s{seed}'}",
            "logger.progress=false",
        )
        train_s = time.perf_counter() - start
        groups["bc_base"].append(alone)
        groups["residual"].append(run_folder(root / f"residual_s{seed}"))
        for recipe, run in (("bc_base", alone), ("residual", groups["residual"][-1])):
            report, seconds = evaluate(run, suite, episodes, 2)
            record = {"recipe": recipe, "seed": seed, "checkpoint": Path(report.get("checkpoint", "?")).name}
            record |= {"bc_s": round(bc_s, 1), "train_s": round(train_s, 1) if recipe == "residual" else 0.0}
            records.append({**record, "eval_s": round(seconds, 1), **suite_time(report)})
            print(
                f"{recipe} seed {seed}: {record['checkpoint']}, {records[-1]['successes']}/{records[-1]['episodes']} "
                f"on the suite, {records[-1]['successes_per_hour']} successes/h, cycle "
                f"{records[-1]['cycle_s_mean']} s ({records[-1]['clock']}), evaluated in {seconds:.0f} s",
                flush=True,
            )
    name = report["suite"]
    out = root / "compare"
    args = [f"{r}={','.join(map(str, runs))}" for r, runs in groups.items()]
    printed = robo_rl("eval", "compare", *args, f"suite={name}", f"out={out}")
    print(printed, flush=True)
    return {
        "recipes": {
            "bc_base": "robo-rl bc seed=S (30 scripted demonstrations), the base alone: a residual at env step 0",
            "residual": f"robo-rl train seed=S train.total_env_steps={steps} policy.base.path=<the same base>",
        },
        "seeds": seeds,
        "suite": name,
        "episodes_per_condition": episodes,
        "runs": records,
        "comparison": json.loads((out / f"compare_recipes_{name}.json").read_text()),
        "compare_printed": printed,
    }


def launcher_throughput(layout: str, actors: int | None, steps: int, out: Path) -> dict:
    """Env steps per second the learner received from `robo-rl launch <layout>` (wall time between the first and
    last metrics line that count env steps)."""
    args = [
        sys.executable,
        "-m",
        "robo_rl.cli",
        "launch",
        layout,
        "env=point_reach",
        "experiment=rlpd",
        f"train.total_env_steps={steps}",
        "train.learning_starts=200",
        "demos.num_episodes=5",
        "actor.throttle_to_learner=false",
        "logger.progress=false",
        f"outputs_dir={out}",
    ]
    if actors is not None:
        args.append(f"launch.actors={actors}")
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"robo-rl launch {layout} failed ({proc.returncode}): {proc.stderr[-600:]}")
    metrics = sorted(out.glob("*/*/metrics.jsonl"), key=lambda p: p.stat().st_mtime)[-1]
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    # episode lines too say when each step arrived, between the learner's periodic lines
    counted = [m for m in lines if m.get("kind") in ("learner", "episode") and m.get("env_steps")]
    span = counted[-1]["time"] - counted[0]["time"]
    received = counted[-1]["env_steps"] - counted[0]["env_steps"]
    return {
        "layout": layout,
        "actors": actors or 1,
        "env_steps": counted[-1]["env_steps"],
        "wall_s": round(wall, 1),
        "env_steps_per_s": round(received / span, 1) if span > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--launch", action="store_true", help="with --quick: measure the launcher too (2 actors)")
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--compare", nargs="+", type=Path, default=None)
    parser.add_argument("--recipes", action="store_true", help="BC base vs residual, 3 seeds, on pick_robustness")
    parser.add_argument("--steps", type=int, default=None, help="--recipes: the residual's env steps (3000)")
    args = parser.parse_args()
    result: dict = {"benchmark": "eval", "quick": args.quick, "load_1min": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.recipes:
            start = time.perf_counter()
            suite = str(quick_suite(root)) if args.quick else "pick_robustness"
            seeds = [0, 1] if args.quick else [0, 1, 2]
            steps = args.steps or (600 if args.quick else 3000)
            episodes = args.episodes or (4 if args.quick else 10)
            result["recipes"] = recipes(root, seeds, steps, suite, episodes)
            result["recipes"]["wall_s"] = round(time.perf_counter() - start, 1)
        elif args.compare:
            from robo_rl.commands.eval import cmd_eval_compare

            cmd_eval_compare(
                "compare",
                [*map(str, args.compare), "suite=pick_robustness", f"out={root}", "eval.workers=2", "eval.video=false"],
            )
            result["compare"] = json.loads(next(root.glob("compare_*.json")).read_text())
            print(next(root.glob("compare_*.md")).read_text())
        else:
            checkpoint = args.checkpoint or untrained_checkpoint(root)
            suite = str(quick_suite(root)) if args.quick else "pick_robustness"
            episodes = args.episodes or (4 if args.quick else 10)
            one = suite_throughput(checkpoint, suite, episodes, 1)
            two = suite_throughput(checkpoint, suite, episodes, 2)
            assert one["successes"] == two["successes"], "two workers must give the same episodes as one"
            result["suite"] = {
                "one_worker": one,
                "two_workers": two,
                "ratio": round(two["episodes_per_s"] / one["episodes_per_s"], 2),
            }
            print(
                f"suite {Path(suite).stem}: {one['episodes_per_s']} episodes/s with 1 worker, "
                f"{two['episodes_per_s']} with 2 (x{result['suite']['ratio']}); {two['time']['successes']}/"
                f"{two['time']['episodes']} successes, {two['time']['successes_per_hour']} per hour of robot time "
                f"({two['time']['clock']}), cycle {two['time']['cycle_s_mean']} s",
                flush=True,
            )
            if not args.quick or args.launch:
                actors = 2 if args.quick else args.actors
                steps = 1500 if args.quick else 30000
                base = launcher_throughput("sim_one", None, steps, root / "one")
                many = launcher_throughput("sim_four", actors, steps, root / "many")
                result["launch"] = {
                    "one_actor": base,
                    "many_actors": many,
                    "ratio": round(many["env_steps_per_s"] / base["env_steps_per_s"], 2),
                }
                print(
                    f"launch: {base['env_steps_per_s']} env steps/s from 1 actor, {many['env_steps_per_s']} from "
                    f"{actors} (x{result['launch']['ratio']})",
                    flush=True,
                )
    write_result(f"eval{'_recipes' if args.recipes else '_compare' if args.compare else ''}", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
