"""Report clips: one success and one failure episode per condition, replayed and filmed as small GIFs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robo_rl.eval.conditions import Condition
from robo_rl.eval.episodes import build_env, load_policy, run_episode

CLIP_SIZE_PX = 96  # longest side of a report clip
CLIP_MAX_FRAMES = 60  # a longer episode is subsampled evenly (its first and last frame kept)


# --- clips --------------------------------------------------------------------------------------------------------
def film_condition(cfg, payload: dict, cond: Condition, episodes: list[dict], clip_dir: Path) -> dict:
    """One success and one failure of the condition, replayed from their seeds (policy and env are deterministic)
    and written as small GIFs; {} when the env cannot render (the report says so)."""
    from robo_rl.eval.video import VideoError

    picks = {
        outcome: next((r for r in episodes if r["success"] == (outcome == "success")), None)
        for outcome in ("success", "failure")
    }
    if not any(picks.values()):
        return {}
    env = build_env(cfg)
    clips = {}
    try:
        policy = load_policy(cfg, env, payload)
        fps = float(getattr(env, "control_hz", 10.0))
        for outcome, episode in picks.items():
            if episode is None:
                continue
            result, frames = run_episode(env, policy, episode["seed"], episode["episode"], film=True)
            path = write_gif(Path(clip_dir) / f"{cond.name}_{outcome}.gif", frames, fps)
            clips[outcome] = {
                "path": f"{Path(clip_dir).name}/{path.name}",
                "episode": episode["episode"],
                "seed": episode["seed"],
                "replayed_as_evaluated": result["success"] == episode["success"],
            }
    except VideoError as e:
        clips = {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - a clip that cannot be made must not lose the evaluation
        clips = {"error": f"no clip: {type(e).__name__}: {e}"}
    finally:
        env.close()
    return clips


def write_gif(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    """At most CLIP_MAX_FRAMES frames (evenly picked, playing in the episode's real time), CLIP_SIZE_PX at most."""
    from PIL import Image

    picked = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), CLIP_MAX_FRAMES)).round().astype(int))
    height, width = frames[0].shape[:2]
    scale = min(1.0, CLIP_SIZE_PX / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    images = [Image.fromarray(np.ascontiguousarray(frames[i])).resize(size, Image.BILINEAR) for i in picked]
    frame_ms = max(20, round(1000.0 * len(frames) / fps / len(images)))  # GIF players floor shorter delays
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=frame_ms, loop=0)
    tmp.replace(path)
    return path
