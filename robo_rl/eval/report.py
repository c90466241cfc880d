"""The reports of evaluation suites: a suite's report (markdown, JSON, and HTML with an SVG bar chart of success with
Wilson 95% intervals), and the comparison of several policies' reports with Fisher's exact test per condition.
The suites themselves run in robo_rl/eval/suite.py."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from robo_rl.eval.behaviour import farmed_warning
from robo_rl.eval.failures import GENERIC
from robo_rl.eval.power import GAIN, POWER, UNPAIRED_METHOD, comparison_power, episodes_per_arm
from robo_rl.eval.throughput import CLOCKS, THROUGHPUT_HEAD, clock_label, throughput_cells, throughput_markdown
from robo_rl.eval.unseen import unseen_note

FAILURE_MODES = tuple(m.name for m in GENERIC)  # a task without its own list (robo_rl/eval/failures.py)
SIGNIFICANCE_LEVEL = 0.05  # two-sided, per condition
TEST_NAME = "Fisher's exact test, two-sided"


def fisher_exact_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p-value of Fisher's exact test on successes k1/n1 vs k2/n2: with the margins fixed, the probability
    of a table at most as likely as the one seen."""
    k, n = k1 + k2, n1 + n2
    if n1 == 0 or n2 == 0:
        return 1.0
    tables = math.comb(n, k)
    prob = [math.comb(n1, x) * math.comb(n2, k - x) / tables for x in range(max(0, k - n2), min(k, n1) + 1)]
    seen = math.comb(n1, k1) * math.comb(n2, k - k1) / tables
    return min(1.0, sum(p for p in prob if p <= seen * (1 + 1e-9)))


