"""`robo-rl eval plan baseline=0.55 gain=0.10`: the episodes per arm a comparison of success rates needs."""

from __future__ import annotations

import difflib

from robo_rl.config import override_value
from robo_rl.eval.power import (
    ALPHA,
    GAIN,
    PAIRED_METHOD,
    POWER,
    UNPAIRED_METHOD,
    PowerError,
    check_rates,
    discordance,
    episodes_per_arm,
    paired_episodes_per_arm,
)

USAGE = (
    "usage: robo-rl eval plan baseline=<rate> gain=<points> [power=0.8] [alpha=0.05] [paired=true "
    "[correlation=0]] [episode_s=<seconds per episode, reset included>]"
)
NUMBERS = ("baseline", "gain", "power", "alpha", "correlation", "episode_s")
KEYS = (*NUMBERS, "paired")


def parse_plan(args: list[str]) -> dict:
    """key=value arguments, each checked; a PowerError names the key that is wrong."""
    given: dict = {"power": POWER, "alpha": ALPHA, "correlation": 0.0, "paired": False, "episode_s": None}
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq or key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise PowerError(f"plan: '{arg}' is not one of {', '.join(f'{k}=' for k in KEYS)}{hint}\n{USAGE}")
        if key == "paired":
            if value.lower() not in ("true", "false"):
                raise PowerError(f"paired={value}: give paired=true or paired=false")
            given[key] = value.lower() == "true"
            continue
        try:
            given[key] = float(value)
        except ValueError:
            raise PowerError(f"{key}={value} is not a number") from None
    for key in ("baseline", "gain"):
        if key not in given:
            raise PowerError(f"plan needs {key}=\n{USAGE}")
    if given["episode_s"] is not None and not given["episode_s"] > 0:
        raise PowerError(f"episode_s={given['episode_s']} is not a positive duration in seconds")
    check_rates(given["baseline"], given["gain"], given["power"], given["alpha"])
    return given


def cmd_eval_plan(args: list[str]) -> int:
    plan = parse_plan(args)
    baseline, gain, power, alpha = plan["baseline"], plan["gain"], plan["power"], plan["alpha"]
    unpaired = episodes_per_arm(baseline, gain, power, alpha)
    goal = (
        f"to detect a success rate of {baseline:.2f} -> {baseline + gain:.2f} ({gain:+.2f}) with "
        f"{power:.0%} power, two-sided alpha {alpha:g}"
    )
    if plan["paired"]:
        n = paired_episodes_per_arm(baseline, gain, power, alpha, plan["correlation"])
        share = discordance(baseline, gain, plan["correlation"]).share
        print(f"episodes per arm, paired (the same seeds and initial states for both): {n} ({2 * n} in all) {goal}")
        print(
            f"test: {PAIRED_METHOD}; discordant share {share:.3f}, from correlation={plan['correlation']:g} of the "
            "two outcomes on one seed (0: independent; seeds hard for both policies raise it and shrink the plan)"
        )
        print(f"unpaired, for comparison: {unpaired} per arm")
    else:
        n = unpaired
        print(f"episodes per arm: {n} ({2 * n} in all) {goal}")
        print(f"test: {UNPAIRED_METHOD}")
    if plan["episode_s"] is not None:
        seconds = 2 * n * plan["episode_s"]
        print(f"robot time: {2 * n} episodes x {plan['episode_s']:g} s = {seconds / 3600:.1f} h")
    return 0


def gain_option(options: list[str]) -> float:
    """`eval compare`'s `gain=`: the gain its verdicts are about (default +0.10)."""
    value = override_value(options, "gain")
    if value is None:
        return GAIN
    try:
        gain = float(value)
    except ValueError:
        raise PowerError(f"gain={value} is not a number (e.g. gain=0.10: ten points of success rate)") from None
    if gain == 0.0 or not -1.0 < gain < 1.0:
        raise PowerError(f"gain={value} is not a nonzero change of success rate between -1 and 1")
    return gain
