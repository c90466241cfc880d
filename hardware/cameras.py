"""Cameras for the robot drivers: each on its own capture thread, timestamped, at a fixed size, and checked for age.

A robot policy that acts on an old image acts on a world that is gone, so a camera that stops delivering (stale),
repeats one image (frozen) or fails its reads (unplugged) is an error raised by `latest()` / `at()`, never a silent
reuse of the last frame. The capture thread keeps the last few frames with their capture time (`Frame.t`,
`time.monotonic()`), so the env can pick the frame nearest to its proprioception reading with `at(t)` and say how
old the observation is (`Frame.age()`).

    cam = make_camera({"type": "opencv", "device": "/dev/video2", "width": 128, "height": 128}, name="wrist")
    with cam:                     # start(): opens the device and waits for the first frame
        frame = cam.at(t_state)   # uint8 [128, 128, 3] RGB, nearest to t_state; raises CameraError if not fresh

Kinds: `OpenCVCamera` (USB/V4L2), `RealSenseCamera` (pyrealsense2, the `realsense` extra), `FakeCamera` (tests,
the doctor and the benchmark; its `mode` plays the failures). A camera class defined elsewhere (a sim twin) plugs in
with `{"_target_": "package.module.Class", ...}`; it subclasses `Camera` and implements `_open`, `_grab`, `_close`.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import hashlib
import inspect
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import cv2
import numpy as np

from robo_rl.errors import UserError

log = logging.getLogger(__name__)

REALSENSE_HINT = "RealSense cameras need pyrealsense2: uv sync --extra realsense"
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
    their larger sizes at full rate only compressed."""

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

    def _open(self) -> None:
        if self.device.startswith("/dev/") and not os.path.exists(self.device):
            raise CameraError(
                f"camera '{self.name}': cannot open {self.device} (not found): is it plugged in? "
                f"`ls /dev/video*` lists the cameras there are"
            )
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

    def _grab(self) -> tuple[np.ndarray, float | None] | None:
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


CAMERA_TYPES: dict[str, type[Camera]] = {"opencv": OpenCVCamera, "realsense": RealSenseCamera, "fake": FakeCamera}


def _options(cls: type) -> set[str]:
    """The keyword options a camera class accepts, its own and those it passes on to its bases through **kw."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def make_camera(spec: Mapping[str, Any] | Camera, name: str | None = None) -> Camera:
    """A camera (not started) from `{"type": "opencv" | "realsense" | "fake", **options}` or
    `{"_target_": "package.module.Class", **options}` (a Camera subclass defined elsewhere). `name` (the key of the
    camera in the env's config) fills in the spec's name."""
    if isinstance(spec, Camera):
        return spec
    options = dict(spec)
    if name is not None:
        if options.get("name", name) != name:
            raise ValueError(f"camera spec named '{options['name']}' is given as '{name}'")
        options["name"] = name
    if "name" not in options:
        raise ValueError(f"camera spec without a name: {dict(spec)!r}")
    if "_target_" in options:
        from hydra.utils import get_class

        target = options.pop("_target_")
        cls = get_class(target)
        if not (isinstance(cls, type) and issubclass(cls, Camera)):
            raise ValueError(f"camera '{options['name']}': {target} is not a Camera subclass (hardware.cameras.Camera)")
    else:
        kind = options.pop("type", None)
        if kind not in CAMERA_TYPES:
            raise ValueError(
                f"camera '{options['name']}': unknown camera type {kind!r}; the types are: "
                f"{', '.join(CAMERA_TYPES)} (or give a class as _target_)"
            )
        cls = CAMERA_TYPES[kind]
    unknown = set(options) - _options(cls)
    if unknown:
        raise ValueError(
            f"camera '{options['name']}': {cls.__name__} has no option {', '.join(sorted(unknown))}; "
            f"its options are: {', '.join(sorted(_options(cls)))}"
        )
    return cls(**options)


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
