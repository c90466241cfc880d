"""Learning curves with their intervals: a run's curve with the Wilson 95% interval of each point (a success rate of
a few episodes), and the curves of several seeds as their mean with a stratified bootstrap band across seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robo_rl.eval.wilson import wilson_interval


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def rolling_success(steps, success, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(env steps, rolling success rate, Wilson low, Wilson high) over windows of `window` episodes."""
    success = np.asarray(success, float)
    if len(success) < window:
        empty = np.array([])
        return empty, empty, empty, empty
    counts = np.convolve(success, np.ones(window), "valid")
    bounds = np.array([wilson_interval(int(round(k)), window) for k in counts]).reshape(-1, 2)
    return np.asarray(steps)[window - 1 :], counts / window, bounds[:, 0], bounds[:, 1]


def plot_learning_curve(metrics: list[dict], path: Path, final: dict | None = None) -> None:
    """Training-episode success (rolling, with the Wilson 95% band of each window) and return against env steps,
    with the final evaluation point and its interval."""
    plt = _pyplot()
    episodes = [m for m in metrics if m.get("kind") == "episode"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    w = max(1, min(20, len(episodes) // 5))
    if not episodes:  # an empty panel would read as a plotting failure
        for ax in (ax1, ax2):
            ax.text(0.5, 0.5, "no training episodes in this run's metrics", ha="center", transform=ax.transAxes)
    else:
        steps = np.array([m["env_steps"] for m in episodes])
        ret = np.array([m["return"] for m in episodes])
        x, rate, low, high = rolling_success(steps, [float(m["success"]) for m in episodes], w)
        ax1.plot(x, rate, label=f"training episodes (rolling {w})")
        ax1.fill_between(x, low, high, alpha=0.25, label=f"Wilson 95% CI ({w} episodes)")
        ax2.plot(steps[w - 1 :], np.convolve(ret, np.ones(w) / w, "valid"))
    if final is not None:
        low, high = final["success_ci95"]
        x = final.get("env_steps", episodes[-1]["env_steps"] if episodes else 0)
        p = final["success_rate"]
        ax1.errorbar(
            [x],
            [p],
            yerr=[[max(0.0, p - low)], [max(0.0, high - p)]],
            fmt="o",
            color="C3",
            capsize=4,
            label=f"evaluation ({final['episodes']} ep, 95% CI)",
        )
    ax1.set(xlabel="env steps", ylabel="success rate", ylim=(-0.02, 1.02), title="success")
    ax2.set(xlabel="env steps", ylabel="episode return", title=f"return (training episodes, rolling {w})")
    ax1.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_seed_curves(
    name: str, curves: list[list[dict]], path: Path, target: float | None = None, reps: int = 2000, seed: int = 0
) -> dict:
    """Evaluation success against env steps for several seeds (each point: env_steps, success, episodes, ci95): the
    mean over seeds with its stratified bootstrap 95% band and each seed's curve; one seed: its Wilson band. Returns
    the plotted grid, mean and band."""
    from robo_rl.eval.aggregate import curve_band

    plt = _pyplot()
    steps = sorted({p["env_steps"] for c in curves for p in c})
    grid = np.array(
        [[np.interp(s, [p["env_steps"] for p in c], [p["success"] for p in c]) for s in steps] for c in curves]
    )
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if len(curves) == 1:
        low, high = (np.array([p["ci95"][i] for p in curves[0]]) for i in (0, 1))
        mean = grid[0]
        ax.plot(steps, mean, label="one seed")
        ax.fill_between(steps, low, high, alpha=0.25, label="Wilson 95% CI per evaluation")
    else:
        mean, low, high = curve_band(grid, reps=reps, seed=seed)
        for row in grid:
            ax.plot(steps, row, color="C0", alpha=0.3, linewidth=0.8)
        ax.plot(steps, mean, color="C0", label=f"mean of {len(curves)} seeds")
        ax.fill_between(steps, low, high, color="C0", alpha=0.25, label="95% bootstrap CI across seeds")
    if target is not None:
        ax.axhline(target, color="gray", linestyle="--", label=f"target {target}")
    ax.set(xlabel="env steps", ylabel="evaluation success", ylim=(-0.02, 1.02), title=name)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return {
        "env_steps": steps,
        "mean": list(map(float, mean)),
        "low": list(map(float, low)),
        "high": list(map(float, high)),
    }
