"""bench/learning.py's safety-of-learning statistics (the figures BENCHMARKS.md judges the residual by)."""

import numpy as np
import pytest

from bench.learning import safety_statistics


def test_a_run_equal_to_the_base_loses_nothing_window_for_window_though_its_lowest_window_is_below_the_mean():
    base = np.array([1, 0] * 30 + [0] * 6 + [1] * 14, float)  # a streak of failures: the base's own worst window
    stats = safety_statistics(base.copy(), base, 50)
    assert stats["paired_drop_points"] == 0.0 and stats["paired_met"]
    assert stats["drop_points"] == pytest.approx(100 * (base.mean() - stats["min_rolling_success"]), abs=0.1)
    assert stats["drop_points"] > 0  # the strict reading counts the base's own bad stretch against the run


def test_six_more_failures_in_one_window_are_twelve_points_and_miss_the_margin():
    base = np.ones(80)
    run = base.copy()
    run[40:46] = 0  # six episodes the base won, lost by the run
    stats = safety_statistics(run, base, 50)
    assert stats["paired_drop_points"] == pytest.approx(12.0) and not stats["paired_met"]
    assert stats["drop_points"] == pytest.approx(12.0) and not stats["met"]
    run[40] = 1  # five: exactly the 10-point margin, met
    assert safety_statistics(run, base, 50)["paired_met"]
