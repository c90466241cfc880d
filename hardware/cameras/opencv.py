"""`OpenCVCamera`: a USB (UVC) camera through OpenCV, V4L2 on Linux, or a recorded video file played as one."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import cv2
import numpy as np

from hardware.cameras.base import PLAUSIBLE_DEVICE_DELAY_S, Camera, CameraError

log = logging.getLogger(__name__)


def _backend_id(backend: str) -> int:
    names = {
        "any": "CAP_ANY",
        "v4l2": "CAP_V4L2",
        "ffmpeg": "CAP_FFMPEG",
        "gstreamer": "CAP_GSTREAMER",
        "dshow": "CAP_DSHOW",
        "msmf": "CAP_MSMF",
        "avfoundation": "CAP_AVFOUNDATION",
    }
    if backend not in names:
        raise ValueError(f"unknown OpenCV backend '{backend}' (backends: {', '.join(names)})")
    return getattr(cv2, names[backend])


class OpenCVCamera(Camera):
    """A USB (UVC) camera through OpenCV's V4L2 backend on Linux; `device` is an index or a /dev/videoN path (or, with
    backend="any", anything cv2.VideoCapture opens: a stream URL). MJPG by default, since most USB cameras give
    their larger sizes at full rate only compressed.

    `device` may also be a video file (a recorded session replayed as the camera): its frames are played at `fps`, in
    real time, each stamped when it is shown; at its end the camera fails as an unplugged one does, naming the end.
    """

    bgr = True

    def __init__(
        self,
        name: str,
        device: int | str = 0,
        width: int = 640,
        height: int = 480,
        fps: float = 30.0,
        fourcc: str | None = "MJPG",
        backend: str = "v4l2",
        **kw: Any,
    ) -> None:
        super().__init__(name, width, height, fps, **kw)
        if isinstance(device, str) and device.isdigit():
            device = int(device)
        if fourcc is not None and len(fourcc) != 4:
            raise ValueError(f"camera '{name}': fourcc must be four characters ('MJPG', 'YUYV'), not {fourcc!r}")
        self.index = device
        self.fourcc = fourcc
        linux = sys.platform.startswith("linux")
        self.device = f"/dev/video{device}" if isinstance(device, int) and linux else str(device)
        is_v4l2_device = isinstance(device, int) or self.device.startswith("/dev/")
        if backend == "v4l2" and not (linux and is_v4l2_device):
            backend = "any"  # V4L2 is Linux's: another system, or a URL, gets OpenCV's own choice
        self.backend = backend
        self._api = _backend_id(backend)
        self._cap: cv2.VideoCapture | None = None
        self.video_file = False  # set by _open: the device is a file on disk
        self._replay_start = 0.0  # time.monotonic() at which a video file's first frame was due
        self._replayed = 0  # frames of the video file shown so far

    def _open(self) -> None:
        if self.device.startswith("/dev/") and not os.path.exists(self.device):
            raise CameraError(
                f"camera '{self.name}': cannot open {self.device} (not found): is it plugged in? "
                f"`ls /dev/video*` lists the cameras there are"
            )
        self.video_file = not self.device.startswith("/dev/") and os.path.isfile(self.device)
        if self.video_file:
            self._open_video_file()
            return
        cap = cv2.VideoCapture(self.index, self._api)
        if not cap.isOpened():
            cap.release()
            raise CameraError(
                f"camera '{self.name}': cannot open {self.device} (not found / busy): is it plugged in, "
                f"and is no other process holding it (`fuser {self.device}`)?"
            )
        if self.fourcc:  # before the size: some drivers list their large sizes only under MJPG
            cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*self.fourcc))
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
        cap.set(cv2.CAP_PROP_FPS, self.fps)
        cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the newest frame, not one queued behind older ones
        if hasattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC"):  # a silent device fails the read rather than hanging close()
            cap.set(cv2.CAP_PROP_READ_TIMEOUT_MSEC, 1000)
        got = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if got != (self.width, self.height):
            log.info(
                "camera '%s': %s gives %dx%d; frames are resized to %dx%d",
                self.name,
                self.device,
                *got,
                self.width,
                self.height,
            )
        self._cap = cap

    def _open_video_file(self) -> None:
        cap = cv2.VideoCapture(self.device, self._api)
        if not cap.isOpened():
            cap.release()
            raise CameraError(f"camera '{self.name}': OpenCV cannot read {self.device} as a video (codec or format)")
        self._cap, self._replayed, self._replay_start = cap, 0, time.monotonic()

    def _grab_video_frame(self) -> tuple[np.ndarray, None]:
        ok, image = self._cap.read()
        if not ok or image is None:
            raise CameraError(f"end of the video {self.device} after {self._replayed} frames")
        period = 1.0 / self.fps
        now = time.monotonic()
        if now > self._replay_start + (self._replayed + 1) * period:  # fell behind by a frame: no burst to catch up
            self._replay_start = now - self._replayed * period
        self._stopping.wait(max(0.0, self._replay_start + self._replayed * period - now))
        self._replayed += 1
        return image, None  # stamped by the capture thread when it is shown

    def _grab(self) -> tuple[np.ndarray, float | None] | None:
        if self.video_file:
            return self._grab_video_frame()
        ok, image = self._cap.read()
        if not ok or image is None:
            return None
        # V4L2 stamps buffers on CLOCK_MONOTONIC (time.monotonic's clock on Linux); check, since drivers may differ
        t = self._cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
        return image, t if 0.0 <= time.monotonic() - t <= PLAUSIBLE_DEVICE_DELAY_S else None

    def _close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
