"""Evaluation: deterministic episodes on a fixed seed set, judged by the simulator's ground truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from tqdm import tqdm

from robo_rl.demos import rollout_episode
from robo_rl.policy_io import policy_action
from robo_rl.runs import read_metrics


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def evaluate_policy(env, policy, episodes: int, seed: int, progress: bool = False) -> dict:
    """Success rate (with a Wilson 95% interval) and episode lengths over seeds seed..seed+episodes-1."""
    results = []
    for i in tqdm(range(episodes), desc="evaluation", unit="ep", disable=not progress):
        records, success = rollout_episode(env, lambda o: policy_action(policy, o, True), seed + i, i)
        results.append({"seed": seed + i, "success": success, "length": len(records) - 1,
                        "return": float(sum(r["reward"] for r in records[1:]))})  # fmt: skip
    k = sum(r["success"] for r in results)
    low, high = wilson_interval(k, episodes)
    return {
        "episodes": episodes,
        "successes": k,
        "success_rate": k / episodes,
        "success_ci95": [low, high],
        "mean_length": float(np.mean([r["length"] for r in results])),
        "mean_return": float(np.mean([r["return"] for r in results])),
        "per_episode": results,
    }


def plot_learning_curve(metrics: list[dict], path: Path, final: dict | None = None) -> None:
    """Training-episode success (rolling) and return against env steps, with the final evaluation point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes = [m for m in metrics if m.get("kind") == "episode"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    if episodes:
        steps = np.array([m["env_steps"] for m in episodes])
        succ = np.array([float(m["success"]) for m in episodes])
        ret = np.array([m["return"] for m in episodes])
        w = max(1, min(20, len(episodes) // 5))
        kernel = np.ones(w) / w
        ax1.plot(steps[w - 1 :], np.convolve(succ, kernel, "valid"), label=f"training episodes (rolling {w})")
        ax2.plot(steps[w - 1 :], np.convolve(ret, kernel, "valid"))
    if final is not None:
        low, high = final["success_ci95"]
        x = final.get("env_steps", episodes[-1]["env_steps"] if episodes else 0)
        p = final["success_rate"]
        ax1.errorbar([x], [p], yerr=[[max(0.0, p - low)], [max(0.0, high - p)]],
                     fmt="o", color="C3", capsize=4, label=f"evaluation ({final['episodes']} ep, 95% CI)")  # fmt: skip
    ax1.set(xlabel="env steps", ylabel="success rate", ylim=(-0.02, 1.02), title="success")
    ax2.set(xlabel="env steps", ylabel="episode return", title="return")
    ax1.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(run_dir: Path, result: dict, checkpoint: str, env_steps: int) -> Path:
    """eval/report.json, eval/report.md and eval/learning_curve.png in the run folder."""
    out = Path(run_dir) / "eval"
    out.mkdir(exist_ok=True)
    result = {**result, "checkpoint": checkpoint, "env_steps": env_steps}
    (out / "report.json").write_text(json.dumps(result, indent=2))
    low, high = result["success_ci95"]
    (out / "report.md").write_text(
        f"# Evaluation\n\ncheckpoint: `{checkpoint}` (after {env_steps} env steps)\n\n"
        f"| episodes | success rate | Wilson 95% CI | mean length | mean return |\n|---|---|---|---|---|\n"
        f"| {result['episodes']} | {result['success_rate']:.2f} | [{low:.2f}, {high:.2f}] "
        f"| {result['mean_length']:.1f} | {result['mean_return']:.2f} |\n\n![learning curve](learning_curve.png)\n"
    )
    plot_learning_curve(read_metrics(Path(run_dir) / "metrics.jsonl"), out / "learning_curve.png", result)
    return out / "report.md"