def write_suite_report(out_dir: Path, report: dict) -> Path:
    """report.json, report.md and report.html (self-contained but for the clips, linked beside it)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(_markdown(report))
    (out / "report.html").write_text(_html(report))
    return out / "report.md"


def header_lines(report: dict) -> list[str]:
    lines = [
        f"checkpoint: `{report['checkpoint']}` (after {report['env_steps']} env steps)",
        f"conditions: {len(report['conditions'])}, episodes each: {report['episodes']}, seeds {report['seed']} .. "
        f"{report['seed'] + report['episodes'] - 1} (the same for every condition), success scored by "
        f"{'a person' if report['score'] == 'human' else 'the env'}"
        f"{', on a real robot' if report['real_robot'] else ''}",
    ]
    cameras = next((c["cameras"] for c in report["conditions"] if c.get("cameras") is not None), None)
    if cameras is not None:
        lines.append(
            f"the policy observes: {'the state and cameras ' + ', '.join(cameras) if cameras else 'the state only'}"
        )
    blind = [c["name"] for c in report["conditions"] if c.get("seen") == "none"]
    if blind:
        lines.append(
            f"not seen by this policy (state-only): {', '.join(blind)} change only camera images, so its "
            "observations there are nominal; they are marked and left out of the chart"
        )
    if report.get("stopped"):
        lines.append(f"**stopped early: {report['stopped']}** (the episodes run so far are reported)")
    lines += [w for c in report["conditions"] if (w := farmed_warning(c.get("farmed_reward"), c["name"]))]
    return lines


def report_modes(report: dict) -> list[str]:
    """The failure modes the conditions' tasks name, in their lists' order (a report's columns)."""
    return list(dict.fromkeys(m for c in report["conditions"] for m in c["failure_modes"]))


def modes_note(report: dict) -> str:
    """What each failure mode means, as the conditions' tasks define it (an older report: what it always meant)."""
    meanings = {k: v for c in report["conditions"] for k, v in (c.get("failure_mode_meanings") or {}).items()}
    if not meanings:
        return (
            "Failure modes: never grasped / dropped need the env's `info['grasped']`; without it an episode that "
            "was not stopped counts as timed out (time limit) or other."
        )
    tasks = sorted({t for c in report["conditions"] for t in c.get("tasks") or ()})
    return (
        f"Failure modes ({', '.join(tasks) or 'task unknown'}; each failure counts under the first that holds): "
        + "; ".join(f"{m.replace('_', ' ')}: {meanings[m]}" for m in report_modes(report) if m in meanings)
        + "."
    )


def farmed_lines(report: dict) -> list[str]:
    """Per condition scored by a learned reward: its farmed episodes (robo_rl/eval/behaviour.py)."""
    return [
        f"{c['name']}: learned reward farmed in {f['farmed']}/{f['episodes']} episodes ({f['share']:.0%}; bound "
        f"{f['bound']:.0%}){' FLAGGED' if f['flagged'] else ''}"
        for c in report["conditions"]
        if (f := c.get("farmed_reward"))
    ]


def ci_text(c: dict) -> str:
    return f"[{c['success_ci95'][0]:.2f}, {c['success_ci95'][1]:.2f}]"


def _markdown(report: dict) -> str:
    modes = report_modes(report)
    head = [
        "condition",
        "success",
        "rate",
        "Wilson 95% CI",
        "mean length",
        "episode s",
        "step ms",
        *(m.replace("_", " ") for m in modes),
        "clips",
    ]
    text = f"# Suite {report['suite']}\n\n" + "\n".join(f"{ln}  " for ln in header_lines(report)) + "\n\n"
    text += "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
    for c in report["conditions"]:
        clips = " ".join(f"[{k}]({v['path']})" for k, v in c["clips"].items() if isinstance(v, dict))
        note = f" ({unseen_note(c)})" if unseen_note(c) else ""
        text += (
            f"| {c['name']}{note} | {c['successes']}/{c['n']} | {c['success_rate']:.2f} | {ci_text(c)} "
            f"| {c['mean_length']:.1f} | {c['episode_s']:.3g} | {c['step_ms']:.3g} | "
            + " | ".join(str(c["failure_modes"].get(m, "-")) for m in modes)
            + f" | {clips} |\n"
        )
    text += f"\n{modes_note(report)}\n"
    rows = [(c["name"], c["throughput"]) for c in report["conditions"] if c.get("throughput")]
    if rows:
        text += "\n## Throughput and time\n\n" + throughput_markdown(rows)
    if farmed_lines(report):
        text += "\n## Learned reward against the simulator\n\n" + "".join(f"- {ln}\n" for ln in farmed_lines(report))
    return text + against_nominal_markdown(report.get("against_nominal", []))


def against_nominal_markdown(rows: list[dict]) -> str:
    """The suite report's section of robo_rl/eval/robustness.py's rows (none: no nominal condition)."""
    if not rows:
        return ""
    text = (
        f"\n## Against nominal\n\nEach condition's success against the nominal one's (Fisher's exact test, 5%); "
        f"'detectable drop': the smallest drop from nominal its episodes detect with 80% power; 'underpowered': not "
        f"detected, and a drop of {abs(rows[0]['gain_asked']):.2f} could have gone unseen.\n\n"
        "| condition | change | Fisher p | detectable drop | verdict |\n|---|---|---|---|---|\n"
    )
    for r in rows:
        mdg = "-" if r["minimum_detectable_gain"] is None else f"{r['minimum_detectable_gain']:.2f}"
        text += f"| {r['condition']} | {r['change']:+.2f} | {r['p']:.3g} | {mdg} | {r['verdict']} |\n"
    return text


def success_chart_svg(rows: list[tuple[str, float, float, float]]) -> str:
    """A bar per (label, rate, CI low, CI high), its Wilson 95% interval as an error bar; inline SVG."""
    bar_w, gap, plot_h, left, top, bottom = 28, 16, 200, 44, 16, 110  # px
    width = left + len(rows) * (bar_w + gap) + gap
    y = lambda p: top + plot_h * (1.0 - p)  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + plot_h + bottom}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{left}" x2="{width}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>'
        )
    for i, (label, rate, low, high) in enumerate(rows):
        x = left + gap + i * (bar_w + gap)
        mid = x + bar_w / 2
        if not math.isnan(rate):
            parts.append(
                f'<rect x="{x}" y="{y(rate):.1f}" width="{bar_w}" height="{plot_h * rate:.1f}" '
                f'fill="#4c78a8"><title>{html.escape(label)}: {rate:.2f} [{low:.2f}, {high:.2f}]</title>'
                "</rect>"
                f'<text x="{mid}" y="{y(high) - 4:.1f}" text-anchor="middle" font-size="9">{rate:.2f}</text>'
            )
        parts.append(
            f'<path d="M{mid} {y(low):.1f}V{y(high):.1f}M{mid - 5} {y(low):.1f}h10M{mid - 5} '
            f'{y(high):.1f}h10" stroke="#222" fill="none"/>'
        )
        base = top + plot_h + 12
        parts.append(
            f'<text x="{mid}" y="{base}" text-anchor="end" transform="rotate(-45 {mid} {base})">'
            f"{html.escape(label)}</text>"
        )
    return "".join(parts) + "</svg>"


