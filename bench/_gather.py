"""`--gather`: the RL runs other `--out` folders made join one folder's records, for bench/metaworld.py (the flow
baseline: per seed, s<seed>/partial.json beside that seed's base) and bench/metaworld_vla.py (the SmolVLA: stages.json,
each task's `rl.s<seed>`). Runs side by side need folders of their own; joining them runs nothing, and a run that does
not belong (another base or VLA, a differing base evaluation, a run made twice) is refused by name, not averaged in."""

from __future__ import annotations

import json
from pathlib import Path


def made_in(run: dict, runs: Path) -> bool:
    """Whether an RL run's record points into `runs` (a folder started from a copy of another's records holds that
    folder's rows too: only its own are gathered from it)."""
    return Path(run["run"]).resolve().is_relative_to(runs.resolve())


def take_run(records: dict, method: str, run: dict, folder: Path, label: str) -> None:
    """Put `run`, gathered from `folder`, in `records[method]`; a different run already there is refused by name."""
    have = records.get(method)
    if have and Path(have["run"]).resolve() != Path(run["run"]).resolve():
        raise SystemExit(f"--gather {folder}: {label} {method} ran twice: {have['run']} and {run['run']}")
    records[method] = run


def gather_flow_runs(out: Path, folder: Path, seeds: list[int], methods: list[str]) -> list[str]:
    """Add the RL runs of `methods` that another `--out` folder made to `out`'s partial.json of each seed: only the
    runs made in `folder` (under its s<seed>/runs/), from the same base (its s<seed>/base is `out`'s) and the same base
    evaluations. Returns what it added; refuses a folder of another base, a differing evaluation, a run made twice."""
    added = []
    for seed in seeds:
        theirs = folder / f"s{seed}" / "partial.json"
        if not theirs.is_file():
            continue  # a folder of one seed's runs
        mine = out / f"s{seed}" / "partial.json"
        if not mine.is_file():
            raise SystemExit(f"--gather: {out} has no seed {seed} (no {mine}) to gather {folder}'s runs into")
        base, their_base = (f / f"s{seed}" / "base" / "base.json" for f in (out, folder))
        if not their_base.is_file() or their_base.resolve() != base.resolve():
            raise SystemExit(f"--gather {folder}: seed {seed}'s base is not {out}'s ({their_base})")
        tasks, other = json.loads(mine.read_text()), json.loads(theirs.read_text())
        for task, record in other.items():
            for method in methods:
                run = record.get(method)
                if not run or not made_in(run, folder / f"s{seed}" / "runs"):
                    continue
                if task not in tasks:
                    raise SystemExit(f"--gather {folder}: it ran {task}, not among {out}'s seed {seed} tasks")
                if tasks[task].get("base") != record.get("base"):
                    raise SystemExit(f"--gather {folder}: {task}'s base evaluation (seed {seed}) differs from {out}'s")
                take_run(tasks[task], method, run, folder, f"{task} s{seed}")
                added.append(f"{task} s{seed} {method}")
        mine.write_text(json.dumps(tasks, indent=1))
    return added


# what fingerprints a base across machines and sittings: BC from the same cached demonstrations and seed is
# bit-reproducible on the CPU (a fresh machine's rebuilt bases gave the same validation loss to the last digit and
# the same 50-episode evaluations, 2026-12-02), and a different base does not give these
BASE_PRINT = ("recipe", "val_loss", "best_epoch", "train_transitions", "updates")
EVAL_PRINT = ("episodes", "successes", "mean_length")


def same_evaluation(a: dict, b: dict) -> bool:
    """Whether two base evaluations ({sampled, zero_noise}) saw the same episodes (wall times aside)."""
    return a.keys() == b.keys() and all(a[m].get(k) == b[m].get(k) for m in a for k in EVAL_PRINT)


