"""`RealSenseCamera`: an Intel RealSense colour stream through pyrealsense2 (the `realsense` extra, imported only
when such a camera is built)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hardware.cameras.base import PLAUSIBLE_DEVICE_DELAY_S, Camera, CameraDependencyError, CameraError

REALSENSE_HINT = "RealSense cameras need pyrealsense2: uv sync --extra realsense"


def _import_realsense() -> Any:
    try:
        import pyrealsense2 as rs
    except ImportError:
        raise CameraDependencyError(REALSENSE_HINT) from None
    return rs


class RealSenseCamera(Camera):
    """An Intel RealSense colour stream through pyrealsense2 (the `realsense` extra); `serial` picks one of several
    (None: the first found). Frames come as RGB from the device."""

    def __init__(
        self, name: str, serial: str | None = None, width: int = 640, height: int = 480, fps: float = 30.0, **kw: Any
    ) -> None:
        self._rs = _import_realsense()
        super().__init__(name, width, height, fps, **kw)
        self.serial = None if serial is None else str(serial)
        self.device = f"RealSense {self.serial}" if self.serial else "the first RealSense"
        self._pipeline = None

    def _open(self) -> None:
        rs = self._rs
        config = rs.config()
        if self.serial:
            config.enable_device(self.serial)
        # the device streams one of its own modes; the base resizes to the camera's size if they differ
        config.enable_stream(rs.stream.color, self.width, self.height, rs.format.rgb8, int(round(self.fps)))
        pipeline = rs.pipeline()
        try:
            pipeline.start(config)
        except RuntimeError as exc:
            raise CameraError(
                f"camera '{self.name}': cannot start {self.device} at {self.width}x{self.height} "
                f"{self.fps:g} fps ({exc}): is it on a USB 3 port, and does `rs-enumerate-devices` list "
                f"it and that mode?"
            ) from exc
        self._pipeline = pipeline

    def _grab(self) -> tuple[np.ndarray, float | None] | None:
        rs = self._rs
        frames = self._pipeline.wait_for_frames(1000)  # RuntimeError after 1 s without frames: counted as a failure
        color = frames.get_color_frame()
        if not color:
            return None
        image = np.asanyarray(color.get_data()).copy()  # the SDK reuses its buffer once the frame is released
        t = None
        if color.get_frame_timestamp_domain() in (rs.timestamp_domain.system_time, rs.timestamp_domain.global_time):
            # host wall-clock milliseconds: shift onto the monotonic clock
            t = time.monotonic() - (time.time() - color.get_timestamp() / 1000.0)
            if not 0.0 <= time.monotonic() - t <= PLAUSIBLE_DEVICE_DELAY_S:
                t = None
        return image, t

    def _close(self) -> None:
        if self._pipeline is not None:
            try:
                self._pipeline.stop()
            finally:
                self._pipeline = None