def _html(report: dict) -> str:
    esc = html.escape
    conditions = report["conditions"]
    charted = [c for c in conditions if c.get("seen") != "none"]  # a bar there would read as robustness
    chart = success_chart_svg([(c["name"], c["success_rate"], *c["success_ci95"]) for c in charted])
    if len(charted) < len(conditions):
        left_out = ", ".join(c["name"] for c in conditions if c.get("seen") == "none")
        chart += f"<p class='note'>Not in the chart (not seen by this policy: state-only): {esc(left_out)}.</p>"
    head = [
        "condition",
        "overrides",
        "success",
        "rate",
        "Wilson 95% CI",
        "mean length",
        "episode s",
        "step ms",
        *(m.replace("_", " ") for m in report_modes(report)),
    ]

    def overrides_cell(c: dict) -> str:
        unseen = set(c.get("not_seen", ()))
        return "".join(
            f"<code class='unseen' title='not seen by this policy'>{esc(o)}</code>"
            if o in unseen
            else f"<code>{esc(o)}</code>"
            for o in c["overrides"]
        )

    def name_cell(c: dict) -> str:
        note = unseen_note(c)
        return esc(c["name"]) + (f"<div class='note'>{esc(note)}</div>" if note else "")

    rows = "".join(
        f"<tr{' class=unseen' if c.get('seen') == 'none' else ''}><td>{name_cell(c)}</td>"
        f"<td class='overrides'>{overrides_cell(c)}</td>"
        f"<td>{c['successes']}/{c['n']}</td><td>{c['success_rate']:.2f}</td><td>{ci_text(c)}</td>"
        f"<td>{c['mean_length']:.1f}</td><td>{c['episode_s']:.3g}</td><td>{c['step_ms']:.3g}</td>"
        + "".join(f"<td>{c['failure_modes'].get(m, '-')}</td>" for m in report_modes(report))
        + "</tr>"
        for c in conditions
    )
    speed = "".join(
        f"<tr class='clock'><td>{esc(c['name'])}</td><td>{esc(clock_label(c['throughput'], clock))}</td>"
        + "".join(f"<td>{v}</td>" for v in throughput_cells(c["throughput"], clock))
        + "</tr>"
        for c in conditions
        if c.get("throughput")
        for clock in CLOCKS
        if c["throughput"].get(clock) is not None
    )
    if speed:
        speed = (
            "<h2>Throughput and time</h2><table><tr class='clock'>"
            + "".join(f"<th>{h}</th>" for h in ("condition", *THROUGHPUT_HEAD))
            + f"</tr>{speed}</table>"
            + "".join(f"<p class='note'>{esc(clock)}: {esc(meaning)}</p>" for clock, meaning in CLOCKS.items())
        )
    speed += "".join(f"<p>{esc(ln)}</p>" for ln in farmed_lines(report))
    clips = ""
    for c in conditions:
        cells = []
        for outcome in ("success", "failure"):
            clip = c["clips"].get(outcome)
            if clip:
                cells.append(
                    f'<figure><img src="{esc(clip["path"])}" alt="{outcome}"><figcaption>{outcome}, seed '
                    f"{clip['seed']}</figcaption></figure>"
                )
        note = c["clips"].get("error") or ("" if cells else "no episode to film")
        clips += (
            f"<section class='clip'><h3>{esc(c['name'])}</h3>{''.join(cells)}<p>{esc(note)}</p></section>"
            if cells or note
            else ""
        )
    header = "".join(f"<p>{esc(ln.replace('**', '').replace('`', ''))}</p>" for ln in header_lines(report))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>suite " + esc(report["suite"]) + "</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:right;white-space:nowrap;vertical-align:top}"
        "th{white-space:normal;vertical-align:bottom}"
        "td:first-child,td:nth-child(2),th:first-child,th:nth-child(2){text-align:left}"
        # an all-together condition holds a dozen overrides: one per line, wrapped, so the figures stay in view
        "td.overrides{white-space:normal;min-width:25em;max-width:30em;font-size:85%}"
        "td.overrides code{display:block;overflow-wrap:anywhere}td:first-child{white-space:normal;max-width:16em}"
        ".note{color:#666;font-size:85%}code.unseen{color:#999;text-decoration:line-through}tr.unseen td{color:#999}"
        "section.clip{display:inline-block;vertical-align:top;margin:0 2em 1em 0}section.clip h3{margin:0 0 .3em}"
        "figure{display:inline-block;margin:0 1em 0 0}img{image-rendering:pixelated;width:192px}</style></head>"
        f"<body><h1>Suite {esc(report['suite'])}</h1>{header}<h2>Success by condition (Wilson 95% intervals)</h2>"
        f"{chart}<h2>Conditions</h2><table><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr>{rows}</table><p class='note'>{esc(modes_note(report).replace('`', ''))}</p>{speed}"
        f"<h2>Clips</h2>{clips}</body></html>"
    )


