"""Power and planning (issue 48): the episodes per arm a comparison of success rates needs, unpaired and paired, the
gain a finished comparison could have detected, and the verdict `eval compare` prints ("underpowered" when a null
result cannot rule out the gain asked about)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robo_rl.cli import main
from robo_rl.eval.episodes import wilson_interval
from robo_rl.eval.power import (
    discordance,
    episodes_per_arm,
    minimum_detectable_gain,
    paired_episodes_per_arm,
    paired_power,
    unpaired_power,
    verdict,
)
from robo_rl.eval.report import compare_markdown, compare_reports, fisher_exact_p

Z_975, Z_80 = 1.959963984540054, 0.8416212335729143  # standard normal quantiles, from tables
# (baseline, gain) -> episodes per arm at 80% power, two-sided alpha 0.05, pooled variance under H0:
# 50% vs 60% by hand, 387.34 -> 388; 6% vs 8%: JMP's documented two-sample proportions example, 2,554 per arm
KNOWN = {(0.5, 0.1): 388, (0.06, 0.02): 2554}
CASES = [(0.5, 0.1), (0.55, 0.1), (0.06, 0.02), (0.65, 0.2), (0.2, 0.3), (0.9, -0.2), (0.3, 0.05)]


def closed_form(p1: float, p2: float) -> float:
    """The pooled-variance sample size, typed out again with tabulated quantiles (not rounded up)."""
    pbar = (p1 + p2) / 2
    root = Z_975 * (2 * pbar * (1 - pbar)) ** 0.5 + Z_80 * (p1 * (1 - p1) + p2 * (1 - p2)) ** 0.5
    return root**2 / (p2 - p1) ** 2


def test_episodes_per_arm_match_the_closed_form_and_the_textbook_values():
    for (baseline, gain), n in KNOWN.items():
        assert episodes_per_arm(baseline, gain) == n
    for baseline, gain in CASES:
        n = episodes_per_arm(baseline, gain)
        assert n == int(np.ceil(closed_form(baseline, baseline + gain)))
        assert (
            unpaired_power(baseline, baseline + gain, n, n)
            >= 0.8
            > unpaired_power(baseline, baseline + gain, n - 1, n - 1)
        )
    assert episodes_per_arm(0.5, 0.1, power=0.9) > 388 > episodes_per_arm(0.5, 0.1, alpha=0.1)


def test_sample_size_and_power_agree_with_statsmodels():
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    from statsmodels.stats.power import NormalIndPower

    for baseline, gain in CASES:
        n = episodes_per_arm(baseline, gain)
        theirs = proportion.samplesize_proportions_2indep_onetail(gain, baseline, 0.8, alpha=0.05)
        assert n == int(np.ceil(theirs))  # the same method: pooled variance under H0, unpooled under H1
        sm_power = proportion.power_proportions_2indep(gain, baseline, n, alpha=0.05).power
        assert unpaired_power(baseline, baseline + gain, n, n) == pytest.approx(sm_power, abs=1e-9)
        # Cohen's h (arcsine transform) is another approximation: within 5% of ours on these cases
        h = proportion.proportion_effectsize(baseline + gain, baseline)
        assert NormalIndPower().solve_power(h, power=0.8, alpha=0.05) == pytest.approx(n, rel=0.05)


def test_the_planned_episodes_give_the_planned_power_in_simulated_episodes():
    rng = np.random.default_rng(0)
    n, reps = episodes_per_arm(0.5, 0.1), 20000
    a, b = rng.binomial(n, 0.5, reps) / n, rng.binomial(n, 0.6, reps) / n
    pooled = (a + b) / 2
    z = (b - a) / np.sqrt(pooled * (1 - pooled) * 2 / n)
    assert np.mean(np.abs(z) > Z_975) == pytest.approx(0.8, abs=0.015)


def test_a_planted_gain_of_20_points_is_detected_and_a_planted_zero_is_not():
    rng = np.random.default_rng(48)
    n = 300
    base = int(rng.binomial(1, 0.5, n).sum())
    better, same = int(rng.binomial(1, 0.7, n).sum()), int(rng.binomial(1, 0.5, n).sum())
    p_gain, p_null = fisher_exact_p(better, n, base, n), fisher_exact_p(same, n, base, n)
    mdg = minimum_detectable_gain(n, base / n)
    assert 0.1 < mdg < 0.2  # 300 per arm resolve about 11 points at 80% power, not 10
    assert p_gain < 0.05 and verdict(p_gain, mdg) == "detected"
    assert p_null >= 0.05 and verdict(p_null, mdg) == "underpowered"  # +10 points could hide in this null
    assert verdict(p_null, mdg, gain=0.2) == "no difference at this power"  # +20 points would have shown


def test_the_minimum_detectable_gain_inverts_the_sample_size():
    n = episodes_per_arm(0.55, 0.1)
    mdg = minimum_detectable_gain(n, 0.55)
    assert mdg <= 0.1 < minimum_detectable_gain(n - 20, 0.55)
    assert unpaired_power(0.55, 0.55 + mdg, n, n) == pytest.approx(0.8, abs=1e-6)
    assert minimum_detectable_gain(6, 1.0) is None  # nothing is above a perfect baseline
    assert minimum_detectable_gain(2, 0.5) is None  # two episodes cannot detect even 0.5 -> 1.0


def test_a_paired_design_needs_fewer_episodes_when_outcomes_are_positively_correlated():
    unpaired = episodes_per_arm(0.55, 0.1)
    independent = paired_episodes_per_arm(0.55, 0.1)
    assert independent == pytest.approx(unpaired, rel=0.03)  # no correlation: pairing buys nothing
    fewer = [paired_episodes_per_arm(0.55, 0.1, correlation=rho) for rho in (0.2, 0.4, 0.6)]
    assert unpaired > fewer[0] > fewer[1] > fewer[2]
    d = discordance(0.55, 0.1)
    assert d.share == pytest.approx(0.55 * 0.35 + 0.65 * 0.45)  # p1 q2 + p2 q1 under independence
    with pytest.raises(ValueError, match="correlation=0.99"):
        discordance(0.1, 0.8, correlation=0.99)


def test_the_paired_plan_gives_its_power_in_simulated_pairs_under_mcnemar():
    rng = np.random.default_rng(1)
    d = discordance(0.55, 0.1, correlation=0.3)
    pairs = paired_episodes_per_arm(0.55, 0.1, correlation=0.3)
    both = 0.55 - d.baseline_only
    cells = rng.multinomial(pairs, [both, d.baseline_only, d.other_only, 1 - both - d.share], size=20000)
    b, c = cells[:, 1], cells[:, 2]
    z = (c - b) / np.sqrt(np.maximum(b + c, 1))
    assert np.mean(np.abs(z) > Z_975) == pytest.approx(paired_power(d, pairs), abs=0.02)
    assert paired_power(d, pairs) == pytest.approx(0.8, abs=0.01)


def test_eval_plan_prints_the_episodes_per_arm(capsys):
    assert main(["eval", "plan", "baseline=0.55", "gain=0.10"]) == 0
    out = capsys.readouterr().out
    n = episodes_per_arm(0.55, 0.1)
    assert f"episodes per arm: {n} ({2 * n} in all)" in out and "pooled variance under H0" in out
    assert main(["eval", "plan", "baseline=0.55", "gain=0.10", "paired=true", "correlation=0.3", "episode_s=30"]) == 0
    out = capsys.readouterr().out
    pairs = paired_episodes_per_arm(0.55, 0.1, correlation=0.3)
    assert f"paired (the same seeds and initial states for both): {pairs} ({2 * pairs} in all)" in out
    assert f"robot time: {2 * pairs} episodes x 30 s = {2 * pairs * 30 / 3600:.1f} h" in out


@pytest.mark.parametrize(
    "args, key",
    [
        (["baseline=1.2", "gain=0.1"], "baseline=1.2"),
        (["baseline=0", "gain=0.1"], "baseline=0"),
        (["baseline=0.55", "gain=0.5"], "gain=0.5"),
        (["baseline=0.55", "gain=0.1", "power=1"], "power=1"),
        (["baseline=0.55", "gain=0.1", "alpha=x"], "alpha=x"),
        (["baseline=0.55"], "gain="),
        (["baseline=0.55", "gian=0.1"], "did you mean 'gain'"),
    ],
)
def test_eval_plan_refuses_a_bad_value_naming_its_key(args, key, capsys):
    assert main(["eval", "plan", *args]) == 2
    assert key in capsys.readouterr().err


def report(successes: int, n: int, label: str) -> dict:
    low, high = wilson_interval(successes, n)
    condition = {
        "name": "nominal",
        "n": n,
        "successes": successes,
        "success_rate": successes / n,
        "success_ci95": [low, high],
        "seeds": list(range(n)),
    }
    return {
        "suite": "s",
        "checkpoint": f"/runs/{label}.pt",
        "score": "env",
        "real_robot": False,
        "conditions": [condition],
    }


def test_compare_says_underpowered_for_a_small_null_and_not_for_a_big_detected_gain():
    small = compare_reports([("a", report(10, 20, "a")), ("b", report(12, 20, "b"))])
    (test,) = small["rows"][0]["tests"]
    assert test["verdict"] == "underpowered" and test["minimum_detectable_gain"] > 0.1 and test["gain_asked"] == 0.1
    assert f"| {test['minimum_detectable_gain']:.2f}: underpowered |" in compare_markdown(small, "Comparison")
    tiny = compare_reports([("a", report(5, 10, "a")), ("b", report(6, 10, "b"))])
    assert tiny["rows"][0]["tests"][0]["minimum_detectable_gain"] is None  # not even 0.5 -> 1.0 at 10 per arm
    assert "| -: underpowered |" in compare_markdown(tiny, "Comparison")

    big = compare_reports([("a", report(90, 300, "a")), ("b", report(210, 300, "b"))])
    (test,) = big["rows"][0]["tests"]
    assert test["significant"] and test["verdict"] == "detected"
    md = compare_markdown(big, "Comparison")
    assert "underpowered |" not in md and f"| {test['minimum_detectable_gain']:.2f}: detected |" in md
    assert json.loads(json.dumps(big))["power"]["gain"] == 0.1  # the gain asked is written with the table

    null_big = compare_reports([("a", report(150, 300, "a")), ("b", report(150, 300, "b"))], gain=0.2)
    assert null_big["rows"][0]["tests"][0]["verdict"] == "no difference at this power"


def test_eval_compare_takes_the_gain_asked_and_writes_the_verdicts(tmp_path, capsys):
    for label, k in (("a", 150), ("b", 160)):
        (tmp_path / label).mkdir()
        (tmp_path / label / "report.json").write_text(json.dumps(report(k, 300, label)))
    runs = [str(tmp_path / "a" / "report.json"), str(tmp_path / "b" / "report.json")]
    assert main(["eval", "compare", *runs, f"out={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert ": underpowered |" in out  # +0.10 is below what 300 per arm resolve
    assert "1 of 1 comparisons underpowered for +0.10; nominal needs 388 episodes per arm" in out
    assert "(robo-rl eval plan baseline=0.5 gain=0.1)" in out
    assert main(["eval", "compare", *runs, "gain=0.2", f"out={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert ": no difference at this power |" in out and "underpowered for" not in out
    (test,) = json.loads((tmp_path / "compare_s.json").read_text())["rows"][0]["tests"]
    assert test["gain_asked"] == 0.2 and test["verdict"] == "no difference at this power"
    assert main(["eval", "compare", *runs, "gain=ten", f"out={tmp_path}"]) == 2
    assert "gain=ten" in capsys.readouterr().err


def test_a_suite_says_which_conditions_drops_it_detected_and_which_it_was_too_small_to_see():
    """Each condition against the nominal one: a 60-point drop on 50 episodes is detected; a 4-point drop on 50
    episodes could hide a 10-point one (underpowered); 1,000 episodes a side at 0.90 and 0.89 could not
    (no difference at this power); the suite report's markdown carries the rows."""
    from robo_rl.eval.report import against_nominal_markdown
    from robo_rl.eval.robustness import against_nominal, against_nominal_line

    def cond(name, k, n):
        return {"name": name, "successes": k, "n": n, "success_rate": k / n if n else 0.0}

    rows = against_nominal(
        [cond("nominal", 45, 50), cond("mass_x4", 15, 50), cond("friction", 43, 50), cond("not_run", 0, 0)]
    )
    assert [(r["condition"], r["verdict"]) for r in rows] == [("mass_x4", "detected"), ("friction", "underpowered")]
    assert rows[1]["minimum_detectable_gain"] > 0.10 and rows[0]["p"] < 1e-6
    big = against_nominal([cond("nominal", 900, 1000), cond("light", 890, 1000)])
    assert big[0]["verdict"] == "no difference at this power" and big[0]["minimum_detectable_gain"] < 0.10
    assert "1 of 2 changes detected, 1 underpowered" in against_nominal_line(rows)
    text = against_nominal_markdown(rows)
    assert "| mass_x4 | -0.60 |" in text and "| friction | -0.04 |" in text and "underpowered" in text
    assert against_nominal([cond("mass_x4", 15, 50)]) == [] and against_nominal_markdown([]) == ""
