"""bench/headlines.py: a headline comparison restated from result files (synthetic files here, planted outcomes)."""

import json

import pytest

from bench.headlines import COMPARISONS, RESULTS, Arm, Comparison, arm_outcomes, restate_all
from robo_rl.eval.wilson import wilson_interval


def _learning_file(folder, name, per_seed):
    """A bench/learning.py-shaped result file: per seed a curve of (env steps, successes, episodes)."""
    runs = [
        {"seed": seed, "curve": [{"env_steps": e, "success": k / n, "episodes": n} for e, k, n in points]}
        for seed, points in per_seed.items()
    ]
    (folder / f"{name}.json").write_text(json.dumps({"runs": runs}))


def _restated(tmp_path, x: Arm, y: Arm, reps: int = 0) -> dict:
    """The comparison restated; rliable's bootstrap (reps > 0) only where a test reads it (its import takes seconds)."""
    (row,) = restate_all((Comparison("k", "family", "scene", "claim", x, y),), tmp_path, reps=reps)
    return row


def test_a_planted_gain_of_35_points_on_three_seeds_is_detected_and_every_seed_of_x_beats_every_seed_of_y(tmp_path):
    _learning_file(tmp_path, "x", {s: [(1000, 5, 20), (6000, 45, 50)] for s in range(3)})
    _learning_file(tmp_path, "y", {s: [(1000, 10, 20), (6000, 26 + s, 50)] for s in range(3)})
    row = _restated(tmp_path, Arm("x", ("x",)), Arm("y", ("y",)), reps=100)
    assert (row["x"]["successes"], row["x"]["episodes"]) == (135, 150)  # the final points, pooled over seeds
    assert (row["y"]["successes"], row["y"]["episodes"]) == (81, 150)
    assert row["x"]["wilson95"] == pytest.approx(wilson_interval(135, 150), abs=1e-4)
    assert row["probability_of_improvement"] == {"point": 1.0, "low": 1.0, "high": 1.0}
    assert row["poi_reading"] == "X better"
    assert row["fisher_p"] < 1e-6 and row["verdict"] == "detected"
    assert row["minimum_detectable_gain"] < 0.2 and not row["ceiling"]
    assert "1/18" in row["seeds_note"]  # 3 x 3 seeds: a coarse probability of improvement
    assert row["seed_level_min_p"] == pytest.approx(0.1)  # 2 of the 20 orderings of 3 + 3 seeds


def test_the_curve_point_nearest_the_env_steps_asked_is_the_one_compared(tmp_path):
    _learning_file(tmp_path, "x", {0: [(1005, 4, 20), (2008, 9, 20), (6000, 45, 50)], 1: [(998, 3, 20), (6003, 1, 50)]})
    assert arm_outcomes(Arm("x", ("x",), at=1200), tmp_path) == [(0, 4, 20), (1, 3, 20)]
    assert arm_outcomes(Arm("x", ("x",), at=1800), tmp_path) == [(0, 9, 20), (1, 3, 20)]
    assert arm_outcomes(Arm("x", ("x",)), tmp_path) == [(0, 45, 50), (1, 1, 50)]


def test_five_points_on_60_episodes_a_side_is_underpowered_for_ten(tmp_path):
    _learning_file(tmp_path, "x", {0: [(6000, 12, 20)], 1: [(6000, 11, 20)], 2: [(6000, 13, 20)]})
    _learning_file(tmp_path, "y", {0: [(6000, 11, 20)], 1: [(6000, 12, 20)], 2: [(6000, 10, 20)]})
    row = _restated(tmp_path, Arm("x", ("x",)), Arm("y", ("y",)))
    assert row["difference_points"] == pytest.approx(5.0)
    assert row["fisher_p"] > 0.05
    assert row["minimum_detectable_gain"] > 0.10  # 60 episodes a side cannot see +10 points from 0.55
    assert row["verdict"] == "underpowered"
    assert row["episodes_per_arm_for_gain"] == 376  # robo-rl eval plan baseline=0.55 gain=0.10
    assert row["probability_of_improvement"] is None  # no bootstrap asked for


def test_a_baseline_at_one_leaves_no_room_for_the_gain_asked(tmp_path):
    _learning_file(tmp_path, "x", {s: [(30000, 49, 50)] for s in range(3)})
    _learning_file(tmp_path, "y", {s: [(30000, 50, 50)] for s in range(3)})
    row = _restated(tmp_path, Arm("x", ("x",)), Arm("y", ("y",)))
    assert row["ceiling"] and row["minimum_detectable_gain"] is None
    assert row["verdict"] == "underpowered"  # part A's word for it, which the table marks as the ceiling


def test_a_baseline_that_never_succeeded_is_detected_against_without_a_plan(tmp_path):
    _learning_file(tmp_path, "x", {s: [(6000, 20, 50)] for s in range(3)})
    _learning_file(tmp_path, "y", {s: [(6000, 0, 50)] for s in range(3)})
    row = _restated(tmp_path, Arm("x", ("x",)), Arm("y", ("y",)))
    assert row["verdict"] == "detected" and row["episodes_per_arm_for_gain"] is None


def test_quoted_rates_and_per_seed_records_read_as_counts(tmp_path):
    assert arm_outcomes(Arm("base", quoted=(0.34, 0.76), episodes=50), tmp_path) == [(0, 17, 50), (1, 38, 50)]
    records = {
        "runs": [{"seed": 1, "base": {"success": 0.585, "episodes": 200}, "x0": {"successes": 21, "episodes": 50}}]
    }
    (tmp_path / "r.json").write_text(json.dumps(records))
    assert arm_outcomes(Arm("base", ("r",), field="base"), tmp_path) == [(1, 117, 200)]
    assert arm_outcomes(Arm("x0", ("r",), field="x0"), tmp_path) == [(1, 21, 50)]
    with pytest.raises(ValueError, match="each seed once"):
        arm_outcomes(Arm("twice", ("r", "r"), field="base"), tmp_path)


def test_every_headline_reads_from_the_repositorys_result_files_with_two_seeds_or_more_a_side():
    for c in COMPARISONS:
        x, y = arm_outcomes(c.x, RESULTS), arm_outcomes(c.y, RESULTS)
        assert len(x) >= 2 and len(y) >= 2, c.key
        assert all(0 <= k <= n for _, k, n in x + y), c.key
