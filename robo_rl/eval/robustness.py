"""A suite's conditions against its nominal one: the change of success, Fisher's exact p, the smallest drop its
episodes could detect with 80% power and the verdict (robo_rl/eval/power.py), so that "robust to X" says when the
suite was too small to see a drop of the size asked about (`DROP`, 10 points)."""

from __future__ import annotations

from robo_rl.eval.power import comparison_power
from robo_rl.eval.report import fisher_exact_p

DROP = -0.10  # the robustness question: did this condition cost 10 points of success?
NOMINAL = "nominal"


def against_nominal(conditions: list[dict], drop: float = DROP) -> list[dict]:
    """One row per condition other than the nominal one (none without it): change, p, detectable drop, verdict."""
    nominal = next((c for c in conditions if c["name"] == NOMINAL), None)
    if nominal is None or not nominal["n"]:
        return []
    rows = []
    for c in conditions:
        if c is nominal or not c["n"]:
            continue
        p = fisher_exact_p(c["successes"], c["n"], nominal["successes"], nominal["n"])
        power = comparison_power(nominal, c, p, gain=drop)
        rows.append({"condition": c["name"], "change": c["success_rate"] - nominal["success_rate"], "p": p, **power})
    return rows


def against_nominal_line(rows: list[dict]) -> str:
    """The console's one line: how many conditions' changes were detected, and how many were underpowered."""
    if not rows:
        return ""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("detected", "underpowered")}
    return (
        f"against nominal (a drop of {abs(rows[0]['gain_asked']):.2f} asked): {counts['detected']} of {len(rows)} "
        f"changes detected, {counts['underpowered']} underpowered (report.md 'Against nominal')"
    )
