"""The capture thread every camera kind shares: a fixed size, timestamped frames, and the stale / frozen / unplugged
checks that make an old image an error instead of an observation.

A subclass implements `_open`, `_grab` and `_close` (see `Camera`); `hardware.cameras` says how cameras are spelt in
a config.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import math
import threading
import time
from typing import Any

import cv2
import numpy as np

from robo_rl.errors import UserError

log = logging.getLogger(__name__)

FINGERPRINT_PIXELS = 16384  # about this many pixels are hashed per frame for the frozen check
PLAUSIBLE_DEVICE_DELAY_S = 0.5  # a driver timestamp older than this (or in the future) is on another clock


class CameraError(UserError, RuntimeError):
    """A camera that cannot be opened, or whose frames are stale, frozen or gone; the text names the camera, the
    problem and what to check."""


class CameraDependencyError(CameraError, ImportError):
    """A camera kind whose optional package is missing; both `except ImportError` and `except CameraError` see it."""


@dataclasses.dataclass(eq=False)  # arrays have no single truth value: frames compare by identity
class Frame:
    """One image as captured. `image` is shared by every reader of the camera: copy it before changing it in place."""

    image: np.ndarray  # uint8 [H, W, 3] RGB at the camera's fixed size
    t: float  # time.monotonic() at capture (the source's own capture time when it gives one)
    seq: int  # frame counter of this camera since start()
    received: float  # time.monotonic() when the capture thread stored it

    def age(self, now: float | None = None) -> float:
        """Seconds since capture: what the observation says about how old it is."""
        return (time.monotonic() if now is None else now) - self.t


class Camera:
    """The capture thread, the frame buffer and the stale / frozen / unplugged checks that every camera kind shares.

    Subclasses implement `_open()` (raise CameraError naming the device), `_grab()` (a blocking read of one frame:
    the image and optionally its monotonic capture time, or None / an exception on failure) and `_close()`. The
    capture thread owns the device once started: it calls `_close()` itself when it ends, so a read blocked in a
    driver is never raced by a release from another thread.
    """

    max_failures = 5  # consecutive failed reads before the camera counts as unplugged
    bgr = False  # True: `_grab` returns BGR (OpenCV), converted to RGB by the capture thread
    device = "the device"  # what to check in error messages: a /dev path, a serial
    host_options: tuple[str, ...] = ()  # arguments its env passes to make_camera, never a config (a twin camera's twin)

    def __init__(
        self,
        name: str,
        width: int,
        height: int,
        fps: float = 30.0,
        max_age_s: float | None = None,
        frozen_after: int = 30,
        buffer: int = 8,
        start_timeout_s: float = 5.0,
        close_timeout_s: float = 2.0,
    ) -> None:
        if width <= 0 or height <= 0:
            raise ValueError(f"camera '{name}': width and height must be positive, got {width}x{height}")
        if fps <= 0:
            raise ValueError(f"camera '{name}': fps must be positive, got {fps}")
        if buffer < 1:
            raise ValueError(f"camera '{name}': buffer must hold at least one frame, got {buffer}")
        self.name = name
        self.width, self.height = int(width), int(height)
        self.fps = float(fps)
        # three missed frames plus a margin for scheduling jitter and the USB/decode pipeline
        self.max_age_s = 3.0 / self.fps + 0.1 if max_age_s is None else float(max_age_s)
        self.frozen_after = int(frozen_after)
        self.start_timeout_s = float(start_timeout_s)
        self.close_timeout_s = float(close_timeout_s)
        self._frames: collections.deque[Frame] = collections.deque(maxlen=int(buffer))
        self._cond = threading.Condition()  # guards everything below; notified on each frame and when the thread ends
        self._stopping = threading.Event()  # set by close(); a blocking `_grab` should wait on it rather than sleep
        self._thread: threading.Thread | None = None
        self._running = False
        self._reset_state()

    def _reset_state(self) -> None:
        with self._cond:
            self._frames.clear()
            self._seq = 0
            self._error: CameraError | None = None
            self._errors = 0
            self._last_failure: str | None = None
            self._fingerprint: bytes | None = None
            self._identical = 0  # length of the current run of byte-identical frames
            self._received: collections.deque[float] = collections.deque(maxlen=120)
            self._latency_ms: collections.deque[float] = collections.deque(maxlen=1000)

    # --- for subclasses -----------------------------------------------------------------------------------------
    def _open(self) -> None:
        """Open the device; raise CameraError naming it when it is not there or busy."""

    def _grab(self) -> tuple[np.ndarray, float | None] | None:
        """Block until the next frame; return (image, capture time or None), or None / raise on a failed read."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release the device (called once, from the capture thread when it ends)."""

    # --- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._running

    def start(self, timeout_s: float | None = None) -> Camera:
        """Open the device, start the capture thread and wait for the first frame (a camera that opens but never
        delivers fails here, not at the first observation). Starting a camera that stopped (unplugged, closed)
        opens it afresh."""
        if self._running:
            return self
        self.close()  # join a thread that ended by itself (unplugged) before a new one owns the device
        self._reset_state()
        self._stopping.clear()
        self._open()
        self._running = True
        self._thread = threading.Thread(target=self._capture_loop, name=f"camera-{self.name}", daemon=True)
        try:
            self._thread.start()
        except BaseException:
            self._running = False
            self._thread = None
            self._close()
            raise
        timeout_s = self.start_timeout_s if timeout_s is None else timeout_s
        with self._cond:
            self._cond.wait_for(lambda: self._frames or not self._running, timeout_s)
            got_frame, error = bool(self._frames), self._error
        if got_frame:
            return self
        self.close()
        if error is not None:
            raise error
        raise CameraError(
            f"camera '{self.name}': no frame within {timeout_s:.1f} s of start from {self.device}: is "
            f"it connected, does it support {self.width}x{self.height} at {self.fps:g} fps, and is no "
            f"other process holding it?"
        )

    def close(self) -> None:
        """Stop the capture thread and join it; the thread releases the device. Safe to call more than once."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.close_timeout_s)
            if thread.is_alive():
                log.warning(
                    "camera '%s': capture thread still blocked in a read after %.1f s; it releases %s when "
                    "the read returns",
                    self.name,
                    self.close_timeout_s,
                    self.device,
                )
            else:
                self._thread = None

    def __enter__(self) -> Camera:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- reading ------------------------------------------------------------------------------------------------
    def latest(self, now: float | None = None) -> Frame:
        """The newest frame; CameraError if the camera is unplugged, frozen, or its newest frame is stale."""
        with self._cond:
            return self._checked_newest(time.monotonic() if now is None else now)

    def at(self, t: float, now: float | None = None) -> Frame:
        """The buffered frame captured nearest to `t` (a proprioception timestamp), after the same checks as
        `latest()` on the newest frame: an old buffer never stands in for a live camera."""
        with self._cond:
            self._checked_newest(time.monotonic() if now is None else now)
            return min(self._frames, key=lambda frame: abs(frame.t - t))

    def wait_frame(self, after_seq: int = -1, timeout_s: float = 1.0) -> Frame:
        """Block until a frame with `seq > after_seq` arrives (the next frame, for a loop paced by the camera);
        CameraError on timeout or when the camera fails meanwhile."""
        with self._cond:
            arrived = self._cond.wait_for(
                lambda: (self._frames and self._frames[-1].seq > after_seq) or not self._running, timeout_s
            )
            if not arrived:
                raise CameraError(
                    f"camera '{self.name}': no new frame within {timeout_s:.2f} s: is it unplugged, or "
                    f"is another process holding {self.device}?"
                )
            return self._checked_newest(time.monotonic())

    def stats(self) -> dict[str, Any]:
        """Capture figures for the doctor and the benchmark: frames stored, measured fps, capture latency (stored
        minus captured) p50/p99 in ms, failed reads."""
        with self._cond:
            received, latency = list(self._received), np.asarray(self._latency_ms)
            span = received[-1] - received[0] if len(received) > 1 else 0.0
            return {
                "name": self.name,
                "running": self._running,
                "frames": self._seq,
                "fps": (len(received) - 1) / span if span > 0 else 0.0,
                "latency_ms_p50": float(np.percentile(latency, 50)) if latency.size else float("nan"),
                "latency_ms_p99": float(np.percentile(latency, 99)) if latency.size else float("nan"),
                "errors": self._errors,
                "last_error": self._last_failure,
                "unplugged": self._error is not None,
                "identical_frames": self._identical,
            }

    def _checked_newest(self, now: float) -> Frame:
        """The newest frame after the unplugged / frozen / stale checks; the caller holds the lock."""
        if self._error is not None:
            raise self._error
        if not self._running or not self._frames:
            raise CameraError(f"camera '{self.name}' is not running (never started, or closed): call start()")
        newest = self._frames[-1]
        if self.frozen_after > 0 and self._identical >= self.frozen_after:
            raise CameraError(
                f"camera '{self.name}': frozen: the last {self._identical} frames are byte-identical: "
                f"is the driver stuck (replug {self.device}), or is the image one flat colour (lens "
                f"cap, dark room)?"
            )
        age = now - newest.t
        if age > self.max_age_s:
            raise CameraError(
                f"camera '{self.name}': no new frame for {age:.2f} s (max_age_s={self.max_age_s:.2f}): "
                f"is it unplugged, or is another process holding {self.device}?"
            )
        return newest

    # --- the capture thread -------------------------------------------------------------------------------------
    def _capture_loop(self) -> None:
        period = 1.0 / self.fps
        failures = 0
        try:
            while not self._stopping.is_set():
                try:
                    grabbed = self._grab()
                    grabbed_at = time.monotonic()
                    if self._stopping.is_set():
                        break
                    if grabbed is None:
                        raise CameraError("the read returned no frame")
                    image, t = grabbed
                    image = self._to_rgb(image)
                except Exception as exc:  # any failure is counted and kept, never lost with a dead thread
                    if self._stopping.is_set():
                        break
                    failures += 1
                    with self._cond:
                        self._errors += 1
                        self._last_failure = f"{type(exc).__name__}: {exc}"
                        if failures >= self.max_failures:
                            self._error = CameraError(
                                f"camera '{self.name}': unplugged: {failures} reads in a row failed (last: "
                                f"{self._last_failure}): check the cable and {self.device}, then start() it again"
                            )
                            self._error.__cause__ = exc
                            break
                    self._stopping.wait(period)  # a dead device fails at once: do not spin on it
                    continue
                failures = 0
                self._store(image, grabbed_at if t is None else float(t))
        finally:
            try:
                self._close()
            except Exception:
                log.exception("camera '%s': releasing %s failed", self.name, self.device)
            with self._cond:
                self._running = False
                self._cond.notify_all()

    def _store(self, image: np.ndarray, t: float) -> None:
        step = max(1, round(math.sqrt(image.shape[0] * image.shape[1] / FINGERPRINT_PIXELS)))
        fingerprint = hashlib.blake2b(np.ascontiguousarray(image[::step, ::step]).data, digest_size=16).digest()
        with self._cond:
            self._identical = self._identical + 1 if fingerprint == self._fingerprint else 1
            self._fingerprint = fingerprint
            received = time.monotonic()
            self._frames.append(Frame(image, t, self._seq, received))
            self._seq += 1
            self._received.append(received)
            self._latency_ms.append(1000.0 * (received - t))
            self._cond.notify_all()

    def _to_rgb(self, image: np.ndarray) -> np.ndarray:
        """uint8 RGB [height, width, 3], always a fresh array (a driver may reuse the buffer it handed out)."""
        source = image = np.ascontiguousarray(image)
        if image.dtype != np.uint8:
            raise CameraError(f"camera '{self.name}': frames must be uint8, got {image.dtype}")
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[..., 0]
        if image.ndim == 2:
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2RGB)
        elif image.ndim == 3 and image.shape[2] == 4:
            image = cv2.cvtColor(image, cv2.COLOR_BGRA2RGB if self.bgr else cv2.COLOR_RGBA2RGB)
        elif image.ndim == 3 and image.shape[2] == 3:
            if self.bgr:
                image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        else:
            raise CameraError(f"camera '{self.name}': frames must be [H, W, 3] (or gray / RGBA), got {image.shape}")
        if image.shape[:2] != (self.height, self.width):
            image = cv2.resize(image, (self.width, self.height), interpolation=cv2.INTER_AREA)
        return image.copy() if image is source else image

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.width}x{self.height} @ {self.fps:g} fps, {self.device})"
