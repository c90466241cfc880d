"""Throughput and time of evaluation episodes, what a deployed skill is judged by besides its success rate:
successes per hour of robot time with resets counted, cycle time of successful episodes, time to success,
interventions and safety stops per hour.

Two clocks, each named wherever a figure is shown:
- `wall`: the episodes' own timestamps (`started_at` when its reset began, `ended_at` when its last step ended; a
  hand reset on a real robot is inside its span). On a real robot this is the robot's time. In a simulator it measures
  the simulator's speed (and, with several workers, one worker's time per episode).
- `control_rate`: the robot time the same steps take at the env's control rate, steps / control_hz, plus the reset
  time measured: what a robot running this policy in real time would spend. The primary clock in a simulator.

Cycle time: a successful episode's reset plus its steps. Time to success: a successful episode's steps alone (first
action to success). Per-hour figures divide by every episode's time, failures and resets included.
"""

from __future__ import annotations

import statistics

from robo_rl.eval.failures import SAFETY_ENDINGS

CLOCKS = {
    "wall": "wall clock (the episodes' own timestamps, resets included)",
    "control_rate": "robot time at the env's control rate (steps / control_hz, plus the measured reset time)",
}


def episode_times(r: dict, clock: str) -> tuple[float, float] | None:
    """(reset s, steps s) of one episode record on `clock`; None where the record lacks what that clock needs."""
    reset = float(r.get("reset_s") or 0.0)
    if clock == "wall":
        if r.get("started_at") is not None and r.get("ended_at") is not None:
            return reset, float(r["ended_at"]) - float(r["started_at"]) - reset
        if r.get("episode_s") is not None:  # a record from before timestamps: its reset is inside episode_s
            return 0.0, float(r["episode_s"])
        return None
    hz = r.get("control_hz")
    return (reset, int(r["length"]) / float(hz)) if hz else None


def takeovers(r: dict) -> int:
    """A person's takeovers in an episode: recorded ones, else one if any step was theirs, else none."""
    if r.get("takeovers") is not None:
        return int(r["takeovers"])
    return int(bool(r.get("interventions")))


def _on_clock(episodes: list[dict], clock: str) -> dict | None:
    times = [episode_times(r, clock) for r in episodes]
    if not episodes or any(t is None for t in times):
        return None
    seconds = sum(a + b for a, b in times)
    won = [t for t, r in zip(times, episodes, strict=True) if r["success"]]
    cycles = [a + b for a, b in won]
    per_hour = (lambda count: count * 3600.0 / seconds) if seconds > 0 else (lambda count: None)
    return {
        "hours": seconds / 3600.0,
        "successes_per_hour": per_hour(len(won)),
        "cycle_s_mean": statistics.fmean(cycles) if cycles else None,
        "cycle_s_median": statistics.median(cycles) if cycles else None,
        "time_to_success_s": statistics.fmean(b for _, b in won) if won else None,
        "interventions_per_hour": per_hour(sum(takeovers(r) for r in episodes)),
        "safety_stops_per_hour": per_hour(sum(r.get("ended_by") in SAFETY_ENDINGS for r in episodes)),
    }


def throughput(episodes: list[dict], real_robot: bool = False) -> dict:
    """Per clock (None where the records lack it) the figures above, and the primary clock: the wall clock on a real
    robot, the control rate in a simulator (the wall clock where the control rate is unknown)."""
    clocks = {clock: _on_clock(episodes, clock) for clock in CLOCKS}
    primary = "wall" if real_robot or clocks["control_rate"] is None else "control_rate"
    hz = sorted({float(r["control_hz"]) for r in episodes if r.get("control_hz")})
    return {"primary": primary, "control_hz": hz[0] if len(hz) == 1 else None, **clocks}  # None: unknown or mixed


def _fmt(value, digits: str = ".3g") -> str:
    """'-' where undefined; thousands whole with separators (3.9e+03 reads badly in a table)."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else format(value, digits)


THROUGHPUT_HEAD = (
    "clock",
    "hours",
    "successes / h",
    "cycle s (mean)",
    "cycle s (median)",
    "time to success s",
    "interventions / h",
    "safety stops / h",
)


def throughput_cells(t: dict, clock: str) -> list[str]:
    """One clock's figures as table cells (THROUGHPUT_HEAD, less the clock and condition); '-' where undefined."""
    c = t.get(clock)
    if c is None:
        return ["-"] * (len(THROUGHPUT_HEAD) - 1)
    keys = ("successes_per_hour", "cycle_s_mean", "cycle_s_median", "time_to_success_s")
    rates = ("interventions_per_hour", "safety_stops_per_hour")
    return [_fmt(c["hours"]), *(_fmt(c[k]) for k in keys), *(_fmt(c[k], ".2f") for k in rates)]


def clock_label(t: dict, clock: str) -> str:
    name = "wall clock" if clock == "wall" else f"control rate ({_fmt(t.get('control_hz'))} Hz)"
    return name + (" (primary)" if t.get("primary") == clock else "")


def throughput_markdown(rows: list[tuple[str, dict]]) -> str:
    """A table of (label, throughput) rows, one line per clock that the records allow, and what the clocks mean."""
    head = ("condition", *THROUGHPUT_HEAD)
    text = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
    for label, t in rows:
        for clock in CLOCKS:
            if t.get(clock) is not None:
                text += f"| {label} | {clock_label(t, clock)} | " + " | ".join(throughput_cells(t, clock)) + " |\n"
    text += "\n" + "".join(f"- {clock}: {meaning}\n" for clock, meaning in CLOCKS.items())
    return text


def rate_text(t: dict | None) -> str:
    """A condition's successes per hour on its primary clock, for a console line ('' where unknown)."""
    c = (t or {}).get((t or {}).get("primary"))
    if not c or c["successes_per_hour"] is None:
        return ""
    return f"{_fmt(c['successes_per_hour'])} successes/h ({'wall clock' if t['primary'] == 'wall' else 'control rate'})"
