"""Aggregates across seeds and tasks with rliable: IQM, optimality gap and probability of improvement with stratified
bootstrap intervals on synthetic score matrices, `robo-rl eval compare` of recipes x seeds from run folders, and the
intervals of the learning-curve plots."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from robo_rl.cli import main
from robo_rl.eval.aggregate import (
    Estimate,
    ScoreMatrixError,
    aggregate,
    aggregate_gain,
    curve_band,
    performance_profiles,
    plot_performance_profiles,
    probability_of_improvement,
)
from robo_rl.eval.compare_runs import GroupingError, is_grouped, recipe_of
from robo_rl.eval.curves import plot_learning_curve, plot_seed_curves, rolling_success
from robo_rl.eval.wilson import wilson_interval

REPS = 100  # enough for the bounds these tests read; reports use 2,000


def test_iqm_of_a_known_matrix_is_the_trimmed_mean_by_hand_and_mean_and_gap_follow():
    scores = np.array([[0.0, 0.9], [0.2, 1.0], [0.4, 0.5], [0.6, 0.1]])  # 4 runs x 2 tasks
    middle = np.sort(scores.ravel())[2:6]  # a quarter of the 8 scores cut from each end
    got = aggregate({"r": scores}, reps=REPS)["r"]
    assert got["iqm"].point == pytest.approx(middle.mean())
    assert got["mean"].point == pytest.approx(scores.mean())
    assert got["optimality_gap"].point == pytest.approx(1.0 - scores.mean())
    for estimate in got.values():
        assert estimate.low <= estimate.point <= estimate.high
        assert estimate.low < estimate.high  # four different runs: the bootstrap spreads


def test_the_gain_over_a_base_is_the_iqm_of_the_paired_differences_with_an_interval_and_shapes_must_match():
    before = np.array([[0.7, 0.44, 0.56, 0.66, 0.3]] * 2)  # one base per task, repeated for the two runs
    after = np.array([[0.68, 0.70, 0.78, 0.74, 0.46], [0.72, 0.60, 0.70, 0.66, 0.50]])
    gains = np.sort((after - before).ravel())
    got = aggregate_gain(after, before, reps=REPS)
    middle = gains[2:8].mean()  # rliable's IQM: scipy's trim_mean cuts int(25% of 10) = 2 from each end
    assert got["iqm"].point == pytest.approx(middle)
    assert got["mean"].point == pytest.approx(gains.mean())
    assert got["iqm"].low < got["iqm"].point < got["iqm"].high
    assert aggregate_gain(before, before, reps=REPS)["iqm"] == Estimate(0.0, 0.0, 0.0)
    with pytest.raises(ScoreMatrixError, match=r"gain: after is \(2, 5\) \(runs x tasks\), before \(1, 5\)"):
        aggregate_gain(after, before[:1], reps=REPS)


def test_probability_of_improvement_is_one_for_a_recipe_better_on_every_run_and_a_half_for_identical_ones():
    rng = np.random.default_rng(0)
    worse = rng.uniform(0.0, 0.4, size=(3, 2))
    better = rng.uniform(0.6, 1.0, size=(3, 2))
    reps = 40  # a Mann-Whitney U per task and repetition: the slow statistic
    p = probability_of_improvement(better, worse, reps=reps)
    assert p.point == pytest.approx(1.0) and p.low == pytest.approx(1.0)  # every resample keeps the ordering
    reverse = probability_of_improvement(worse, better, reps=reps)
    assert reverse.point == pytest.approx(0.0) and reverse.high == pytest.approx(0.0)
    same = probability_of_improvement(worse, worse.copy(), reps=reps)
    assert same.point == pytest.approx(0.5)
    assert same.low < 0.5 < same.high  # resampled independently, identical recipes are not told apart


def test_intervals_contain_the_estimate_and_shrink_with_more_runs_and_repeat_under_one_seed():
    rng = np.random.default_rng(1)
    few = rng.beta(4, 4, size=(3, 2))
    many = np.tile(few, (10, 1))  # the same scores from ten times the runs
    widths = {}
    for name, scores in (("few", few), ("many", many)):
        iqm = aggregate({name: scores}, reps=REPS)[name]["iqm"]
        assert iqm.low <= iqm.point <= iqm.high
        widths[name] = iqm.high - iqm.low
    assert widths["many"] < widths["few"] / 2  # about 1/sqrt(10) of it
    state = np.random.get_state()[1].copy()
    again = aggregate({"few": few}, reps=REPS)["few"]["iqm"]
    assert (again.high - again.low) == pytest.approx(widths["few"])  # seeded: a report says the same twice
    assert (np.random.get_state()[1] == state).all()  # and numpy's global generator is left as it was


def test_a_score_outside_0_1_or_an_empty_matrix_is_refused_by_name():
    with pytest.raises(ScoreMatrixError, match="residual: success rates lie in"):
        aggregate({"residual": [[0.5, 1.5]]}, reps=10)
    with pytest.raises(ScoreMatrixError, match="at least one of each"):
        aggregate({"rlpd": np.zeros((0, 2))}, reps=10)
    with pytest.raises(ScoreMatrixError, match="X has 2 tasks, Y 3"):
        probability_of_improvement(np.zeros((2, 2)), np.zeros((2, 3)), reps=10)


def test_performance_profiles_count_the_runs_above_each_threshold_and_plot_with_bands(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    scores = {"a": [[0.1, 0.5], [0.7, 0.9]], "b": [[0.0, 0.0], [0.2, 0.3]]}
    profiles, bands = performance_profiles(scores, taus=[0.0, 0.4, 0.8], reps=50)
    assert profiles["a"].tolist() == [1.0, 0.75, 0.25]  # share of the 4 scores above each threshold
    assert profiles["b"].tolist() == [0.5, 0.0, 0.0]
    assert bands["a"].shape == (2, 3)
    figures = []
    close = plt.close
    plt.close = figures.append  # keep the figure to read it
    try:
        path = plot_performance_profiles(scores, tmp_path / "profiles.png", reps=50)
    finally:
        plt.close = close
    (figure,) = figures
    assert sum(isinstance(c, PolyCollection) for c in figure.axes[0].collections) == 2  # a band per recipe
    assert path.stat().st_size > 0
    plt.close(figure)


def run_folder(root, recipe: str, seed: int, rates: dict[str, float], episodes: int = 20):
    """The files the grouping reads: the config's name, seed and env, and a suite report's conditions."""
    run = root / f"2026-11-29/10-00-0{seed}_{recipe}_s{seed}"
    (run / "eval" / "pick_robustness").mkdir(parents=True)
    config = {"name": f"{recipe}_s{seed}", "seed": seed, "env": {"_target_": "sim.pick_cube.PickCubeEnv"}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    conditions = [
        {
            "name": name,
            "n": episodes,
            "successes": round(rate * episodes),
            "success_rate": round(rate * episodes) / episodes,
        }
        for name, rate in rates.items()
    ]
    report = {"suite": "pick_robustness", "conditions": conditions}
    (run / "eval" / "pick_robustness" / "report.json").write_text(json.dumps(report))
    return run


@pytest.fixture
def two_recipes(tmp_path):
    """rlpd and residual, three seeds each, on two conditions; residual is better on every seed."""
    runs = {"rlpd": [], "residual": []}
    for seed in range(3):
        runs["rlpd"].append(run_folder(tmp_path / "out", "rlpd", seed, {"nominal": 0.3 + 0.05 * seed, "light": 0.2}))
        rates = {"nominal": 0.8 + 0.05 * seed, "light": 0.7 + 0.05 * seed}
        runs["residual"].append(run_folder(tmp_path / "out", "residual", seed, rates))
    return runs


def test_eval_compare_of_two_recipes_by_three_seeds_prints_iqm_and_probability_of_improvement(
    two_recipes, tmp_path, capsys
):
    grouped = [f"{name}={','.join(map(str, runs))}" for name, runs in two_recipes.items()]
    assert main(["eval", "compare", *grouped, "suite=pick_robustness", "reps=40", f"out={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "| recipe | seeds | IQM | mean | optimality gap |" in out
    assert "score: success rate per run and task, from 20 episodes each" in out
    assert "| residual over rlpd | 1.00 [1.00, 1.00] | residual better |" in out
    comparison = json.loads((tmp_path / "compare_recipes_pick_robustness.json").read_text())
    assert comparison["tasks"] == ["pick_cube/light", "pick_cube/nominal"]
    residual = next(r for r in comparison["recipes"] if r["name"] == "residual")
    assert residual["seeds"] == [0, 1, 2] and residual["scores"][0] == [0.7, 0.8]
    assert residual["iqm"]["low"] <= residual["iqm"]["point"] <= residual["iqm"]["high"]
    assert (tmp_path / "compare_recipes_pick_robustness.png").stat().st_size > 0
    assert (
        "![performance profiles](compare_recipes_pick_robustness.png)"
        in (tmp_path / "compare_recipes_pick_robustness.md").read_text()
    )
    # the same runs grouped by their configs' names and seeds, from the folder that holds them
    assert main(["eval", "compare", "by=recipe", str(tmp_path / "out"), "suite=pick_robustness", "reps=20"]) == 0
    by_config = json.loads((tmp_path / "out" / "2026-11-29" / "compare_recipes_pick_robustness.json").read_text())
    assert sorted(r["name"] for r in by_config["recipes"]) == ["residual", "rlpd"]
    assert all(r["seeds"] == [0, 1, 2] for r in by_config["recipes"])


def test_the_grouped_form_is_told_from_the_plain_compare_and_bad_groups_are_named(two_recipes, tmp_path, capsys):
    a, b = map(str, two_recipes["rlpd"][:2])
    assert not is_grouped(["compare", a, b, "suite=smoke", "eval.video=false", f"out={tmp_path}", "gain=0.2"])
    assert is_grouped(["compare", f"x={a}", f"y={b}"]) and is_grouped(["compare", "by=recipe", a])
    assert not is_grouped(["sim_vs_real", f"x={a}", f"y={b}"])
    assert recipe_of({"name": "residual_pick_sparse_s2", "seed": 2}) == "residual_pick_sparse"
    assert recipe_of({"name": "rlpd_s2", "seed": 3}) == "rlpd_s2"  # not its seed: part of the name
    lacking = two_recipes["residual"][2] / "eval" / "pick_robustness" / "report.json"
    report = json.loads(lacking.read_text())
    report["conditions"] = report["conditions"][:1]
    lacking.write_text(json.dumps(report))
    grouped = [f"{name}={','.join(map(str, runs))}" for name, runs in two_recipes.items()]
    assert main(["eval", "compare", *grouped, "suite=pick_robustness", "reps=10", f"out={tmp_path}"]) == 2
    assert "residual, seed 2: no score for task(s) pick_cube/light" in capsys.readouterr().err
    with pytest.raises(GroupingError, match=r"no eval/other/report.json to score it \(robo-rl eval checkpoint="):
        from robo_rl.eval.compare_runs import compare_grouped

        compare_grouped("compare", [*grouped, "suite=other", "reps=10", f"out={tmp_path}"])
    assert main(["eval", "compare", grouped[0], "reps=10"]) == 2
    assert "needs two recipes or more, found 1 (rlpd)" in capsys.readouterr().err
    assert main(["eval", "compare", grouped[0], f"residual={tmp_path}/nowhere", "reps=10"]) == 2
    assert f"residual={tmp_path}/nowhere is neither an option" in capsys.readouterr().err


def test_the_learning_curve_shades_the_wilson_interval_of_each_rolling_window(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read it
    metrics = [{"kind": "episode", "env_steps": 10 * i, "success": i % 3 == 0, "return": 1.0} for i in range(1, 101)]
    plot_learning_curve(metrics, tmp_path / "curve.png", None)
    (figure,) = figures
    (band,) = [c for c in figure.axes[0].collections if isinstance(c, PolyCollection)]
    steps, rate, low, high = rolling_success([m["env_steps"] for m in metrics], [m["success"] for m in metrics], 20)
    assert (low[0], high[0]) == pytest.approx(wilson_interval(round(rate[0] * 20), 20))
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(low.min()) and ys.max() == pytest.approx(high.max())  # the band is the Wilson one
    assert (tmp_path / "curve.png").stat().st_size > 0
    monkeypatch.undo()
    plt.close(figure)


def test_seed_curves_band_the_mean_by_bootstrap_across_seeds_and_one_seed_by_wilson(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    curves = [
        [{"env_steps": s, "success": p, "episodes": 20, "ci95": list(wilson_interval(round(p * 20), 20))} for s, p in c]
        for c in ([(1000, 0.1), (2000, 0.5)], [(1000, 0.3), (2000, 0.9)], [(1000, 0.2), (2000, 0.6)])
    ]
    band = plot_seed_curves("three", curves, tmp_path / "three.png", target=0.8, reps=REPS)
    assert band["mean"] == pytest.approx([0.2, 2.0 / 3.0])
    assert all(lo <= m <= hi for lo, m, hi in zip(band["low"], band["mean"], band["high"], strict=True))
    assert band["low"][1] < band["mean"][1] < band["high"][1]  # three different seeds: a band, not a line
    mean, low, high = curve_band([[0.1, 0.5], [0.3, 0.9], [0.2, 0.6]], reps=REPS)
    assert low.tolist() == band["low"] and high.tolist() == band["high"]
    one = plot_seed_curves("one", curves[:1], tmp_path / "one.png", reps=REPS)
    assert (one["low"], one["high"]) == ([c["ci95"][0] for c in curves[0]], [c["ci95"][1] for c in curves[0]])
    assert all(any(isinstance(c, PolyCollection) for c in f.axes[0].collections) for f in figures)
    monkeypatch.undo()
    for figure in figures:
        plt.close(figure)
