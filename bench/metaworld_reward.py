"""Meta-World with a learned reward: RL over the SmolVLA trained by bench/metaworld_vla.py (DSRL, or `--method` one
of that bench's other methods), paid by a success classifier trained on the task's camera frames instead of the
simulator's success, against the same method paid by the simulator (that bench's result, same seed, same steps).

    python bench/metaworld_reward.py --vla-out outputs/mwvla --tasks pick-place-v3   # after bench/metaworld_vla.py
    python bench/metaworld_reward.py --vla-out outputs/mwvla --tasks push-back-v3 --method residual_mode_l2
    python bench/metaworld_reward.py --quick --vla-out outputs/bench_metaworld_vla   # after its --quick: plumbing

Per task: (1) reward data from the same `corner2` camera at the same size as the VLA's: the scripted expert's
successes (action noise 0.1), each held `--hold` steps past its first success (the env does not end it there), and
failures (an untrained policy's, and the expert's with `--failure-noise`: attempts that come near a success), for
training and, from other seeds, held out; (2) `robo-rl reward train kind=classifier`'s code (a small CNN, the
threshold set on held-out episodes, the novelty gate) and its quality on the held-out episodes (frame AUROC, the
per-episode false-success rate); (3) `robo-rl train` of bench/metaworld_vla.py's `--method` (DSRL: noise-space SAC
over the frozen SmolVLA, the noise actor on the state; residual_mode_l2: the bounded residual on its mode) with
`reward=model`: the classifier scores each frame on the actor, its shaper pays the reward and declares the success
that ends an episode; the simulator's success is read only by the final evaluation (50 fixed seeds, deterministic).
The figure: success after RL with the learned reward over success after RL with the simulator's (the issue's bar:
>= 0.9 on two tasks).

Writes bench/results/<--name> (default metaworld_reward, --quick metaworld_reward_quick) after every stage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import bench.metaworld_vla as mwv  # noqa: E402
from bench._results import RESULTS, write_result  # noqa: E402


def reward_model(args, task: str, instruction: str, folder: Path) -> dict:
    """Collect the task's reward data, train the classifier into `folder`, and score it on held-out episodes;
    `instruction`: the task's (the env class has none of its own: Meta-World's comes with the task)."""
    from bench.critic import collect
    from robo_rl.rewards.classifier_fit import evaluate_classifier, train_classifier

    start = time.monotonic()
    overrides = ["experiment=rlpd", *mwv.env_overrides(args, task)]  # the untrained policy: a SAC actor's
    n = args.episodes_per_kind
    train_eps, _ = collect(n, n, 1, overrides, args.hold, n_expert_failed=n, failure_noise=args.failure_noise)
    held_out, _ = collect(n // 2, n // 2, 2, overrides, args.hold, n // 2, args.failure_noise)
    collected = time.monotonic() - start
    clf, trained = train_classifier(
        train_eps, [mwv.CAMERA], epochs=args.epochs, progress=False, channels=16, seed=args.seed
    )  # fmt: skip
    clf.instructions = (instruction,)
    clf.save(folder)
    quality = {k: v for k, v in evaluate_classifier(clf, held_out).items() if isinstance(v, int | float)}
    return {
        "folder": str(folder),
        "instruction": instruction,
        "episodes": {"train": len(train_eps), "held_out": len(held_out)},
        "frames": int(sum(len(e) for e in train_eps)),
        "held_out_quality": quality,
        "threshold": float(clf.threshold),
        "gate": trained.get("gate"),
        "collect_s": round(collected, 1),
        "train_s": round(time.monotonic() - start - collected, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one task, few episodes, a short run")
    parser.add_argument("--vla-out", required=True, help="bench/metaworld_vla.py's --out: its SmolVLA and results")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks among the VLA's (default pick-place-v3)")
    parser.add_argument("--episodes-per-kind", type=int, default=None, help="successes, and each kind of failure")
    parser.add_argument("--hold", type=int, default=10, help="steps a success is held past its first frame")
    parser.add_argument("--failure-noise", type=float, default=1.0, help="the expert's action noise in failures")
    parser.add_argument("--epochs", type=int, default=None, help="classifier epochs (20; quick 2)")
    parser.add_argument("--episodes", type=int, default=None, help="evaluation episodes (50; quick 5)")
    parser.add_argument("--rl-steps", type=int, default=None, help="RL env steps (10k; quick 300)")
    parser.add_argument(
        "--method", default="dsrl", choices=sorted(mwv.METHODS), help="bench/metaworld_vla.py's RL method (dsrl)"
    )
    parser.add_argument("--image-size", type=int, default=64, help="as bench/metaworld_vla.py was run")
    parser.add_argument("--horizon", type=int, default=150, help="as bench/metaworld_vla.py was run")
    parser.add_argument("--demos", type=int, default=None, help="as bench/metaworld_vla.py was run (10; quick 2)")
    parser.add_argument("--noise-std", type=float, default=0.3, help="as bench/metaworld_vla.py was run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default=None)
    parser.add_argument("--reuse", action="store_true", help="keep a reward model already trained in --vla-out")
    args = parser.parse_args()
    q = args.quick
    out = Path(args.vla_out)
    stages = json.loads((out / "stages.json").read_text())
    # the env, camera and demonstrations the SmolVLA was trained on (bench/metaworld_vla.py's defaults)
    args.demos, args.out = args.demos or (2 if q else 10), str(out)
    args.tasks = args.tasks.split(",") if args.tasks else ["reach-v3" if q else "pick-place-v3"]
    args.episodes_per_kind = args.episodes_per_kind or (4 if q else 30)
    args.epochs = args.epochs or (2 if q else 20)
    args.episodes = args.episodes or (5 if q else 50)
    args.rl_steps = args.rl_steps or (300 if q else 10000)
    model = stages["vla_training"]["pretrained_model"]
    name = args.name or ("metaworld_reward_quick" if q else "metaworld_reward")
    keys = (
        "vla_out",
        "tasks",
        "method",
        "episodes_per_kind",
        "hold",
        "failure_noise",
        "epochs",
        "episodes",
        "rl_steps",
        "seed",
    )
    m = args.method
    result: dict = {k: getattr(args, k) for k in keys} | {"partial": True, "pretrained_model": model, "per_task": {}}

    def keep() -> None:
        write_result(name, result, quick=q, folder=RESULTS)

    for task in args.tasks:
        record = result["per_task"].setdefault(task, {})
        base = stages["per_task"][task]["base"]
        record["smolvla"] = base["success_rate"]
        folder = out / "rewards" / task
        if args.reuse and (folder / "reward_report.json").is_file():
            record["classifier"] = json.loads((folder / "reward_report.json").read_text())
        else:
            record["classifier"] = reward_model(args, task, base["instruction"], folder)
            (folder / "reward_report.json").write_text(json.dumps(record["classifier"], indent=1))
        keep()
        print(f"{task}: classifier {record['classifier']['held_out_quality']}", flush=True)
        reward = ("reward=model", f"reward.model={folder}")
        run = mwv.run_rl(args, task, base["instruction"], model, m, extra=reward, tag="_learned_reward")
        record[f"{m}_learned_reward"] = run
        sim = mwv.rl_records(stages["per_task"][task], args.seed).get(m, {})
        after = run["after"]["success_rate"]
        record["gain_points"] = round(100 * (after - base["success_rate"]), 1)
        if "base_zero_noise" in stages["per_task"][task]:  # the SmolVLA's mode, where DSRL and residual_mode start
            mode = stages["per_task"][task]["base_zero_noise"]["success_rate"]
            record["smolvla_mode"] = mode
            record["gain_points_over_mode"] = round(100 * (after - mode), 1)
        if sim.get("steps") == args.rl_steps:
            record[f"{m}_sim_reward"] = sim["after"]["success_rate"]
            record["ratio_to_sim_reward"] = round(after / max(sim["after"]["success_rate"], 1e-9), 3)
        keep()
        print(f"{task}: {m} with the learned reward {after:.2f} ({record['gain_points']:+} points; sim reward "
              f"{record.get(f'{m}_sim_reward')})", flush=True)  # fmt: skip
    result.pop("partial")
    keep()


if __name__ == "__main__":
    main()
