"""Evaluation and launching (issue 18): episodes per second of an evaluation suite with 1 and 2 env worker
processes, env steps per second into one learner from N sim actors started by `robo-rl launch` against 1 actor,
and (given two runs) the robustness table of two policies on the pick suite.

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


def untrained_checkpoint(root: Path) -> Path:
    """A pick-task run folder whose policy is freshly initialised (its episodes run to the time limit)."""
    from robo_rl.config import load_config, make_env, make_policy, save_config
    from robo_rl.runs import save_checkpoint

    cfg = load_config(["experiment=rlpd", "logger.progress=false"])
    run = root / "untrained"
    run.mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    env = make_env(cfg)
    policy = make_policy(cfg, env)
    env.close()
    save_checkpoint(run, 0, {"algo": {"policy": policy.state_dict()}, "counters": {"env_steps": 0}})
    return run


def quick_suite(root: Path) -> Path:
    """Two conditions of pick_robustness (nominal and all-strong), for --quick."""
    import yaml

    from robo_rl.eval.conditions import SUITE_DIR

    suite = yaml.safe_load((SUITE_DIR / "pick_robustness.yaml").read_text())
    suite["conditions"] = [c for c in suite["conditions"] if c["name"] in ("nominal", "all_strong")]
    path = root / "pick_quick.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def suite_throughput(checkpoint: Path, suite: str, episodes: int, workers: int) -> dict:
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
    seconds = time.perf_counter() - start
    n = sum(c["n"] for c in report["conditions"])
    return {
        "workers": workers,
        "episodes": n,
        "seconds": round(seconds, 2),
        "episodes_per_s": round(n / seconds, 3),
        "successes": [c["successes"] for c in report["conditions"]],
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
    args = parser.parse_args()
    result: dict = {"benchmark": "eval", "quick": args.quick, "load_1min": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.compare:
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
                f"{two['episodes_per_s']} with 2 (x{result['suite']['ratio']})",
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
    write_result(f"eval{'_compare' if args.compare else ''}", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
