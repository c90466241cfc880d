"""`FakeCamera`: made-up frames at a fixed rate, for tests, the doctor and the benchmark; its `mode` plays the
failures a real camera has (stale, frozen, unplugged)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hardware.cameras.base import Camera


class FakeCamera(Camera):
    """Frames made up at `fps`, for tests, the doctor and the benchmark. `mode` plays a failure, set at run time:
    "ok", "stale" (no frames come: the read blocks), "frozen" (the last image again, byte-identical) or "unplugged"
    (the read raises OSError). `source(seq) -> image` gives the images (RGB, any size); by default a moving gradient
    that changes every frame."""

    MODES = ("ok", "stale", "frozen", "unplugged")
    device = "the fake source"

    def __init__(
        self,
        name: str,
        width: int,
        height: int,
        fps: float = 30.0,
        mode: str = "ok",
        source: Callable[[int], np.ndarray] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(name, width, height, fps, **kw)
        self.mode = mode
        self.source = source or self._gradient
        self._pattern: np.ndarray | None = None
        self._last: np.ndarray | None = None
        self._n = 0
        self._deadline = 0.0

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in self.MODES:
            raise ValueError(f"fake camera '{self.name}': unknown mode '{mode}' (modes: {', '.join(self.MODES)})")
        self._mode = mode

    def _gradient(self, seq: int) -> np.ndarray:
        if self._pattern is None:
            y, x = np.mgrid[0 : self.height, 0 : self.width]
            self._pattern = np.stack(
                [x * 255 // max(1, self.width - 1), y * 255 // max(1, self.height - 1), (x + y) % 256], axis=-1
            ).astype(np.uint8)
        return self._pattern + np.uint8(seq * 7 % 256)  # uint8 wraps: every pixel changes every frame

    def _open(self) -> None:
        self._n = 0
        self._deadline = time.monotonic()

    def _grab(self) -> tuple[np.ndarray, float | None] | None:
        period = 1.0 / self.fps
        while self.mode == "stale":  # the source delivers nothing; wake to notice a mode change or close()
            if self._stopping.wait(period):
                return None
            self._deadline = time.monotonic()
        if self.mode == "unplugged":
            raise OSError(f"fake camera '{self.name}' unplugged (mode='unplugged')")
        self._deadline += period
        delay = self._deadline - time.monotonic()
        if delay < -period:  # fell behind (a slow source): keep the rate, do not burst to catch up
            self._deadline = time.monotonic()
        elif delay > 0 and self._stopping.wait(delay):
            return None
        if self.mode == "frozen" and self._last is not None:
            return self._last, None
        self._last = np.asarray(self.source(self._n))
        self._n += 1
        return self._last, None
