"""Cameras for the robot drivers: each on its own capture thread, timestamped, at a fixed size, and checked for age.

A robot policy that acts on an old image acts on a world that is gone, so a camera that stops delivering (stale),
repeats one image (frozen) or fails its reads (unplugged) is an error raised by `latest()` / `at()`, never a silent
reuse of the last frame. The capture thread keeps the last few frames with their capture time (`Frame.t`,
`time.monotonic()`), so the env can pick the frame nearest to its proprioception reading with `at(t)` and say how
old the observation is (`Frame.age()`).

    cam = make_camera({"_target_": "hardware.cameras.OpenCVCamera", "device": "/dev/video2", "width": 128,
                       "height": 128}, name="wrist")
    with cam:                     # start(): opens the device and waits for the first frame
        frame = cam.at(t_state)   # uint8 [128, 128, 3] RGB, nearest to t_state; raises CameraError if not fresh

In a config (`env.cameras`): `wrist: {_target_: hardware.cameras.OpenCVCamera, device: /dev/video2, width: 128}`.
Classes: `OpenCVCamera` (USB/V4L2, `opencv.py`), `RealSenseCamera` (pyrealsense2, the `realsense` extra,
`realsense.py`), `FakeCamera` (tests, the doctor and the benchmark; its `mode` plays the failures, `fake.py`), and
`hardware.twin_camera.TwinCamera` (a view of the arm's twin). A camera class defined elsewhere plugs in by its own
`_target_`: it subclasses `Camera` (`base.py`) and implements `_open`, `_grab`, `_close`.
"""

from hardware.cameras.base import (
    FINGERPRINT_PIXELS,
    PLAUSIBLE_DEVICE_DELAY_S,
    Camera,
    CameraDependencyError,
    CameraError,
    Frame,
)
from hardware.cameras.discovery import find_cameras
from hardware.cameras.factory import CAMERA_CLASSES, CameraSpecError, camera_class, camera_options, make_camera
from hardware.cameras.fake import FakeCamera
from hardware.cameras.opencv import OpenCVCamera
from hardware.cameras.realsense import REALSENSE_HINT, RealSenseCamera

__all__ = [
    "CAMERA_CLASSES",
    "FINGERPRINT_PIXELS",
    "PLAUSIBLE_DEVICE_DELAY_S",
    "REALSENSE_HINT",
    "Camera",
    "CameraDependencyError",
    "CameraError",
    "CameraSpecError",
    "FakeCamera",
    "Frame",
    "OpenCVCamera",
    "RealSenseCamera",
    "camera_class",
    "camera_options",
    "find_cameras",
    "make_camera",
]
