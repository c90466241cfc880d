"""The picture of a reward model's scores along held-out episodes (`robo-rl reward eval`'s report.png): its success
probability against the threshold a shaper turns into a success, and for a progress critic its summed pairwise
progress forward and along the reversed episode; successful episodes green, failed ones red, with a legend."""

from __future__ import annotations

from pathlib import Path

DEFAULT_SUCCESS_THRESHOLD = 0.5  # the shaper's success_threshold for a model that chose none (ShaperConfig)
SUCCESS_COLOUR, FAILURE_COLOUR = "tab:green", "tab:red"


def scores_figure(model, episodes, instruction: str, most: int = 8):
    """A matplotlib figure of the model's scores along up to `most` successful and `most` failed episodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D

    from robo_rl.rewards.base import Task

    pairwise = "delta" in model.provides
    fig, axes = plt.subplots(1, 3 if pairwise else 1, figsize=(15 if pairwise else 7, 4.2), squeeze=False)
    axes = axes[0]
    good = [e for e in episodes if e.success][:most]
    bad = [e for e in episodes if not e.success][:most]
    for e in good + bad:
        frames = {c: e.records[f"image/{c}"] for c in model.cameras}
        s = model.score_episode(frames, Task(instruction))
        colour = SUCCESS_COLOUR if e.success else FAILURE_COLOUR
        if s.success_prob is not None:
            axes[0].plot(s.success_prob, color=colour, alpha=0.6)
        if pairwise:
            axes[1].plot(np.cumsum(s.delta), color=colour, alpha=0.6)
            back = model.score_episode({c: f[::-1].copy() for c, f in frames.items()}, Task(instruction))
            axes[2].plot(np.cumsum(back.delta), color=colour, alpha=0.6)
    threshold = getattr(model, "threshold", None)
    threshold = DEFAULT_SUCCESS_THRESHOLD if threshold is None else float(threshold)
    axes[0].axhline(threshold, color="black", linestyle="--", linewidth=1)
    axes[0].set_ylim(-0.02, 1.02)
    titles = ["success probability", "summed pairwise progress", "the same, episode reversed (should fall)"]
    ylabels = ["success probability", "summed progress", "summed progress"]
    for ax, title, ylabel in zip(axes, titles, ylabels, strict=False):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
    handles = [
        Line2D([], [], color=SUCCESS_COLOUR, label=f"successful episodes ({len(good)})"),
        Line2D([], [], color=FAILURE_COLOUR, label=f"failed episodes ({len(bad)})"),
        Line2D([], [], color="black", linestyle="--", label=f"success threshold {threshold:.2f}"),
    ]
    axes[0].legend(handles=handles, loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def plot_scores(model, episodes, instruction: str, path: Path, most: int = 8) -> None:
    import matplotlib.pyplot as plt

    fig = scores_figure(model, episodes, instruction, most)
    fig.savefig(path, dpi=80)
    plt.close(fig)
