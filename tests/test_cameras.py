"""Camera handling with fake frame sources: fixed size RGB frames, alignment by timestamp, and stale / frozen /
unplugged cameras raising instead of serving an old frame."""

from __future__ import annotations

import importlib.util
import threading
import time

import numpy as np
import pytest

from hardware.cameras import (
    REALSENSE_HINT,
    CameraError,
    CameraSpecError,
    FakeCamera,
    OpenCVCamera,
    RealSenseCamera,
    find_cameras,
    make_camera,
)
from robo_rl.errors import UserError

W, H, FPS = 32, 24, 200.0


def camera_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("camera-") and t.name != "camera-probe"]


@pytest.fixture
def cams():
    """Cameras made through this list are closed after the test, and their capture threads must be gone."""
    made: list[FakeCamera] = []
    yield made
    for cam in made:
        cam.close()
    assert camera_threads() == [], "a camera's capture thread outlived close()"


def fake(cams: list, name: str = "front", **kw) -> FakeCamera:
    kw.setdefault("fps", FPS)
    cam = FakeCamera(name, W, H, **kw)
    cams.append(cam)
    return cam


def error_within(cam, match: str, timeout_s: float = 10.0) -> CameraError:
    """The CameraError naming `match` that `latest()` raises once the camera's failure shows (returns at once then:
    the generous bound is for a loaded machine, where a stale-frame error may come first while the capture thread
    waits for the CPU); fails the test if it never does."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        try:
            cam.latest()
        except CameraError as exc:
            if match in str(exc):
                return exc
            seen = exc
        time.sleep(0.005)
    pytest.fail(f"camera '{cam.name}' raised no error naming '{match}' in {timeout_s} s (last error: {seen})")


def test_frames_are_fixed_size_rgb_with_increasing_timestamps(cams):
    # a 50x40 source with distinct channels: resized to 32x24, and red stays in channel 0
    source = lambda seq: np.dstack([np.full((40, 50), v, np.uint8) for v in (200, 100, seq % 50)])  # noqa: E731
    # the frames' format and order, not their age (the stale tests below): a loaded VM woke this thread 0.18 s late
    cam = fake(cams, source=source, max_age_s=2.0).start()
    frames = [cam.wait_frame()]
    for _ in range(5):
        frames.append(cam.wait_frame(after_seq=frames[-1].seq))
    for frame in frames:
        assert frame.image.shape == (H, W, 3) and frame.image.dtype == np.uint8
        assert (frame.image[..., 0] == 200).all() and (frame.image[..., 1] == 100).all()
    assert all(b.t > a.t and b.seq > a.seq and b.received >= b.t for a, b in zip(frames, frames[1:], strict=False))
    assert 0 <= frames[-1].age() < 1.0


def test_bgr_sources_are_converted_to_rgb(cams):
    class BGRFake(FakeCamera):
        bgr = True  # as OpenCVCamera's frames are

    cam = BGRFake(
        "front",
        W,
        H,
        fps=FPS,
        source=lambda seq: np.dstack([np.full((H, W), v, np.uint8) for v in (10, 20, seq % 2 + 30)]),
    )
    cams.append(cam)
    image = cam.start().wait_frame().image
    assert (image[..., 0] >= 30).all() and (image[..., 1] == 20).all() and (image[..., 2] == 10).all()


def test_at_picks_the_buffered_frame_nearest_in_time(cams):
    cam = fake(cams, fps=100.0, max_age_s=5.0, buffer=8).start()
    seen = [cam.wait_frame()]
    while len(seen) < 12:
        seen.append(cam.wait_frame(after_seq=seen[-1].seq))
    cam.mode = "stale"  # hold the buffer still, once a read in flight has landed
    count = -1
    while count != cam.stats()["frames"]:
        count = cam.stats()["frames"]
        time.sleep(0.05)
    newest = cam.latest()
    # the frames the buffer holds now, oldest first (`seen` may skip frames: on a loaded machine `wait_frame` hands
    # back the newest, so two frames seen one after the other need not be neighbours in the buffer)
    buffered = list(cam._frames)
    assert len(buffered) == 8 and buffered[-1] is newest
    assert [f.seq for f in buffered] == list(range(newest.seq - 7, newest.seq + 1))
    for a, b in zip(buffered, buffered[1:], strict=False):
        assert cam.at(a.t) is a
        assert cam.at(a.t + 0.4 * (b.t - a.t)) is a
        assert cam.at(a.t + 0.6 * (b.t - a.t)) is b
    assert cam.at(newest.t + 10.0) is newest
    assert cam.at(0.0).seq == newest.seq - 7  # the oldest frame the buffer still holds


def test_stale_camera_raises_and_serves_again_when_frames_return(cams):
    cam = fake(cams, name="wrist", max_age_s=0.1).start()
    before = cam.latest()
    cam.mode = "stale"
    err = error_within(cam, "no new frame")
    assert "'wrist'" in str(err) and "no new frame" in str(err) and "max_age_s=0.10" in str(err)
    with pytest.raises(CameraError, match="no new frame"):
        cam.at(time.monotonic())  # alignment does not fall back on the old buffer either
    last_stale_seq = cam.stats()["frames"] - 1
    cam.mode = "ok"
    frame = cam.wait_frame(after_seq=last_stale_seq)
    assert cam.latest().seq >= frame.seq > last_stale_seq > before.seq


def test_stale_is_judged_by_frame_age(cams):
    cam = fake(cams, max_age_s=0.25).start()
    frame = cam.latest()
    assert cam.latest(now=frame.t + 0.2).seq >= frame.seq
    with pytest.raises(CameraError, match=r"no new frame for 0\.\d\d s"):
        cam.latest(now=cam.latest().t + 0.3)


def test_frozen_camera_raises_and_recovers(cams):
    cam = fake(cams, frozen_after=5).start()
    cam.mode = "frozen"
    err = error_within(cam, "frozen")
    assert "'front'" in str(err) and "frozen" in str(err)
    assert cam.stats()["identical_frames"] >= 5
    cam.mode = "ok"
    # the frame the capture thread may have had in hand when the mode changed is still the frozen image (seen on a
    # loaded machine): recovery is served from the frame after it
    after = cam.stats()["frames"]
    frame = cam.wait_frame(after_seq=after)
    assert cam.latest().seq >= frame.seq > after


def test_frozen_check_can_be_disabled(cams):
    cam = fake(cams, frozen_after=0).start()
    cam.mode = "frozen"
    first = cam.wait_frame(after_seq=cam.wait_frame().seq + 10)
    later = cam.wait_frame(after_seq=first.seq + 10)
    assert np.array_equal(first.image, later.image)  # frozen indeed, and served: the user opted out


def test_unplugged_camera_raises_its_error_and_stops_its_thread(cams):
    cam = fake(cams, name="side").start()
    cam.mode = "unplugged"
    err = error_within(cam, "OSError")
    assert "'side'" in str(err) and "unplugged" in str(err) and "OSError" in str(err)
    deadline = time.monotonic() + 10.0  # a bound for a loaded machine; it stops within milliseconds here
    while cam.is_running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not cam.is_running and camera_threads() == []
    assert cam.stats()["errors"] >= cam.max_failures
    with pytest.raises(CameraError, match="unplugged"):
        cam.at(time.monotonic())
    cam.mode = "ok"  # plugged back in: a new start() serves again
    assert cam.start().latest().seq == 0


def test_start_on_a_source_that_never_delivers_raises_within_its_timeout(cams):
    cam = fake(cams, mode="stale")
    began = time.monotonic()
    with pytest.raises(CameraError, match="'front': no frame within 0.3 s"):
        cam.start(timeout_s=0.3)
    assert 0.3 <= time.monotonic() - began < 1.5
    assert not cam.is_running and camera_threads() == []


def test_start_on_an_unplugged_source_raises_the_failure(cams):
    with pytest.raises(CameraError, match="unplugged"):
        fake(cams, mode="unplugged").start(timeout_s=2.0)


def test_a_camera_not_running_serves_nothing(cams):
    cam = fake(cams)
    with pytest.raises(CameraError, match="not running"):
        cam.latest()
    with cam:
        assert cam.is_running and cam.latest().image.shape == (H, W, 3)
    assert not cam.is_running and camera_threads() == []
    with pytest.raises(CameraError, match="not running"):
        cam.latest()  # the buffer still holds frames, but a closed camera does not serve them
    cam.close()  # idempotent


def test_stats_measure_rate_and_latency(cams):
    cam = fake(cams, fps=100.0).start()
    frame = cam.wait_frame()
    while frame.seq < 20:
        frame = cam.wait_frame(after_seq=frame.seq)
    stats = cam.stats()
    assert stats["frames"] >= 21 and stats["errors"] == 0
    assert 30.0 < stats["fps"] < 200.0  # paced near 100 fps: neither stalled nor bursting
    assert 0.0 <= stats["latency_ms_p50"] <= stats["latency_ms_p99"] < 100.0


def test_fake_camera_refuses_an_unknown_mode(cams):
    with pytest.raises(ValueError, match="unknown mode 'broken'"):
        fake(cams).mode = "broken"


def test_make_camera_builds_by_target_and_refuses_unknown_ones():
    cam = make_camera({"_target_": "hardware.cameras.FakeCamera", "width": W, "height": H}, name="front")
    assert isinstance(cam, FakeCamera) and cam.name == "front" and (cam.width, cam.height) == (W, H)
    assert make_camera(cam) is cam
    twin = make_camera({"_target_": "hardware.cameras.FakeCamera", "name": "twin", "width": W, "height": H})
    assert isinstance(twin, FakeCamera) and twin.name == "twin"
    with pytest.raises(ValueError, match="not a Camera subclass"):
        make_camera({"_target_": "collections.OrderedDict"}, name="front")
    with pytest.raises(ValueError, match="without a name"):
        make_camera({"_target_": "hardware.cameras.FakeCamera", "width": W, "height": H})


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        # a class that is not there: the camera, the class path, the classes there are, the closest one
        (
            {"_target_": "hardware.cameras.OpenCvCamera"},
            r"camera 'front': _target_ hardware.cameras.OpenCvCamera: hardware.cameras has no OpenCvCamera; "
            r"the camera classes: hardware.cameras.OpenCVCamera, .*did you mean hardware.cameras.OpenCVCamera\?",
        ),
        ({"_target_": "hardware.webcams.USBCamera"}, r"camera 'front': _target_ .*cannot import hardware.webcams"),
        ({"_target_": "OpenCVCamera"}, r"camera 'front': _target_ 'OpenCVCamera' is not a class path"),
        # a misspelt option: the camera, the class and every option it has
        (
            {"_target_": "hardware.cameras.FakeCamera", "width": W, "heigth": H},
            r"camera 'front': FakeCamera has no option heigth; its options are: .*\bheight\b.*\bwidth\b",
        ),
        # a twin camera takes the arm's twin from its env, never from the config
        ({"_target_": "hardware.twin_camera.TwinCamera"}, r"camera 'front': a twin camera needs the arm's twin"),
        ({"_target_": "hardware.twin_camera.TwinCamera", "twin": True}, r"TwinCamera has no option twin"),
        # the old spelling is named, not silently dropped
        ({"type": "opencv", "device": 0}, r"camera 'front' has no _target_ \(`type: opencv` is no longer read\)"),
    ],
)
def test_a_bad_camera_spec_is_refused_naming_the_camera_and_the_problem(spec, says):
    with pytest.raises(CameraSpecError, match=says) as info:
        make_camera(spec, name="front")
    assert isinstance(info.value, ValueError) and isinstance(info.value, UserError)  # robo-rl prints it as one line


@pytest.mark.skipif(
    importlib.util.find_spec("pyrealsense2") is not None,
    reason="pyrealsense2 is installed: the missing-extra message cannot show",
)
def test_realsense_without_pyrealsense2_names_the_extra():
    with pytest.raises(CameraError) as info:
        RealSenseCamera("wrist")
    assert str(info.value) == REALSENSE_HINT and "uv sync --extra realsense" in str(info.value)
    assert isinstance(info.value, ImportError)
    with pytest.raises(ImportError, match="--extra realsense"):
        make_camera({"_target_": "hardware.cameras.RealSenseCamera", "serial": "123"}, name="wrist")


def test_opencv_camera_on_a_missing_device_raises_quickly():
    began = time.monotonic()
    for device in ("/dev/video_robo_rl_missing", 63):
        cam = OpenCVCamera("front", device=device, width=W, height=H)
        try:
            with pytest.raises(CameraError, match=r"camera 'front': cannot open /dev/video(_robo_rl_missing|63)"):
                cam.start()
            assert not cam.is_running
        finally:
            cam.close()
    assert time.monotonic() - began < 2.0


def test_find_cameras_returns_a_list_quickly():
    began = time.monotonic()
    found = find_cameras(timeout_s=1.0)
    assert isinstance(found, list) and all(c["type"] in ("opencv", "realsense") for c in found)
    assert time.monotonic() - began < 5.0
