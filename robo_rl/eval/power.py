"""How many episodes a claim about success rates needs, and what a finished comparison could have seen.

Unpaired (two policies on independent episodes): the two-sided z-test of two proportions in its normal
approximation, with the pooled variance under H0 and the unpooled variance under H1, no continuity correction
(Fleiss, Levin & Paik, *Statistical Methods for Rates and Proportions*, 3rd ed., eq. 4.14 without its correction):

    n per arm = ( z_{1-alpha/2} sqrt(2 pbar qbar) + z_{power} sqrt(p1 q1 + p2 q2) )^2 / (p2 - p1)^2,  pbar = (p1+p2)/2

Paired (both policies on the same seeds and initial states; McNemar's test on the discordant pairs, Connor 1987):

    n pairs = ( z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2) )^2 / delta^2

where delta = p2 - p1 and psi = P(outcomes differ on a seed), the discordant share. psi follows from the two rates
and the correlation rho (phi coefficient) of the two outcomes on one seed: P(both succeed) = p1 p2 + rho sqrt(p1 q1
p2 q2); rho = 0 is independence, and psi then is p1 q2 + p2 q1. Seeds that are hard for one policy tend to be hard
for the other (rho > 0), which is what makes a paired design cheaper.

The verdict on a finished comparison uses the test the comparison ran (Fisher's exact test, robo_rl/eval/report.py)
for "detected", and this module's minimum detectable gain at the episodes run for "underpowered".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from robo_rl.errors import UserError

POWER = 0.8  # the conventional 80% chance of detecting a real gain
ALPHA = 0.05  # two-sided
GAIN = 0.10  # the gain asked about when none is given: +10 points of success rate
UNPAIRED_METHOD = (
    "normal approximation for two independent proportions (pooled variance under H0, unpooled under H1, "
    "no continuity correction)"
)
PAIRED_METHOD = "McNemar's test on discordant pairs, normal approximation (Connor 1987)"
VERDICTS = ("detected", "underpowered", "no difference at this power")
_Z = NormalDist()


class PowerError(UserError, ValueError):
    """A planning value outside its range (a rate outside (0, 1), a power outside (0, 1), ...)."""


def _z_two_sided(alpha: float) -> float:
    return _Z.inv_cdf(1.0 - alpha / 2.0)


def check_rates(baseline: float, gain: float, power: float = POWER, alpha: float = ALPHA) -> None:
    """A PowerError naming the key whose value cannot be planned for."""
    if not 0.0 < baseline < 1.0:
        raise PowerError(f"baseline={baseline} is not a success rate strictly between 0 and 1")
    if gain == 0.0 or not 0.0 <= baseline + gain <= 1.0:
        raise PowerError(
            f"gain={gain} with baseline={baseline} asks for a success rate of {baseline + gain:.3g}: "
            "gain must be nonzero and baseline + gain within [0, 1]"
        )
    if not 0.0 < power < 1.0:
        raise PowerError(f"power={power} is not a probability strictly between 0 and 1 (e.g. power=0.8)")
    if not 0.0 < alpha < 1.0:
        raise PowerError(f"alpha={alpha} is not a probability strictly between 0 and 1 (e.g. alpha=0.05)")


def unpaired_power(p1: float, p2: float, n1: int, n2: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided pooled z-test of p1 vs p2 with n1 and n2 episodes (both rejection tails counted)."""
    if n1 <= 0 or n2 <= 0:
        return 0.0
    pooled = (n1 * p1 + n2 * p2) / (n1 + n2)
    se0 = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2))
    se1 = math.sqrt(p1 * (1.0 - p1) / n1 + p2 * (1.0 - p2) / n2)
    delta, z = abs(p2 - p1), _z_two_sided(alpha)
    if se1 == 0.0:  # both rates at 0 or 1: the outcome is certain
        return 1.0 if delta > z * se0 else 0.0
    return _Z.cdf((delta - z * se0) / se1) + _Z.cdf((-delta - z * se0) / se1)


def episodes_per_arm(baseline: float, gain: float, power: float = POWER, alpha: float = ALPHA) -> int:
    """Episodes per policy to detect baseline -> baseline + gain, unpaired (see the module's formula)."""
    check_rates(baseline, gain, power, alpha)
    p1, p2 = baseline, baseline + gain
    pbar = (p1 + p2) / 2.0
    root = _z_two_sided(alpha) * math.sqrt(2.0 * pbar * (1.0 - pbar)) + _Z.inv_cdf(power) * math.sqrt(
        p1 * (1.0 - p1) + p2 * (1.0 - p2)
    )
    return math.ceil(root**2 / gain**2 - 1e-9)  # 1e-9: a float a hair above an exact integer stays that integer