def gather_flow_results(out: Path, result: Path, seeds: list[int], methods: list[str]) -> list[str]:
    """Add the RL runs of `methods` that a bench/metaworld.py result file recorded (an earlier sitting's, whose run
    folders are gone) to `out`'s partial.json of each seed: only from the same base (its training's fingerprint and
    every task's base evaluation the same as `out`'s), each run marked with the file it came from."""
    try:
        record = json.loads(result.read_text())
        detail = {int(s["seed"]): s for s in record["seeds_detail"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--gather {result}: not a bench/metaworld.py result file ({e})") from None
    added = []
    for seed in seeds:
        if seed not in detail:
            continue
        mine = out / f"s{seed}" / "partial.json"
        if not mine.is_file():
            raise SystemExit(f"--gather: {out} has no seed {seed} (no {mine}) to gather {result}'s runs into")
        base = json.loads((out / f"s{seed}" / "base" / "base.json").read_text())
        theirs = detail[seed]
        differ = [k for k in BASE_PRINT if base.get(k) != theirs["base_training"].get(k)]
        if differ:
            raise SystemExit(f"--gather {result}: seed {seed}'s base is not {out}'s (its {', '.join(differ)} differ)")
        tasks = json.loads(mine.read_text())
        for task, other in theirs["tasks"].items():
            for method in methods:
                run = other.get(method)
                if not run:
                    continue
                if task not in tasks:
                    raise SystemExit(f"--gather {result}: it ran {task}, not among {out}'s seed {seed} tasks")
                if not same_evaluation(tasks[task]["base"], other["base"]):
                    raise SystemExit(f"--gather {result}: {task}'s base evaluation (seed {seed}) differs from {out}'s")
                take_run(tasks[task], method, {**run, "gathered_from": result.name}, result, f"{task} s{seed}")
                added.append(f"{task} s{seed} {method}")
        mine.write_text(json.dumps(tasks, indent=1))
    return added


def gather_vla_runs(per_task: dict, folder: Path, methods: list[str], model: str) -> list[str]:
    """Add the RL runs of `methods` that another `--out` folder made from the same SmolVLA to `per_task` (their
    `rl.s<seed>`): runs side by side need folders of their own. Only the runs made in `folder` (under its runs/): a
    folder started from a copy of this one's stages.json holds this one's rows too. Returns what it added."""
    if not (folder / "stages.json").is_file():
        raise SystemExit(f"--gather {folder}: no stages.json there (not a bench/metaworld_vla.py --out folder)")
    other = json.loads((folder / "stages.json").read_text())
    theirs = other.get("vla_training", {}).get("pretrained_model", "")
    if Path(theirs).resolve() != Path(model).resolve():
        raise SystemExit(f"--gather {folder}: its SmolVLA is {theirs}, not {model}")
    added = []
    for task, record in other.get("per_task", {}).items():
        for seed, runs in record.get("rl", {}).items():
            for method, run in runs.items():
                if method not in methods or not made_in(run, folder / "runs"):
                    continue
                if task not in per_task:
                    raise SystemExit(f"--gather {folder}: it ran {task}, not among --tasks here")
                mine = per_task[task]
                if mine["base"]["success_rate"] != record["base"]["success_rate"]:
                    raise SystemExit(f"--gather {folder}: {task}'s base evaluation differs from this folder's")
                take_run(mine.setdefault("rl", {}).setdefault(seed, {}), method, run, folder, f"{task} {seed}")
                added.append(f"{task} {seed} {method}")
    return added


def gather_vla_results(per_task: dict, result: Path, methods: list[str]) -> list[str]:
    """Add the RL runs of `methods` that a bench/metaworld_vla.py result file recorded (an earlier sitting's, whose
    SmolVLA and run folders are gone) to `per_task`: only where that file's SmolVLA evaluated as this one does on
    every task it holds, the sampled and the mode's episodes alike (a SmolVLA rebuilt from the same demonstrations and
    seed on the CPU gives the same; another does not). Each run is marked with the file it came from."""
    try:
        theirs = json.loads(result.read_text())["per_task"]
        bases = {t: (r["base"], r.get("base_zero_noise")) for t, r in theirs.items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--gather {result}: not a bench/metaworld_vla.py result file ({e})") from None
    for task, (sampled, mode) in bases.items():
        if task not in per_task:
            raise SystemExit(f"--gather {result}: it holds {task}, not among --tasks here")
        pairs = [(per_task[task]["base"], sampled)] + ([(per_task[task]["base_zero_noise"], mode)] if mode else [])
        if not all(mine.get(k) == other.get(k) for mine, other in pairs for k in EVAL_PRINT):
            raise SystemExit(f"--gather {result}: {task}'s SmolVLA evaluates differently from this one's (another VLA)")
    added = []
    for task, record in theirs.items():
        # a file written before seeds were kept has seed 0's methods beside the base
        seeds = dict(record.get("rl", {}))
        old = {m: r for m, r in record.items() if isinstance(r, dict) and "after" in r}
        if old:
            seeds["s0"] = {**old, **seeds.get("s0", {})}
        for seed, runs in seeds.items():
            for method, run in runs.items():
                if method in methods:
                    mine = per_task[task].setdefault("rl", {}).setdefault(seed, {})
                    take_run(mine, method, {**run, "gathered_from": result.name}, result, f"{task} {seed}")
                    added.append(f"{task} {seed} {method}")
    return added
