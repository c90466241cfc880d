"""Evaluation results per task instruction, where a run has more than one (a multi-task env samples one per
episode): episodes, success rate with its Wilson 95% interval, and mean return for each instruction."""

from __future__ import annotations

import numpy as np

from robo_rl.eval.wilson import wilson_interval


def per_instruction(results: list[dict]) -> dict[str, dict] | None:
    """{instruction: summary} over episode results that name their "instruction"; None where fewer than two
    instructions occur (the overall figures already are the task's)."""
    groups: dict[str, list[dict]] = {}
    for r in results:
        if r.get("instruction") is not None:
            groups.setdefault(r["instruction"], []).append(r)
    if len(groups) < 2:
        return None
    out = {}
    for instruction, rows in groups.items():
        k = sum(bool(r["success"]) for r in rows)
        low, high = wilson_interval(k, len(rows))
        out[instruction] = {
            "episodes": len(rows),
            "successes": k,
            "success_rate": k / len(rows),
            "success_ci95": [low, high],
            "mean_return": float(np.mean([r["return"] for r in rows])),
        }
    return out


def per_instruction_markdown(summary: dict[str, dict] | None) -> str:
    """The per-instruction table of a report ("" where there is none)."""
    if not summary:
        return ""
    text = "\n## Per task\n\n| instruction | episodes | success rate | Wilson 95% CI | mean return |\n"
    text += "|---|---|---|---|---|\n"
    for instruction, s in summary.items():
        low, high = s["success_ci95"]
        name = instruction.replace("|", "\\|")
        rate = f"{s['success_rate']:.2f} | [{low:.2f}, {high:.2f}]"
        text += f"| {name} | {s['episodes']} | {rate} | {s['mean_return']:.2f} |\n"
    return text
