"""`robo-rl eval compare` of recipes run on several seeds (and tasks): the runs grouped into a recipes x seeds x tasks
matrix of success rates, compared with rliable's aggregates (robo_rl/eval/aggregate.py): IQM, mean and optimality
gap per recipe, and the probability that each recipe improves on the first, with 95% stratified bootstrap intervals.

The grouped forms (each run a run folder; a folder given with `by=recipe` is searched for run folders):

    robo-rl eval compare residual=<run>,<run>,<run> rlpd=<run>,<run>,<run> [suite=<name>] [reps=2000] [out=<folder>]
    robo-rl eval compare by=recipe <run or folder> ... [suite=<name>] [reps=2000] [out=<folder>]

`by=recipe` names each run's recipe from its config: the run's `name` (an experiment's own) without the `_s<seed>`
that bench/learning.py adds; its seed is the config's `seed`. A run's scores are the success rates of its suite
report (<run>/eval/<suite>/report.json, one task per condition) or, without `suite=`, of its training report
(<run>/eval/report.json); the task is the run's env (robo_rl.runs.task_label) and the condition."""

from __future__ import annotations

import json
import re
from pathlib import Path

from robo_rl.errors import UserError

OPTIONS = ("suite", "eval.suite", "out", "reps", "by")
STEM = "compare_recipes"


class GroupingError(UserError, ValueError):
    """Runs that do not make a recipes x seeds x tasks matrix (a missing report, a task one seed lacks); the text
    names the run."""


def _recipe_argument(arg: str) -> bool:
    key, sep, value = arg.partition("=")
    return bool(sep) and key not in OPTIONS and "." not in key and all(Path(p).is_dir() for p in value.split(",") if p)


def is_grouped(overrides: list[str]) -> bool:
    """`eval compare` in a grouped form: a `<recipe>=<run>,<run>,...` argument or `by=recipe`."""
    if not overrides or overrides[0] != "compare":
        return False
    return any(a == "by=recipe" or _recipe_argument(a) for a in overrides[1:])


def _run_folders(path: Path) -> list[Path]:
    """`path` if it is a run folder (config.yaml and eval/), else the run folders under it."""
    if (path / "config.yaml").is_file():
        return [path]
    return sorted(p.parent for p in path.rglob("config.yaml") if (p.parent / "eval").is_dir())


def _config(run: Path) -> dict:
    import yaml

    path = run / "config.yaml"
    if not path.is_file():
        raise GroupingError(f"{run}: not a run folder (it has no config.yaml)")
    return yaml.safe_load(path.read_text()) or {}


def recipe_of(config: dict) -> str:
    """The recipe a run's config names: its `name` without bench/learning.py's `_s<seed>`."""
    name = str(config.get("name", "run"))
    return re.sub(rf"_s{config.get('seed', 0)}$", "", name)


def run_scores(run: Path, suite: str | None) -> tuple[int, dict[str, tuple[float, int]]]:
    """A run's seed and its {task: (success rate, episodes)} from its suite or training report."""
    from robo_rl.runs import task_label  # numpy: not on `robo-rl eval`'s start-up path

    config = _config(run)
    env = task_label(config.get("env") or {})
    path = run / "eval" / suite / "report.json" if suite else run / "eval" / "report.json"
    if not path.is_file():
        fix = f"robo-rl eval checkpoint={run} suite={suite}" if suite else "give suite=<name> to use suite reports"
        raise GroupingError(f"{run}: no {path.relative_to(run)} to score it ({fix})")
    report = json.loads(path.read_text())
    if suite:
        scores = {f"{env}/{c['name']}": (float(c["success_rate"]), int(c["n"])) for c in report["conditions"]}
    else:
        scores = {env: (float(report["success_rate"]), int(report["episodes"]))}
    return int(config.get("seed", 0)), scores


def group_runs(args: list[str]) -> tuple[dict[str, list[Path]], dict[str, str]]:
    """({recipe: run folders}, options) from the grouped command line."""
    options = {k: v for k, _, v in (a.partition("=") for a in args if "=" in a and not _recipe_argument(a))}
    for key in sorted(set(options) - set(OPTIONS)):
        missing = [p for p in options[key].split(",") if not Path(p).is_dir()]
        raise GroupingError(
            f"compare of recipes: {key}={options[key]} is neither an option ({', '.join(OPTIONS)}) nor a recipe's "
            f"run folders (not a folder: {', '.join(missing) or options[key]})"
        )
    if options.get("by", "recipe") != "recipe":
        raise GroupingError(f"compare of recipes: by={options['by']}: runs are grouped by=recipe")
    groups: dict[str, list[Path]] = {}
    for arg in args:
        if _recipe_argument(arg):
            recipe, _, value = arg.partition("=")
            groups.setdefault(recipe, []).extend(Path(p) for p in value.split(",") if p)
    if options.get("by") == "recipe":
        for arg in (a for a in args if "=" not in a):
            runs = _run_folders(Path(arg))
            if not runs:
                raise GroupingError(f"{arg}: neither a run folder nor a folder holding run folders")
            for run in runs:
                groups.setdefault(recipe_of(_config(run)), []).append(run)
    if len(groups) < 2:
        raise GroupingError(
            f"compare of recipes needs two recipes or more, found {len(groups)} ({', '.join(groups) or 'none'}): "
            "robo-rl eval compare <recipe>=<run>,<run>,... <recipe>=<run>,... or by=recipe <runs or folders>"
        )
    return groups, options


