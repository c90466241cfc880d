"""Evaluation videos: frames from the env's Gymnasium `render()` (rgb_array), written as H.264 MP4 with PyAV."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from robo_rl.config import ConfigError


class VideoError(ConfigError):
    """The env cannot be filmed, or a video cannot be written; the text says which and why."""


def render_frame(env) -> np.ndarray:
    """One uint8 HxWx3 frame of the env as it is now, from `env.render()` (Gymnasium's rgb_array mode)."""
    name = type(getattr(env, "unwrapped", env)).__name__
    try:
        frame = env.render()
    except NotImplementedError:
        frame = None
    if frame is None:
        raise VideoError(
            f"eval.video=true, but {name}.render() gives no image (it needs Gymnasium's rgb_array "
            "render); set eval.video=false for this env"
        )
    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise VideoError(f"{name}.render() must give uint8 HxWx3, got {frame.dtype}{list(frame.shape)}")
    return frame


def write_mp4(path: str | Path, frames: list[np.ndarray], fps: float) -> Path:
    """Write `frames` (uint8 HxWx3, all one size) as an H.264 MP4 playing at `fps` frames per second."""
    import av

    if not frames:
        raise VideoError(f"no frames to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = frames[0].shape[:2]
    pad_h, pad_w = height % 2, width % 2  # H.264 in yuv420p needs even sides
    tmp = path.with_name(path.name + ".part")
    with av.open(str(tmp), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = width + pad_w, height + pad_h, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast"}
        for frame in frames:
            if pad_h or pad_w:
                frame = np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
        container.mux(stream.encode())  # flush the encoder's delayed frames
    tmp.replace(path)  # a killed eval never leaves half a video under the final name
    return path


def count_frames(path: str | Path) -> int:
    """How many frames an MP4 decodes to."""
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))
