"""`robo-rl reward`: train a reward model from recorded episodes, and measure its quality before a robot-hour is spent.

    robo-rl reward train kind=classifier|progress data=<episodes> out=<folder> [cameras=front,wrist]
                         [instruction="..."] [other_instructions="...;..."] [epochs=20] [steps=3000] [seed=0]
                         [backbone=small|siglip] [backbone_path=<hub id or folder>] [gate_quantile=0.99|none]
    robo-rl reward eval model=<folder> data=<episodes> [wrong_instruction="..."] [out=<folder>]
    robo-rl reward relabel model=<folder> data=<episodes> out=<new store> [instruction="..."]
    robo-rl reward retrain <run> [data=<episodes>] [epochs=10] [seed=0] [nice=10] [threads=1] [mark_share=none]

`data` is anything `robo-rl data` reads (a replay store or run folder, a LeRobot dataset, robomimic, a demonstration
cache): the success frames of successful episodes are the classifier's positives, earlier frames and failed
episodes its negatives; the progress critic learns from the successful ones forward and reversed, stalled clips,
failures and mismatched instructions. The classifier keeps its training success frames' features and damps the score
of a frame unlike all of them (`gate_quantile` of the held-out success frames pass untouched; none: no gate), so a
policy cannot farm it with states it never saw labelled. Training writes the model folder and `train_report.json`;
evaluation writes `report.md`, `report.json` and `report.png` (the classifier's AUROC and false positives per frame
and per episode; the critic's value-order correlation forward and reversed, a wrong instruction against the right
one, stalled clips).
Each figure with a bar says PASS or FAIL beside it, and `eval` exits with status 3 when one misses its bar (0: all
met; 2: a usage error), so a script can gate on it.
`relabel` scores every episode with another model and writes a new store whose rewards are that model's (shaped as
in training; the episodes end where they ended), the env's own reward kept in `extra/reward_env`: a run's data,
reused with a better reward (`demos.path=<new store>`).
`retrain` fits the run's classifier again (same architecture) on its data (`data`, else what the current model was
trained on, else the run's own episodes) plus the frames people marked on the page (a false or a missed success), and
publishes it as the run's next version (<run>/reward/models/v<N>): the running actors swap it in between two steps,
and each record keeps the version that scored it (`extra/reward_model_version`). A retrain beside a running robot is
background work: it runs at CPU priority `nice` (10: below the actors, whose control loops keep the cores; 0 to keep
full priority) on `threads` CPU threads (1: it never holds more than one core; torch would take them all), and its
report records both. `mark_share` (0-1, exclusive) draws that share of each class's half of every batch from the marks
of that class: a few marks beside thousands of recorded frames are otherwise drawn as rarely as any one of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from robo_rl.commands.common import MISSED_BARS, at_least_nice
from robo_rl.errors import UserError

USAGE = __doc__.split("\n\n", 2)[1]


class RewardUsageError(UserError, ValueError):
    pass


def key_value_options(args: list[str], allowed: tuple[str, ...], usage: str = USAGE) -> dict[str, str]:
    """`key=value` arguments as a dict; any other argument is a RewardUsageError showing `usage`."""
    out = {}
    for a in args:
        key, eq, value = a.partition("=")
        if not eq or key not in allowed:
            raise RewardUsageError(f"'{a}' is not one of {', '.join(f'{k}=' for k in allowed)}\n{usage}")
        out[key] = value
    return out


def _episodes(path: str):
    from robo_rl.data.datasets.io import load_some_episodes

    try:
        return load_some_episodes(path, progress=False)
    except ValueError as e:
        raise RewardUsageError(f"data={e}") from None


def _cameras(episodes, given: str | None) -> tuple[str, ...]:
    have = sorted(k[6:] for k in episodes[0].records if k.startswith("image/"))
    if not have:
        raise RewardUsageError("these episodes hold no camera images: a reward model scores frames")
    cams = tuple(given.split(",")) if given else tuple(have)
    missing = [c for c in cams if c not in have]
    if missing:
        raise RewardUsageError(f"cameras {missing} are not in the data (it has {have})")
    return cams


def cmd_reward(args: list[str]) -> int:
    commands = {"train": _train, "eval": _eval, "relabel": _relabel, "retrain": _retrain}
    if not args or args[0] not in commands:
        raise RewardUsageError(USAGE)
    return commands[args[0]](args[1:])


def _retrain(args: list[str]) -> int:
    from robo_rl.rewards.live import mark_files, retrain

    if not args or "=" in args[0]:
        raise RewardUsageError(f"reward retrain needs the run folder first\n{USAGE}")
    run, o = Path(args[0]), key_value_options(args[1:], ("data", "epochs", "seed", "nice", "threads", "mark_share"))
    if not run.is_dir():
        raise RewardUsageError(f"{run} is not a folder: reward retrain <run folder>")
    try:
        epochs, seed, nice = int(o.get("epochs", 10)), int(o.get("seed", 0)), int(o.get("nice", 10))
        threads = int(o.get("threads", 1))
    except ValueError:
        raise RewardUsageError("epochs=, seed=, nice= and threads= take whole numbers") from None
    share = o.get("mark_share", "none")
    try:
        mark_share = None if share.lower() == "none" else float(share)
    except ValueError:
        raise RewardUsageError(f"mark_share={share}: a share between 0 and 1, or none") from None
    if mark_share is not None and not 0 < mark_share < 1:
        raise RewardUsageError(f"mark_share={share}: a share between 0 and 1 (exclusive), or none")
    if not 0 <= nice <= 19:
        raise RewardUsageError(f"nice={nice}: a retrain's CPU niceness is 0 (full priority) to 19 (the lowest)")
    if threads < 1:
        raise RewardUsageError(f"threads={threads}: a retrain needs at least one CPU thread")
    import torch

    at_least_nice(nice)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        version, folder, report = retrain(run, o.get("data"), epochs=epochs, seed=seed, mark_share=mark_share)
    finally:  # called in-process (a test, a script): the caller's threads are its own
        torch.set_num_threads(before)
    print(f"reward model v{version} ({len(mark_files(run))} marks, data {report['data']}) saved to {folder}")
    print("running actors of this run swap it in within seconds, between two steps")
    return 0


def _relabel(args: list[str]) -> int:
    from robo_rl.data.datasets import Episode
    from robo_rl.data.datasets.io import save_store
    from robo_rl.rewards.base import Task, load_model, shaper_settings
    from robo_rl.rewards.relabel import relabel_records
    from robo_rl.rewards.shaper import RewardShaper

    o = key_value_options(args, ("model", "data", "out", "instruction"))
    for key in ("model", "data", "out"):
        if key not in o:
            raise RewardUsageError(f"reward relabel needs {key}=\n{USAGE}")
    model = load_model(o["model"])
    task = Task(o.get("instruction", model.instructions[0] if model.instructions else ""))
    shaper = RewardShaper({**shaper_settings(None, model), "terminate_on_success": False})
    out = [
        Episode(relabel_records(model, shaper, task, e.records), e.partition, e.source) for e in _episodes(o["data"])
    ]
    save_store(out, o["out"], partition=out[0].partition, progress=False)
    print(f"{len(out)} episodes relabelled by {o['model']} into {o['out']} (the env's reward in extra/reward_env)")
    return 0


def _train(args: list[str]) -> int:
    o = key_value_options(
        args,
        (
            "kind",
            "data",
            "out",
            "cameras",
            "instruction",
            "other_instructions",
            "epochs",
            "steps",
            "seed",
            "backbone",
            "backbone_path",
            "gate_quantile",
        ),
    )
    for key in ("kind", "data", "out"):
        if key not in o:
            raise RewardUsageError(f"reward train needs {key}=\n{USAGE}")
    episodes = _episodes(o["data"])
    cams = _cameras(episodes, o.get("cameras"))
    instruction = o.get("instruction", "")
    if o["kind"] == "classifier":
        from robo_rl.rewards.classifier_fit import train_classifier

        quantile = o.get("gate_quantile", "0.99")
        try:
            quantile = None if quantile.lower() in ("none", "null") else float(quantile)
        except ValueError:
            raise RewardUsageError(f"gate_quantile={quantile}: a number in (0, 1] or none") from None
        model, report = train_classifier(
            episodes, cams, epochs=int(o.get("epochs", 20)), seed=int(o.get("seed", 0)), gate_quantile=quantile
        )
        model.instructions = (instruction,) if instruction else ()
    elif o["kind"] == "progress":
        from robo_rl.rewards.progress import train_progress_critic

        kwargs = {k: o[k] for k in ("backbone", "backbone_path") if k in o}
        others = tuple(t for t in o.get("other_instructions", "").split(";") if t)
        model = train_progress_critic(
            episodes,
            cams,
            [instruction] * len(episodes),
            other_instructions=others,
            steps=int(o.get("steps", 3000)),
            seed=int(o.get("seed", 0)),
            **kwargs,
        )
        report = {"episodes": len(episodes), "successful": sum(e.success for e in episodes)}
    else:
        raise RewardUsageError(f"kind={o['kind']}: classifier or progress")
    out = model.save(o["out"])
    data = Path(o["data"])
    report["data"] = str(data.resolve()) if data.exists() else o["data"]  # what `reward retrain` fits on next
    (out / "train_report.json").write_text(json.dumps(report, indent=1, default=float))
    print(f"reward model ({o['kind']}, cameras {list(cams)}) saved to {out}")
    print(json.dumps({k: v for k, v in report.items() if not isinstance(v, list | dict)}, default=float))
    return 0


def _eval(args: list[str]) -> int:
    from robo_rl.rewards.base import load_model

    o = key_value_options(args, ("model", "data", "wrong_instruction", "out"))
    for key in ("model", "data"):
        if key not in o:
            raise RewardUsageError(f"reward eval needs {key}=\n{USAGE}")
    model = load_model(o["model"])
    episodes = _episodes(o["data"])
    instruction = model.instructions[0] if model.instructions else ""
    from robo_rl.rewards.classifier import SuccessClassifier
    from robo_rl.rewards.classifier_fit import evaluate_classifier

    if isinstance(model, SuccessClassifier):
        report = evaluate_classifier(model, episodes)
        bars = [_bar("frame AUROC", report["auroc"], "≥", 0.98)]
        lines = [
            f"- frame AUROC **{report['auroc']:.3f}** {_verdict(bars[0])}",
            f"- at the threshold {report['threshold']:.2f}: frame false-positive rate {report['frame_fpr']:.3f}, "
            f"true-positive rate {report['frame_tpr']:.3f}",
            f"- episodes with a false success (it would end them early): **{report['episode_fpr']:.3f}**",
        ]
    else:
        from robo_rl.rewards.progress import evaluate_progress

        wrong = o.get("wrong_instruction", "do something else entirely")
        report = evaluate_progress(model, episodes, [instruction] * len(episodes), wrong)
        bars = [
            _bar("value-order correlation", report["voc"], "≥", 0.9),
            _bar("value-order correlation reversed", report["voc_reversed"], "≤", -0.8),
        ]
        lines = [
            f"- value-order correlation on successful episodes **{report['voc']:.3f}** {_verdict(bars[0])}",
            f"- the same episodes reversed **{report['voc_reversed']:.3f}** {_verdict(bars[1])}",
            f"- final progress with the right instruction {report['final_progress_right']:.3f}, with "
            f"'{wrong}' {report['final_progress_wrong']:.3f}",
            f"- stalled clips: mean |progress| {report['stalled_abs_delta']:.3f} (near 0 is best; no bar)",
            f"- done head on every frame the records flag: AUROC {report['done_auroc']:.3f}, at 0.5 "
            f"true-positive rate {report['done_tpr_at_0.5']:.3f}, false-positive rate "
            f"{report['done_fpr_at_0.5']:.3f}",
        ]
    missed = [b for b in bars if not b["passed"]]
    lines.append(
        f"- verdict: FAIL: {len(missed)} of {len(bars)} bars missed ("
        + "; ".join(f"{b['name']} {b['value']:.3f}, wanted {b['wanted']}" for b in missed)
        + ")"
        if missed
        else f"- verdict: PASS: all {len(bars)} bars met"
    )
    report.update(bars=bars, passed=not missed)
    out = Path(o.get("out") or Path(o["model"]) / "eval")
    out.mkdir(parents=True, exist_ok=True)
    from robo_rl.rewards.plot import plot_scores

    plot_scores(model, episodes, instruction, out / "report.png")
    (out / "report.json").write_text(json.dumps(report, indent=1, default=float))
    head = f"# {model.kind} reward model {o['model']} on {o['data']}\n\n"
    tail = f"\n\n{len(episodes)} episodes.\n\n![scores along episodes](report.png)\n"
    (out / "report.md").write_text(head + "\n".join(lines) + tail)
    print("\n".join(lines))
    print(f"report: {out / 'report.md'}")
    return MISSED_BARS if missed else 0


def _bar(name: str, value: float, op: str, bound: float) -> dict:
    """One figure against its bar; a NaN (nothing to measure it on) misses it."""
    passed = bool(value >= bound if op == "≥" else value <= bound)
    return {"name": name, "value": float(value), "wanted": f"{op} {bound:g}".replace("-", "−"), "passed": passed}


def _verdict(bar: dict) -> str:
    return f"(wanted {bar['wanted']}): {'PASS' if bar['passed'] else 'FAIL'}"
