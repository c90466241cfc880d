"""Meta-World with a learned reward: RL over a base trained here, paid by a success classifier trained on the task's
camera frames instead of the simulator's success, against the same method paid by the simulator (the same seed, the
same steps). The base is bench/metaworld_vla.py's SmolVLA (`--vla-out`) or bench/metaworld.py's flow baseline
(`--flow-out`, one of its seeds: the flow policy reads the state, the classifier the camera the env now renders).

    python bench/metaworld_reward.py --vla-out outputs/mwvla --tasks pick-place-v3   # after bench/metaworld_vla.py
    python bench/metaworld_reward.py --vla-out outputs/mwvla --tasks push-back-v3 --method residual_mode_l2
    python bench/metaworld_reward.py --flow-out outputs/mw5_flow --seed 1 --tasks peg-insert-side-v3 \\
        --method residual_mode_l2 --review-every-s 120        # after bench/metaworld.py's bases; a person checks it
    python bench/metaworld_reward.py --quick --vla-out outputs/bench_metaworld_vla   # after its --quick: plumbing

Per task: (1) reward data from the `corner2` camera at the VLA's size: the scripted expert's successes (action noise
0.1), each held `--hold` steps past its first success (the env does not end it there), and failures (an untrained
policy's, and the expert's with `--failure-noise`: attempts that come near a success), for training (saved as a
replay store beside the model: what a retrain refits on) and, from other seeds, held out; (2) `robo-rl reward train
kind=classifier`'s code (a small CNN, the threshold set on held-out episodes, the novelty gate) and its quality on the
held-out episodes (frame AUROC, the per-episode false-success rate); (3) `robo-rl train` of `--method` (DSRL:
noise-space SAC over the frozen base, the noise actor on the state; residual_mode_l2: the bounded residual on its
mode) with `reward=model`: the classifier scores each frame on the actor, its shaper pays the reward and declares the
success that ends an episode; the simulator's success is read only by the final evaluation (50 fixed seeds,
deterministic) and, with `--review-every-s`, by the simulated person of bench/_unattended_review.py: every so many
seconds they look over the frames recorded since their last look, mark a few of the classifier's mistakes (a false or
a missed success, as the page's F / M keys do) and `robo-rl reward retrain` publishes the next model version, which
the actor swaps in between two steps (issue 52's live checks). The figure: success after RL with the learned reward
over success after RL with the simulator's (the issue's bar: >= 0.9 on two tasks), and the marks it took.

Writes bench/results/<--name> (default metaworld_reward, --quick metaworld_reward_quick) after every stage.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import bench.metaworld as mw  # noqa: E402
import bench.metaworld_vla as mwv  # noqa: E402
from bench._gather import BASE_PRINT, same_evaluation  # noqa: E402
from bench._results import RESULTS, write_result  # noqa: E402

# bench/metaworld_vla.py's method names, as bench/metaworld.py named the same recipe on the flow baseline
FLOW_METHOD = {
    "dsrl": "dsrl",
    "residual": "residual_ramped",
    "residual_mode": "residual_ramped_mode",
    "residual_mode_l2": "residual_ramped_mode_l2",
}
SIM_RESULT = RESULTS / "metaworld_flow5_residual_mode_l2_3seeds.json"  # the flow baseline's runs, simulator's reward


def camera(args) -> list[str]:
    """The classifier's camera, which the flow baseline's env renders for it (the flow policy reads the state)."""
    return [f"env.cameras=[{mwv.CAMERA}]", f"env.image_size={args.image_size}"]


def env_overrides(args, task: str) -> list[str]:
    """The env of the base's route, rendering the classifier's camera."""
    if args.route == "vla":
        return mwv.env_overrides(args, task)
    return [*mw.env_overrides(args, task), *camera(args)]


def reward_model(args, task: str, instruction: str, folder: Path) -> dict:
    """Collect the task's reward data, train the classifier into `folder` (its training episodes beside it, in
    `folder/data`: what `robo-rl reward retrain` refits on), and score it on held-out episodes; `instruction`: the
    task's (the env class has none of its own: Meta-World's comes with the task)."""
    from bench.critic import collect
    from robo_rl.data.datasets.io import save_store
    from robo_rl.rewards.classifier_fit import evaluate_classifier, train_classifier

    start = time.monotonic()
    overrides = ["experiment=rlpd", *env_overrides(args, task)]  # the untrained policy: a SAC actor's
    n = args.episodes_per_kind
    train_eps, _ = collect(n, n, 1, overrides, args.hold, n_expert_failed=n, failure_noise=args.failure_noise)
    held_out, _ = collect(n // 2, n // 2, 2, overrides, args.hold, n // 2, args.failure_noise)
    collected = time.monotonic() - start
    clf, trained = train_classifier(
        train_eps, [mwv.CAMERA], epochs=args.epochs, progress=False, channels=16, seed=args.seed
    )  # fmt: skip
    clf.instructions = (instruction,)
    clf.save(folder)
    data = save_store(train_eps, folder / "data", progress=False)
    report = {k: v for k, v in trained.items() if not isinstance(v, list | dict)}
    (folder / "train_report.json").write_text(json.dumps({**report, "data": str(data.resolve())}, default=float))
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


def vla_base(args, task: str) -> dict:
    """The SmolVLA's figures on `task` and the simulator-reward run of `--method` at this seed (bench/metaworld_vla.py's
    stages.json)."""
    stages = json.loads((Path(args.vla_out) / "stages.json").read_text())
    record = stages["per_task"][task]
    sim = mwv.rl_records(record, args.seed).get(args.method, {})
    return {
        "model": stages["vla_training"]["pretrained_model"],
        "instruction": record["base"]["instruction"],
        "sampled": record["base"]["success_rate"],
        "mode": record.get("base_zero_noise", {}).get("success_rate"),
        "sim": sim["after"]["success_rate"] if sim.get("steps") == args.rl_steps else None,
    }


def flow_base(args, task: str) -> dict:
    """The flow baseline's seed `--seed` on `task` (bench/metaworld.py's --out), and the simulator-reward run of
    `--method` on it from `--sim-result`, whose base evaluation must be this one's (a base rebuilt elsewhere is the
    same one: BC on the CPU reproduces it exactly; a differing evaluation is refused)."""
    folder = Path(args.flow_out) / f"s{args.seed}"
    base = json.loads((folder / "base" / "base.json").read_text())
    record = json.loads((folder / "partial.json").read_text())[task]
    method, sim = FLOW_METHOD[args.method], None
    if args.sim_result is not None and args.sim_result.is_file():
        detail = json.loads(args.sim_result.read_text())
        for seed in detail.get("seeds_detail", []):
            theirs = seed["tasks"].get(task, {}) if seed["seed"] == args.seed else {}
            if method not in theirs:
                continue
            trained = seed.get("base_training", {})
            if not same_evaluation(theirs["base"], record["base"]) or any(
                trained.get(k) != base.get(k) for k in BASE_PRINT
            ):
                raise SystemExit(f"{args.sim_result}: its {task} s{args.seed} base is not {folder}'s")
            if theirs[method]["steps"] == args.rl_steps:
                sim = theirs[method]["after"]["success_rate"]
    return {
        "checkpoint": base["checkpoint"],
        "instruction": record["instruction"],
        "sampled": record["base"]["sampled"]["success_rate"],
        "mode": record["base"]["zero_noise"]["success_rate"],
        "sim": sim,
    }


def reviewed(
    train, runs: Path, name: str, every_s: float, nice: int = 10, mark_share: float | None = None
) -> tuple[dict, dict | None]:
    """`train()` (a run named `name` under `runs/`) with the simulated person of bench/_unattended_review.py looking
    at its frames every `every_s` seconds (0: nobody looks), each retrain at CPU niceness `nice` with the marks drawn
    as `mark_share` of their class (None: as any frame); the run's result and the looks' summary."""
    if every_s <= 0:
        return train(), None
    from bench._unattended_review import Reviewer, summarize

    before = set(runs.glob("*/*"))
    done: dict = {}

    def work() -> None:
        try:
            done["result"] = train()
        except BaseException as e:  # noqa: BLE001 - raised on the bench's own thread below
            done["error"] = e

    thread = threading.Thread(target=work, name="train")
    thread.start()
    start, reviewer, next_look = time.monotonic(), None, every_s
    while thread.is_alive():
        thread.join(timeout=5.0)
        if reviewer is None:
            found = [r for r in set(runs.glob("*/*")) - before if r.name.endswith(name)]
            if found and (found[0] / "replay" / "online").is_dir():
                reviewer = Reviewer(found[0], [mwv.CAMERA], retrain_nice=nice, mark_share=mark_share)
        if reviewer is not None and thread.is_alive() and time.monotonic() - start >= next_look:
            look = reviewer.look(time.monotonic() - start)
            print(f"  look at {look['t_s']:.0f} s: {json.dumps({k: v for k, v in look.items() if k != 't_s'})}")
            next_look += every_s
    if "error" in done:
        raise done["error"]
    if reviewer is None:
        return done["result"], {"looks": 0}
    reviewer.finish()
    summary = {**summarize(reviewer.looks), "every_s": every_s, "retrain_nice": nice, "mark_share": mark_share}
    return done["result"], {**summary, "looks_detail": reviewer.looks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one task, few episodes, a short run")
    route = parser.add_mutually_exclusive_group(required=True)
    route.add_argument("--vla-out", help="bench/metaworld_vla.py's --out: its SmolVLA and results")
    route.add_argument("--flow-out", help="bench/metaworld.py's --out: its flow bases (one per seed)")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks among the base's (default pick-place-v3)")
    parser.add_argument("--episodes-per-kind", type=int, default=None, help="successes, and each kind of failure")
    parser.add_argument("--hold", type=int, default=10, help="steps a success is held past its first frame")
    parser.add_argument("--failure-noise", type=float, default=1.0, help="the expert's action noise in failures")
    parser.add_argument("--epochs", type=int, default=None, help="classifier epochs (20; quick 2)")
    parser.add_argument("--episodes", type=int, default=None, help="evaluation episodes (50; quick 5)")
    parser.add_argument("--rl-steps", type=int, default=None, help="RL env steps (10k; quick 300)")
    parser.add_argument(
        "--method", default="dsrl", choices=sorted(mwv.METHODS), help="bench/metaworld_vla.py's RL method (dsrl)"
    )
    parser.add_argument(
        "--review-every-s",
        type=float,
        default=0,
        help="seconds between the simulated person's looks at the run, who marks the classifier's mistakes and "
        "retrains it (0: nobody looks)",
    )
    parser.add_argument(
        "--retrain-nice",
        type=int,
        default=0,
        help="the reviewer's retrains' CPU niceness (0; `robo-rl reward retrain`'s own default 10 yields to a robot's "
        "control loops, and here the loop is the simulator on both cores: at 10 a retrain outlasted the run)",
    )
    parser.add_argument(
        "--mark-share",
        type=float,
        default=None,
        help="the retrains' mark_share: the share of each class's half of a batch drawn from its marks (default: "
        "drawn as any recorded frame)",
    )
    parser.add_argument(
        "--sim-result",
        type=Path,
        default=None,
        help=f"--flow-out: the result file of the simulator-reward runs (default {SIM_RESULT.name}; --quick none)",
    )
    parser.add_argument("--image-size", type=int, default=64, help="as bench/metaworld_vla.py was run")
    parser.add_argument("--horizon", type=int, default=150, help="as the base's bench was run")
    parser.add_argument("--demos", type=int, default=None, help="as the base's bench was run (10; quick 2)")
    parser.add_argument("--noise-std", type=float, default=0.3, help="as the base's bench was run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default=None)
    parser.add_argument("--reuse", action="store_true", help="keep a reward model already trained in the base's --out")
    args = parser.parse_args()
    q = args.quick
    args.route = "vla" if args.vla_out else "flow"
    args.sim_result = args.sim_result or (None if q else SIM_RESULT)
    if args.route == "flow" and args.method not in FLOW_METHOD:
        raise SystemExit(f"--method {args.method}: the flow baseline runs {', '.join(FLOW_METHOD)}")
    out = Path(args.vla_out or args.flow_out)
    # the env, camera and demonstrations the base was trained on (the base's bench's defaults)
    args.demos, args.out = args.demos or (2 if q else 10), str(out)
    args.tasks = args.tasks.split(",") if args.tasks else ["reach-v3" if q else "pick-place-v3"]
    args.episodes_per_kind = args.episodes_per_kind or (4 if q else 30)
    args.epochs = args.epochs or (2 if q else 20)
    args.episodes = args.episodes or (5 if q else 50)
    args.rl_steps = args.rl_steps or (300 if q else 10000)
    args.steps = args.rl_steps  # as bench/metaworld.py's run_rl reads it
    name = args.name or ("metaworld_reward_quick" if q else "metaworld_reward")
    keys = (
        "vla_out",
        "flow_out",
        "tasks",
        "method",
        "episodes_per_kind",
        "hold",
        "failure_noise",
        "epochs",
        "episodes",
        "rl_steps",
        "review_every_s",
        "retrain_nice",
        "mark_share",
        "seed",
    )
    m = args.method
    result: dict = {k: getattr(args, k) for k in keys} | {"partial": True, "per_task": {}}
    if args.route == "vla":
        result["pretrained_model"] = json.loads((out / "stages.json").read_text())["vla_training"]["pretrained_model"]

    def keep() -> None:
        write_result(name, result, quick=q, folder=RESULTS)

    for task in args.tasks:
        record = result["per_task"].setdefault(task, {})
        base = (vla_base if args.route == "vla" else flow_base)(args, task)
        record["base"] = base["sampled"]
        folder = out / "rewards" / task
        if args.reuse and (folder / "reward_report.json").is_file():
            record["classifier"] = json.loads((folder / "reward_report.json").read_text())
        else:
            record["classifier"] = reward_model(args, task, base["instruction"], folder)
            (folder / "reward_report.json").write_text(json.dumps(record["classifier"], indent=1))
        keep()
        print(f"{task}: classifier {record['classifier']['held_out_quality']}", flush=True)
        reward = ("reward=model", f"reward.model={folder}")
        tag = "_learned_reward" + ("_reviewed" if args.review_every_s > 0 else "")
        tag += f"_share{args.mark_share:g}" if args.review_every_s > 0 and args.mark_share is not None else ""
        if args.route == "vla":
            train = partial(mwv.run_rl, args, task, base["instruction"], base["model"], m, extra=reward, tag=tag)
            runs = out / "runs"
        else:
            # bench/metaworld.py's run of the same recipe, its actor and critics on the state beside the camera
            extra = (*camera(args), *mwv.STATE_ONLY, *reward)
            checkpoint, method = base["checkpoint"], FLOW_METHOD[m]
            runs = out / f"s{args.seed}" / "runs"
            train = partial(mw.run_rl, args, args.seed, task, base["instruction"], checkpoint, method, runs, extra, tag)
        ends = f"{tag}_{task}_s{args.seed}"  # the run folder's name's end
        run, review = reviewed(train, runs, ends, args.review_every_s, args.retrain_nice, args.mark_share)
        record[f"{m}_learned_reward"] = run
        if review is not None:
            record["review"] = review
        after = run["after"]["success_rate"]
        record["gain_points"] = round(100 * (after - base["sampled"]), 1)
        if base["mode"] is not None:  # the base's mode, where DSRL and residual_mode start
            record["base_mode"] = base["mode"]
            record["gain_points_over_mode"] = round(100 * (after - base["mode"]), 1)
        if base["sim"] is not None:
            record[f"{m}_sim_reward"] = base["sim"]
            record["ratio_to_sim_reward"] = round(after / max(base["sim"], 1e-9), 3)
        keep()
        print(f"{task}: {m} with the learned reward {after:.2f} ({record['gain_points']:+} points; sim reward "
              f"{base['sim']})", flush=True)  # fmt: skip
    result.pop("partial")
    keep()


if __name__ == "__main__":
    main()
