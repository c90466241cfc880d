"""`OpenCVCamera`'s capture path on real decoded frames: a video file the test writes with OpenCV, opened by path
through the real class (a recorded session replayed as a camera), checked for RGB order, the resize, real-time
pacing and timestamps, the frozen-frame check and the end of the recording."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from hardware.cameras import CameraError, OpenCVCamera

VIDEO_HW, CAMERA_HW, FPS = (48, 64), (24, 32), 50.0
RED, MOVING = 8, 16  # frames: solid red, then a white square moving right on black


def write_video(path: Path, frames: list[np.ndarray]) -> Path:
    """MJPG in AVI: every frame coded on its own, so identical frames decode to identical bytes."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), FPS, VIDEO_HW[::-1])
    assert writer.isOpened(), "OpenCV cannot write MJPG video here"
    for frame in frames:
        writer.write(frame)  # BGR, as OpenCV writes
    writer.release()
    return path


def red_bgr() -> np.ndarray:
    frame = np.zeros((*VIDEO_HW, 3), np.uint8)
    frame[..., 2] = 255
    return frame


def square_at(column: int) -> np.ndarray:
    frame = np.zeros((*VIDEO_HW, 3), np.uint8)
    frame[16:32, column : column + 12] = 255
    return frame


def frames_until_the_end(cam: OpenCVCamera) -> tuple[list, str]:
    """Every frame the camera serves, in order, and the error it ends with."""
    seen, seq = [], -1
    while True:
        try:
            frame = cam.wait_frame(after_seq=seq, timeout_s=2.0)
        except CameraError as e:
            return seen, str(e)
        seen.append(frame)
        seq = frame.seq


def test_a_video_file_is_a_camera_rgb_resized_paced_and_stamped_then_ends_naming_the_end(tmp_path):
    video = write_video(tmp_path / "session.avi", [red_bgr()] * RED + [square_at(2 + 3 * i) for i in range(MOVING)])
    cam = OpenCVCamera("replay", device=str(video), width=CAMERA_HW[1], height=CAMERA_HW[0], fps=FPS, buffer=64)
    with cam:
        seen, ended = frames_until_the_end(cam)
    assert cam.video_file and 0.8 * (RED + MOVING) <= len(seen) <= RED + MOVING, len(seen)
    assert all(f.image.shape == (*CAMERA_HW, 3) and f.image.dtype == np.uint8 for f in seen)  # resized to the config
    red = [f.image for f in seen if f.seq < RED]
    assert red and all(im[..., 0].min() > 200 and im[..., 1:].max() < 50 for im in red), "a red frame comes out red"
    squares = [f for f in seen if f.seq >= RED]
    columns = [np.nonzero(f.image.mean(2).max(0) > 100)[0].mean() for f in squares]
    assert np.all(np.diff(columns) > 0), columns  # the square moves right, frame after frame, in order
    stamps = np.array([f.t for f in seen])
    seqs = np.array([f.seq for f in seen])
    assert np.all(np.diff(stamps) > 0)
    # played in real time at `fps`, not as fast as it decodes
    assert (stamps[-1] - stamps[0]) >= 0.9 * (seqs[-1] - seqs[0]) / FPS, (stamps[-1] - stamps[0], seqs[-1] - seqs[0])
    assert f"end of the video {video} after {RED + MOVING} frames" in ended, ended


def test_a_video_whose_frames_repeat_is_reported_frozen(tmp_path):
    moving = [square_at(2 + 3 * i) for i in range(15)]
    video = write_video(tmp_path / "stuck.avi", moving + [moving[-1]] * 40)
    # a generous staleness bound: on a loaded machine a late read must not be reported before the repeats are
    cam = OpenCVCamera(
        "stuck", device=str(video), width=VIDEO_HW[1], height=VIDEO_HW[0], fps=FPS, frozen_after=10, max_age_s=5.0
    )
    with cam:
        seq = cam.wait_frame(timeout_s=2.0).seq  # while the square moves, frames are served
        with pytest.raises(CameraError, match="frozen: the last 10 frames are byte-identical"):
            for _ in range(60):
                seq = cam.wait_frame(after_seq=seq, timeout_s=2.0).seq
    assert 14 + 10 - 1 <= seq + 1 <= 15 + 40, seq  # raised once ten repeats were in, before the video ended


def test_a_missing_video_file_is_refused_naming_it(tmp_path):
    cam = OpenCVCamera("replay", device=str(tmp_path / "nope.avi"), width=32, height=24)
    with pytest.raises(CameraError, match="nope.avi"):
        cam.start(timeout_s=1.0)