def compare_reports(entries: list[tuple[str, dict]], gain: float = GAIN, power: float = POWER) -> dict:
    """Per condition each report's rate and interval, and each report against the first: the difference, whether it
    is significant at SIGNIFICANCE_LEVEL, the gain these episodes could detect with `power`, and the verdict on
    `gain` (robo_rl/eval/power.py)."""
    names = list(dict.fromkeys(c["name"] for _, r in entries for c in r["conditions"]))
    base_label = entries[0][0]
    rows = []
    for name in names:
        found = {label: next((c for c in r["conditions"] if c["name"] == name), None) for label, r in entries}
        results = {
            label: None
            if c is None
            else {
                "n": c["n"],
                "successes": c["successes"],
                "success_rate": c["success_rate"],
                "success_ci95": c["success_ci95"],
                "seen": c.get("seen", "all"),
            }
            for label, c in found.items()
        }
        base, tests = results[base_label], []
        for label, other in list(results.items())[1:]:
            if base is None or other is None or not base["n"] or not other["n"]:
                continue
            p = fisher_exact_p(other["successes"], other["n"], base["successes"], base["n"])
            tests.append(
                {
                    "a": base_label,
                    "b": label,
                    "difference": other["success_rate"] - base["success_rate"],
                    "p_value": p,
                    "significant": p < SIGNIFICANCE_LEVEL,
                    **comparison_power(base, other, p, gain, power, SIGNIFICANCE_LEVEL),
                }
            )
        same_seeds = len({tuple(c["seeds"]) for c in found.values() if c is not None}) <= 1
        rows.append({"condition": name, "results": results, "tests": tests, "same_seeds": same_seeds})
    return {
        "suite": entries[0][1]["suite"],
        "test": f"{TEST_NAME}, each against {base_label}, at {SIGNIFICANCE_LEVEL} per condition (not corrected "
        "for multiple comparisons)",
        "power": {"power": power, "gain": gain, "method": UNPAIRED_METHOD},
        "policies": [
            {
                "label": label,
                "checkpoint": r["checkpoint"],
                "score": r["score"],
                "real_robot": r["real_robot"],
                "report": r.get("report_dir"),
            }
            for label, r in entries
        ],
        "rows": rows,
    }


