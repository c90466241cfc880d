"""What `robo-rl eval compare` and `eval sim_vs_real` compare: suite reports given as files or folders, their short
labels, and a run folder's sim and real reports of one suite."""

from __future__ import annotations

import json
from pathlib import Path

from robo_rl.eval.conditions import SuiteError


def read_report(arg: str) -> dict | None:
    """A report.json given as itself or by its folder (None: not a report, a run or checkpoint to evaluate)."""
    path = Path(arg)
    if path.is_dir() and (path / "report.json").exists() and not (path / "checkpoints").is_dir():
        path = path / "report.json"
    if path.is_file() and path.suffix == ".json":
        try:
            report = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise SuiteError(f"{path}: not a suite report ({e})") from None
        if not isinstance(report, dict) or "conditions" not in report or "suite" not in report:
            raise SuiteError(f"{path}: not a suite report (robo-rl eval checkpoint=... suite=... writes one)")
        report.setdefault("report_dir", str(path.parent))
        return report
    return None


def source_labels(args: list[str]) -> list[str]:
    """A short name per source: the run folder's (a report at <run>/eval/<suite>/report.json too)."""
    labels = []
    for arg in args:
        p = Path(arg)
        if p.is_dir() and (p / "report.json").exists() and not (p / "checkpoints").is_dir():
            p = p / "report.json"
        if p.suffix == ".json":
            name = p.parents[2].name if p.parent.parent.name == "eval" else p.parent.name
        elif p.suffix == ".pt":
            name = p.parents[1].name if p.parent.name == "checkpoints" else p.stem
        else:
            name = p.name
        label, k = name or arg, 2
        while label in labels:
            label, k = f"{name}_{k}", k + 1
        labels.append(label)
    return labels


def sim_vs_real_sources(positional: list[str], suite: str | None, out: str | None):
    """(sources, labels, out folder): a run folder's <suite>/ and <suite>_real/ reports, or two reports given."""
    if len(positional) == 2:
        return positional, ["sim", "real"], out
    if len(positional) != 1:
        raise SuiteError(
            "usage: robo-rl eval sim_vs_real <run> [suite=<name>] | sim_vs_real <sim report> "
            "<real report> [out=<folder>]"
        )
    eval_dir = Path(positional[0]) / "eval"
    pairs = sorted(
        p.name[: -len("_real")]
        for p in eval_dir.glob("*_real")
        if (p / "report.json").exists() and (eval_dir / p.name[: -len("_real")] / "report.json").exists()
    )
    if suite is None and len(pairs) == 1:
        suite = pairs[0]
    if suite is None or suite not in pairs:
        raise SuiteError(
            f"sim_vs_real: {eval_dir} needs <suite>/report.json (sim) and <suite>_real/report.json "
            f"(a real robot's) for the same suite; found pairs: {', '.join(pairs) or 'none'}"
            + ("" if suite is None else f" (asked: {suite})")
        )
    sources = [str(eval_dir / suite / "report.json"), str(eval_dir / f"{suite}_real" / "report.json")]
    return sources, ["sim", "real"], out or str(eval_dir)
