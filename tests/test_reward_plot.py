"""`robo-rl reward eval`'s picture (robo_rl/rewards/plot.py) says what its lines are: a legend naming the successful
and failed episodes, and the success threshold drawn where the model (or the shaper's default) puts it."""

from __future__ import annotations

import numpy as np
import pytest

from robo_rl.data.datasets import Episode
from robo_rl.rewards.classifier import SuccessClassifier
from robo_rl.rewards.plot import DEFAULT_SUCCESS_THRESHOLD, plot_scores, scores_figure

SIZE, T = 16, 6
SMALL = {"channels": 4, "features": 8, "hidden": 8, "resize": None, "kernels": [3], "strides": [2]}


def _episodes(n: int) -> list[Episode]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        flags = np.zeros(T + 1, bool)
        flags[-2:] = i % 2 == 0
        out.append(Episode({"image/top": rng.integers(0, 255, (T + 1, SIZE, SIZE, 3), np.uint8), "success": flags}))
    return out


def _horizontal_lines_at(ax) -> list[float]:
    return [float(line.get_ydata()[0]) for line in ax.get_lines() if len(set(line.get_ydata())) == 1]


@pytest.mark.parametrize("threshold", [0.7, None])
def test_the_success_plot_has_a_legend_and_its_threshold(tmp_path, threshold):
    import matplotlib.pyplot as plt  # here, not at the top: every worker imports each test module to collect it

    model = SuccessClassifier(["top"], ["pick"], **SMALL | {"image_sizes": {"top": [SIZE, SIZE]}})
    model.threshold = threshold  # None: a model that chose none is scored at the shaper's default
    episodes = _episodes(4)
    fig = scores_figure(model, episodes, "pick")
    ax = fig.axes[0]
    wanted = DEFAULT_SUCCESS_THRESHOLD if threshold is None else threshold
    assert wanted in _horizontal_lines_at(ax)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["successful episodes (2)", "failed episodes (2)", f"success threshold {wanted:.2f}"]
    assert ax.get_ylabel() == "success probability" and ax.get_xlabel() == "step"
    plt.close(fig)
    plot_scores(model, episodes, "pick", tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 1000