@dataclass(frozen=True)
class Discordance:
    """The two kinds of disagreement on one seed: the baseline succeeds and the other fails, and the reverse."""

    baseline_only: float
    other_only: float

    @property
    def share(self) -> float:  # psi, the discordant share
        return self.baseline_only + self.other_only


def discordance(baseline: float, gain: float, correlation: float = 0.0) -> Discordance:
    """The discordant shares of a paired design from the two rates and the outcomes' correlation on one seed."""
    p1, p2 = baseline, baseline + gain
    both = p1 * p2 + correlation * math.sqrt(p1 * (1.0 - p1) * p2 * (1.0 - p2))
    cells = (both, p1 - both, p2 - both, 1.0 - p1 - p2 + both)  # the 2x2 table of one seed's two outcomes
    if not -1.0 <= correlation <= 1.0 or min(cells) < -1e-12:
        raise PowerError(f"correlation={correlation} is not possible with success rates {p1:.3g} and {p2:.3g}")
    return Discordance(max(0.0, p1 - both), max(0.0, p2 - both))


def paired_power(d: Discordance, pairs: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided McNemar z-test with `pairs` seeds run by both policies."""
    delta, psi = abs(d.other_only - d.baseline_only), d.share
    if pairs <= 0 or psi == 0.0:
        return 0.0
    spread = math.sqrt(max(psi - delta**2, 0.0))
    z, root_n = _z_two_sided(alpha), math.sqrt(pairs)
    if spread == 0.0:
        return 1.0 if delta * root_n > z * math.sqrt(psi) else 0.0
    return _Z.cdf((delta * root_n - z * math.sqrt(psi)) / spread) + _Z.cdf(
        (-delta * root_n - z * math.sqrt(psi)) / spread
    )


def paired_episodes_per_arm(
    baseline: float, gain: float, power: float = POWER, alpha: float = ALPHA, correlation: float = 0.0
) -> int:
    """Seeds (episodes per policy, each seed run by both) to detect baseline -> baseline + gain, paired."""
    check_rates(baseline, gain, power, alpha)
    d = discordance(baseline, gain, correlation)
    psi = d.share
    root = _z_two_sided(alpha) * math.sqrt(psi) + _Z.inv_cdf(power) * math.sqrt(max(psi - gain**2, 0.0))
    return math.ceil(root**2 / gain**2 - 1e-9)


def minimum_detectable_gain(
    episodes: int, baseline: float, power: float = POWER, alpha: float = ALPHA, other_episodes: int | None = None
) -> float | None:
    """The smallest gain over `baseline` that `episodes` per arm (or `episodes` and `other_episodes`) detect with
    `power`, unpaired; None when no gain up to a success rate of 1 would be."""
    other = episodes if other_episodes is None else other_episodes
    if not 0.0 <= baseline <= 1.0 or episodes <= 0 or other <= 0:
        return None
    room = 1.0 - baseline
    if room <= 0.0 or unpaired_power(baseline, 1.0, episodes, other, alpha) < power:
        return None
    low, high = 0.0, room  # the power rises with the gain: bisect on it
    for _ in range(60):
        mid = (low + high) / 2.0
        if unpaired_power(baseline, baseline + mid, episodes, other, alpha) >= power:
            high = mid
        else:
            low = mid
    return high


def verdict(p_value: float, mdg: float | None, gain: float = GAIN, alpha: float = ALPHA) -> str:
    """'detected' (p < alpha); 'underpowered' (not detected, and the gain asked about is below what these episodes
    could detect); 'no difference at this power' (not detected, though the gain asked about would likely have been)."""
    if p_value < alpha:
        return VERDICTS[0]
    if mdg is None or abs(gain) < mdg:
        return VERDICTS[1]
    return VERDICTS[2]


def comparison_power(
    base: dict, other: dict, p_value: float, gain: float = GAIN, power: float = POWER, alpha: float = ALPHA
) -> dict:
    """For one comparison of two report conditions (n, successes, success_rate): the minimum detectable gain in the
    direction asked (a drop from the base is a gain from 1 - base) at the episodes run, and the verdict."""
    rate = base["success_rate"] if gain > 0 else 1.0 - base["success_rate"]
    mdg = minimum_detectable_gain(base["n"], rate, power, alpha, other["n"])
    return {"minimum_detectable_gain": mdg, "gain_asked": gain, "verdict": verdict(p_value, mdg, gain, alpha)}