def compare_markdown(comparison: dict, title: str) -> str:
    labels = [p["label"] for p in comparison["policies"]]
    others = labels[1:]
    head = [
        "condition",
        *labels,
        *(f"{b} - {labels[0]}" for b in others),
        *(f"{b}: detectable, verdict" for b in others),
    ]
    text = f"# {title}: suite {comparison['suite']}\n\n"
    text += "".join(
        f"- {p['label']}: `{p['checkpoint']}` (scored by {p['score']}{', real robot' if p['real_robot'] else ''})\n"
        for p in comparison["policies"]
    )
    text += f"\nsignificance: {comparison['test']}; * = significant\n"
    plan = comparison["power"]
    gain = plan["gain"]
    text += (
        f"detectable: the smallest change from {labels[0]} in the direction of {gain:+.2f} that a comparison's "
        f"episodes detect with {plan['power']:.0%} power ('-': none within [0, 1]), by the {plan['method']}; "
        f"underpowered: not significant, and {gain:+.2f} is below that, so the null result cannot rule it out\n\n"
    )
    text += "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
    for row in comparison["rows"]:
        cells = [row["condition"] + ("" if row["same_seeds"] else " (different seeds)")]
        for label in labels:
            r = row["results"][label]
            cells.append(
                "-"
                if r is None
                else f"{r['success_rate']:.2f} [{r['success_ci95'][0]:.2f}, "
                f"{r['success_ci95'][1]:.2f}] ({r['successes']}/{r['n']})"
                + {"all": "", "part": " (part not seen: state-only)", "none": " (not seen: state-only)"}[
                    r.get("seen", "all")
                ]
            )
        tests = {t["b"]: t for t in row["tests"]}
        for label in others:
            t = tests.get(label)
            cells.append(
                "-"
                if t is None
                else f"{t['difference']:+.2f} (p={t['p_value']:.3g})" + (" *" if t["significant"] else "")
            )
        for label in others:
            t = tests.get(label)
            mdg = None if t is None else t["minimum_detectable_gain"]
            cells.append("-" if t is None else f"{'-' if mdg is None else f'{mdg:.2f}'}: {t['verdict']}")
        text += "| " + " | ".join(cells) + " |\n"
    weak = [(row, t) for row in comparison["rows"] for t in row["tests"] if t["verdict"] == "underpowered"]
    if weak:
        (row, _), total = weak[0], sum(len(r["tests"]) for r in comparison["rows"])
        text += f"\n{len(weak)} of {total} comparisons underpowered for {gain:+.2f}"
        rate = round(row["results"][labels[0]]["success_rate"], 2)
        if 0 < rate < 1 and 0 <= rate + gain <= 1:  # what would resolve the first: `robo-rl eval plan`'s answer
            n = episodes_per_arm(rate, gain, plan["power"], SIGNIFICANCE_LEVEL)
            text += f"; {row['condition']} needs {n} episodes per arm (robo-rl eval plan baseline={rate} gain={gain})"
        text += "\n"
    return text


def write_comparison(out_dir: Path, stem: str, comparison: dict, title: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(comparison, indent=2))
    md = out / f"{stem}.md"
    md.write_text(compare_markdown(comparison, title))
    return md


def unused_report_dir(out_dir: Path) -> Path:
    """`out_dir`, or `<out_dir>_2`, `_3`, ... when a report is already there: a repeated evaluation keeps it."""
    out_dir, k = Path(out_dir), 2
    candidate = out_dir
    while (candidate / "report.json").exists():
        candidate, k = out_dir.with_name(f"{out_dir.name}_{k}"), k + 1
    return candidate
