"""Evaluation: deterministic episodes on a fixed seed set, judged by the simulator's ground truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from tqdm import tqdm

from robo_rl.data.demos import rollout_episode
from robo_rl.eval.video import render_frame, write_mp4
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


def evaluate_policy(
    env,
    policy,
    episodes: int,
    seed: int,
    progress: bool = False,
    video_dir: Path | None = None,
    video_episodes: int = 0,
) -> dict:
    """Success rate (with a Wilson 95% interval) and episode lengths over seeds seed..seed+episodes-1.

    With `video_dir`, the first `video_episodes` episodes are filmed (an MP4 each, one frame per step plus the
    reset frame), and the first success and first failure among the rest too when the filmed ones lack one:
    those are replayed from their seed (policy and env are deterministic) rather than filming every episode."""
    act = lambda o: policy_action(policy, o, True)  # noqa: E731
    new_episode = getattr(policy, "reset", lambda: None)  # a policy with per-episode state (a base's chunk queue)
    results, videos = [], []
    for i in tqdm(range(episodes), desc="evaluation", unit="ep", disable=not progress):
        filmed = video_dir is not None and i < video_episodes
        new_episode()
        result, frames = _run_episode(env, act, seed + i, i, film=filmed)
        results.append(result)
        if filmed:
            videos.append(_save_video(env, video_dir, result, frames))
    if video_dir is not None:
        for outcome in (True, False):  # one success and one failure kept, where there is one
            if any(v["success"] == outcome for v in videos):
                continue
            i = next((j for j, r in enumerate(results) if r["success"] == outcome), None)
            if i is not None:
                new_episode()
                result, frames = _run_episode(env, act, seed + i, i, film=True)
                videos.append(_save_video(env, video_dir, {**result, "replayed": True}, frames))
    k = sum(r["success"] for r in results)
    low, high = wilson_interval(k, episodes)
    out = {
        "episodes": episodes,
        "successes": k,
        "success_rate": k / episodes,
        "success_ci95": [low, high],
        "mean_length": float(np.mean([r["length"] for r in results])),
        "mean_return": float(np.mean([r["return"] for r in results])),
        "per_episode": results,
    }
    if video_dir is not None:
        out["videos"] = sorted(videos, key=lambda v: v["episode"])
    return out


def _run_episode(env, act, seed: int, index: int, film: bool) -> tuple[dict, list[np.ndarray]]:
    """One deterministic episode; with `film`, a frame before every action and one after the last step."""
    frames: list[np.ndarray] = []
    if film:
        filmed_act = act

        def act(obs):
            frames.append(render_frame(env))
            return filmed_act(obs)

    records, success = rollout_episode(env, act, seed, index)
    if film:
        frames.append(render_frame(env))
    result = {
        "episode": index,
        "seed": seed,
        "success": success,
        "length": len(records) - 1,
        "return": float(sum(r["reward"] for r in records[1:])),
    }
    return result, frames


def _save_video(env, video_dir: Path, result: dict, frames: list[np.ndarray]) -> dict:
    name = f"episode_{result['episode']:03d}_seed{result['seed']}_{'success' if result['success'] else 'failure'}.mp4"
    fps = float(getattr(getattr(env, "unwrapped", env), "control_hz", 10.0))
    write_mp4(Path(video_dir) / name, frames, fps)
    return {**result, "path": f"{Path(video_dir).name}/{name}", "frames": len(frames)}


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
    ax2.set(xlabel="env steps", ylabel="episode return", title="return")
    ax1.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(out_dir: Path, result: dict, checkpoint: str, env_steps: int, metrics_path: Path | None) -> Path:
    """report.json, report.md (linking any videos) and learning_curve.png in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {**result, "checkpoint": checkpoint, "env_steps": env_steps}
    (out / "report.json").write_text(json.dumps(result, indent=2))
    low, high = result["success_ci95"]
    text = (
        f"# Evaluation\n\ncheckpoint: `{checkpoint}` (after {env_steps} env steps)\n\n"
        f"| episodes | success rate | Wilson 95% CI | mean length | mean return |\n|---|---|---|---|---|\n"
        f"| {result['episodes']} | {result['success_rate']:.2f} | [{low:.2f}, {high:.2f}] "
        f"| {result['mean_length']:.1f} | {result['mean_return']:.2f} |\n\n![learning curve](learning_curve.png)\n"
    )
    if result.get("videos"):
        text += "\n## Videos\n\n| episode | seed | outcome | steps | video |\n|---|---|---|---|---|\n"
        for v in result["videos"]:
            outcome = "success" if v["success"] else "failure"
            link = f"[{Path(v['path']).name}]({v['path']})"
            text += f"| {v['episode']} | {v['seed']} | {outcome} | {v['length']} | {link} |\n"
    (out / "report.md").write_text(text)
    metrics = read_metrics(Path(metrics_path)) if metrics_path is not None else []
    plot_learning_curve(metrics, out / "learning_curve.png", result)
    return out / "report.md"
