"""Aggregates across seeds and tasks, with rliable (Agarwal et al. 2021, "Deep RL at the edge of the statistical
precipice"): the interquartile mean, mean and optimality gap of a score matrix (runs x tasks, success rates in
[0, 1]), the probability that one recipe improves on another, and performance profiles, each with a stratified
bootstrap interval (runs resampled within each task). No aggregate statistic is computed here by hand.

The bootstrap repetitions are a parameter (reports use REPORT_REPS, tests a few hundred) and every bootstrap runs
under a fixed seed, so a report computed twice prints the same intervals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from robo_rl.errors import UserError
from robo_rl.seeding import global_numpy_seed

REPORT_REPS = 2000  # bootstrap repetitions of a report: the 95% bounds move by about 0.01 between seeds there
CONFIDENCE = 0.95
STATISTICS = ("iqm", "mean", "optimality_gap")  # optimality gap: how far below a success rate of 1, on average
PROFILE_TAUS = np.linspace(0.0, 1.0, 21)  # the success-rate thresholds of a performance profile


class ScoreMatrixError(UserError, ValueError):
    """A score matrix rliable cannot aggregate (empty, ragged, not success rates); the text names it."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap interval."""

    point: float
    low: float
    high: float

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self, digits: int = 2) -> str:
        return f"{self.point:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def score_matrix(scores, name: str = "scores") -> np.ndarray:
    """`scores` as a float (runs x tasks) array, checked: a 1-D list is one task's runs."""
    matrix = np.asarray(scores, dtype=float)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or matrix.size == 0:
        raise ScoreMatrixError(f"{name}: a score matrix is runs x tasks with at least one of each, got {matrix.shape}")
    if not np.isfinite(matrix).all() or matrix.min() < 0.0 or matrix.max() > 1.0:
        raise ScoreMatrixError(f"{name}: success rates lie in [0, 1], got values from {matrix.min()} to {matrix.max()}")
    return matrix


def _statistics(scores: np.ndarray) -> np.ndarray:
    from rliable import metrics

    return np.array(
        [metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores), metrics.aggregate_optimality_gap(scores)]
    )


def aggregate(
    scores: Mapping[str, object], reps: int = REPORT_REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> dict[str, dict[str, Estimate]]:
    """Per recipe (name -> runs x tasks success rates): IQM, mean and optimality gap with stratified bootstrap
    intervals (runs resampled within each task)."""
    from rliable import library

    matrices = {name: score_matrix(s, name) for name, s in scores.items()}
    with global_numpy_seed(seed):  # rliable draws from numpy's global generator
        points, intervals = library.get_interval_estimates(
            matrices, _statistics, reps=reps, confidence_interval_size=confidence
        )
    return {
        name: {
            stat: Estimate(float(points[name][i]), float(intervals[name][0, i]), float(intervals[name][1, i]))
            for i, stat in enumerate(STATISTICS)
        }
        for name in matrices
    }


def aggregate_gain(
    after, before, reps: int = REPORT_REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> dict[str, Estimate]:
    """RL's gain over its base, after − before per (run, task), paired (the same run's base, or each task's one base
    repeated): its IQM and mean with stratified bootstrap intervals (the runs' gains resampled within each task).
    A target such as "adds 20 points IQM, its 95% interval above +10" reads from `iqm` (in success-rate units)."""
    from rliable import library, metrics

    x, y = score_matrix(after, "after"), score_matrix(before, "before")
    if x.shape != y.shape:
        raise ScoreMatrixError(f"gain: after is {x.shape} (runs x tasks), before {y.shape}; pair them run by run")
    with global_numpy_seed(seed):  # rliable draws from numpy's global generator
        points, intervals = library.get_interval_estimates(
            {"gain": x - y},
            lambda g: np.array([metrics.aggregate_iqm(g), metrics.aggregate_mean(g)]),
            reps=reps,
            confidence_interval_size=confidence,
        )
    return {
        stat: Estimate(float(points["gain"][i]), float(intervals["gain"][0, i]), float(intervals["gain"][1, i]))
        for i, stat in enumerate(("iqm", "mean"))
    }


def probability_of_improvement(
    scores_x, scores_y, reps: int = REPORT_REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> Estimate:
    """P(X > Y): the probability that a run of recipe X scores above a run of Y on a task (ties count half), averaged
    over tasks; each recipe's runs resampled independently within each task."""
    from rliable import library, metrics

    x, y = score_matrix(scores_x, "X"), score_matrix(scores_y, "Y")
    if x.shape[1] != y.shape[1]:
        raise ScoreMatrixError(f"probability of improvement: X has {x.shape[1]} tasks, Y {y.shape[1]}")
    with global_numpy_seed(seed):  # rliable draws from numpy's global generator
        points, intervals = library.get_interval_estimates(
            {"x_over_y": [x, y]}, metrics.probability_of_improvement, reps=reps, confidence_interval_size=confidence
        )
    low, high = np.ravel(intervals["x_over_y"])
    return Estimate(float(points["x_over_y"]), float(low), float(high))


def performance_profiles(
    scores: Mapping[str, object], taus=PROFILE_TAUS, reps: int = REPORT_REPS, seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per recipe, the share of its (run, task) scores above each threshold in `taus`, and the (2 x taus) bootstrap
    band of that share."""
    from rliable import library

    matrices = {name: score_matrix(s, name) for name, s in scores.items()}
    with global_numpy_seed(seed):  # rliable draws from numpy's global generator
        return library.create_performance_profile(matrices, np.asarray(taus, float), reps=reps)


def plot_performance_profiles(
    scores: Mapping[str, object], path: Path, reps: int = REPORT_REPS, seed: int = 0, title: str = ""
) -> Path:
    """A PNG of each recipe's performance profile with its 95% band (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles, bands = performance_profiles(scores, PROFILE_TAUS, reps, seed)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for i, (name, profile) in enumerate(profiles.items()):
        ax.plot(PROFILE_TAUS, profile, color=f"C{i}", label=name)
        ax.fill_between(PROFILE_TAUS, bands[name][0], bands[name][1], color=f"C{i}", alpha=0.2)
    ax.set(
        xlabel="success rate τ",
        ylabel="share of runs x tasks above τ",
        xlim=(0, 1),
        ylim=(-0.02, 1.02),
        title=title or "performance profiles (95% stratified bootstrap bands)",
    )
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def curve_band(
    curves, reps: int = REPORT_REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Learning curves of several seeds on one grid (seeds x evaluation points): the mean over seeds at each point
    and its stratified bootstrap band (seeds resampled at each point), as rliable's sample-efficiency curves."""
    from rliable import library, metrics

    grid = score_matrix(curves, "curves")
    per_point = lambda s: metrics.aggregate_mean(s[:, None, :])  # each point a task of its own  # noqa: E731
    with global_numpy_seed(seed):  # rliable draws from numpy's global generator
        points, intervals = library.get_interval_estimates(
            {"curve": grid}, per_point, reps=reps, confidence_interval_size=confidence
        )
    return np.asarray(points["curve"], float), intervals["curve"][0], intervals["curve"][1]