def score_table(groups: dict[str, list[Path]], suite: str | None) -> dict[str, dict]:
    """Per recipe: its seeds, runs, and seeds x tasks success rates and episode counts; every seed of every recipe
    must have every task once."""
    cells: dict[str, dict[int, dict[str, tuple[float, int, Path]]]] = {}
    for recipe, runs in groups.items():
        for run in runs:
            seed, scores = run_scores(run, suite)
            row = cells.setdefault(recipe, {}).setdefault(seed, {})
            for task, (rate, episodes) in scores.items():
                if task in row:
                    raise GroupingError(f"{recipe}, seed {seed}, task {task}: scored by both {row[task][2]} and {run}")
                row[task] = (rate, episodes, run)
    tasks = sorted({t for rows in cells.values() for row in rows.values() for t in row})
    table = {}
    for recipe, rows in cells.items():
        for seed, row in rows.items():
            if missing := [t for t in tasks if t not in row]:
                raise GroupingError(f"{recipe}, seed {seed}: no score for task(s) {', '.join(missing)}")
        seeds = sorted(rows)
        table[recipe] = {
            "seeds": seeds,
            "runs": sorted({str(rows[s][t][2]) for s in seeds for t in tasks}),
            "tasks": tasks,
            "scores": [[rows[s][t][0] for t in tasks] for s in seeds],
            "episodes": [[rows[s][t][1] for t in tasks] for s in seeds],
        }
    return table


def compare_recipes(table: dict[str, dict], reps: int, seed: int = 0) -> dict:
    """rliable's aggregates per recipe and the probability that each recipe improves on the first."""
    from robo_rl.eval.aggregate import CONFIDENCE, aggregate, probability_of_improvement

    scores = {recipe: entry["scores"] for recipe, entry in table.items()}
    estimates = aggregate(scores, reps=reps, seed=seed)
    first, *others = list(table)
    improvement = []
    for recipe in others:
        p = probability_of_improvement(scores[recipe], scores[first], reps=reps, seed=seed)
        verdict = f"{recipe} better" if p.low > 0.5 else f"{first} better" if p.high < 0.5 else "not resolved"
        improvement.append({"x": recipe, "y": first, "probability": p.as_dict(), "reading": verdict})
    return {
        "tasks": next(iter(table.values()))["tasks"],
        "method": f"rliable: stratified bootstrap over runs within each task, {reps} repetitions, seed {seed}, "
        f"{CONFIDENCE:.0%} percentile intervals",
        "recipes": [
            {"name": r, **entry, **{k: e.as_dict() for k, e in estimates[r].items()}} for r, entry in table.items()
        ],
        "improvement": improvement,
    }


def _cell(e: dict) -> str:
    return f"{e['point']:.2f} [{e['low']:.2f}, {e['high']:.2f}]"


def comparison_markdown(comparison: dict) -> str:
    source = f"suite {comparison['suite']}" if comparison.get("suite") else "training reports"
    text = f"# Comparison of recipes: {source}\n\n"
    text += f"tasks ({len(comparison['tasks'])}): {', '.join(comparison['tasks'])}  \n"
    episodes = [n for r in comparison["recipes"] for row in r["episodes"] for n in row]
    counts = f"{min(episodes)}" if min(episodes) == max(episodes) else f"{min(episodes)}-{max(episodes)}"
    text += f"score: success rate per run and task, from {counts} episodes each  \n"
    text += f"intervals: {comparison['method']}\n\n"
    text += "| recipe | seeds | IQM | mean | optimality gap |\n|---|---|---|---|---|\n"
    for r in comparison["recipes"]:
        seeds = ", ".join(map(str, r["seeds"]))
        text += f"| {r['name']} | {seeds} | {_cell(r['iqm'])} | {_cell(r['mean'])} | {_cell(r['optimality_gap'])} |\n"
    text += "\n| probability of improvement | P(X > Y) [95% CI] | reading |\n|---|---|---|\n"
    for p in comparison["improvement"]:
        text += f"| {p['x']} over {p['y']} | {_cell(p['probability'])} | {p['reading']} |\n"
    if any(len(r["seeds"]) < 2 for r in comparison["recipes"]):
        text += "\nA recipe with one seed has no spread across seeds: its intervals are not intervals.\n"
    if comparison.get("profile"):
        text += f"\n![performance profiles]({comparison['profile']})\n"
    return text


def compare_grouped(kind: str, args: list[str]) -> int:
    """`robo-rl eval compare` in a grouped form: prints the comparison and writes compare_recipes_<suite>.md,
    .json and .png (performance profiles) to out= (default: the folder holding every run)."""
    import os

    from robo_rl.eval.aggregate import REPORT_REPS, plot_performance_profiles

    groups, options = group_runs(args)
    suite = options.get("suite") or options.get("eval.suite")
    try:
        reps = int(options.get("reps", REPORT_REPS))
    except ValueError:
        raise GroupingError(f"reps={options['reps']}: the bootstrap repetitions are a whole number") from None
    if reps < 1:
        raise GroupingError(f"reps={reps}: the bootstrap needs one repetition or more")
    table = score_table(groups, suite)
    comparison = {"suite": suite, **compare_recipes(table, reps)}
    runs = [str(Path(r).resolve()) for entry in table.values() for r in entry["runs"]]
    out = Path(options["out"]) if options.get("out") else Path(os.path.commonpath(runs))
    stem = f"{STEM}_{suite or 'training'}"
    profile = {recipe: entry["scores"] for recipe, entry in table.items()}
    title = f"{kind} recipes: " + (f"suite {suite}" if suite else "training reports")
    plot_performance_profiles(profile, out / f"{stem}.png", reps=reps, title=title)
    comparison["profile"] = f"{stem}.png"
    (out / f"{stem}.json").write_text(json.dumps(comparison, indent=2))
    (out / f"{stem}.md").write_text(comparison_markdown(comparison))
    print(comparison_markdown(comparison), end="")
    print(f"\nwritten: {out / f'{stem}.md'}, .json and .png")
    return 0
