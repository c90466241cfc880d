"""`find_cameras`: the cameras plugged into this machine, for the doctor; each probe is bounded in time, so a wedged
driver cannot hang it."""

from __future__ import annotations

import glob
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import cv2

log = logging.getLogger(__name__)


def _within(fn: Callable[[], Any], timeout_s: float) -> Any:
    """fn() on a helper thread, or None when it takes longer than `timeout_s` (a wedged driver must not hang the
    doctor; the helper thread is a daemon and is left to finish on its own)."""
    result: list[Any] = [None]

    def call() -> None:
        try:
            result[0] = fn()
        except Exception as exc:
            log.debug("camera probe failed: %s", exc)

    thread = threading.Thread(target=call, name="camera-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return None if thread.is_alive() else result[0]


def _probe_v4l2(path: str) -> dict[str, Any] | None:
    cap = cv2.VideoCapture(path, cv2.CAP_V4L2)
    try:
        if not cap.isOpened():
            return None  # a metadata node, or busy
        return {
            "type": "opencv",
            "index": int(re.sub(r"\D", "", path) or -1),
            "path": path,
            "width": int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
            "height": int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
            "fps": float(cap.get(cv2.CAP_PROP_FPS)),
        }
    finally:
        cap.release()


def _realsense_devices() -> list[dict[str, Any]]:
    import pyrealsense2 as rs

    return [
        {
            "type": "realsense",
            "serial": dev.get_info(rs.camera_info.serial_number),
            "model": dev.get_info(rs.camera_info.name),
        }
        for dev in rs.context().query_devices()
    ]


def find_cameras(timeout_s: float = 2.0) -> list[dict[str, Any]]:
    """The cameras on this machine, for the doctor: each /dev/video* node OpenCV opens (index, path, the size and fps
    it reports) and each RealSense serial when pyrealsense2 is installed. Each probe gives up after `timeout_s`."""
    found: list[dict[str, Any]] = []
    paths = sorted(glob.glob("/dev/video*"), key=lambda p: (len(p), p))
    for path in paths:
        info = _within(lambda path=path: _probe_v4l2(path), timeout_s)
        if info is not None:
            found.append(info)
    try:
        import pyrealsense2  # noqa: F401
    except ImportError:
        return found
    found.extend(_within(_realsense_devices, timeout_s) or [])
    return found
