"""Teleop devices against fake event sources (pygame joysticks, HID reports, a lerobot teleoperator, the web page),
and the keyboard for real: an Xvfb server and xdotool key presses through pynput."""

from __future__ import annotations

import functools
import os
import pathlib
import queue
import shutil
import struct
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from hardware.teleop.gamepad import GamepadDevice, apply_deadzone
from hardware.teleop.keyboard import KeyboardDevice
from hardware.teleop.leader_arm import LeaderArmDevice, lerobot_teleoperator
from hardware.teleop.spacemouse import SpaceMouseDevice
from robo_rl.gui.web_device import WebDevice
from robo_rl.teleop.base import TeleopDevice
from robo_rl.teleop.devices import DeviceUnavailable, FakeDevice, make_device
from robo_rl.teleop.keys import KeyMap, normalize_key

REPO = pathlib.Path(__file__).resolve().parents[1]


def wait_for(device: TeleopDevice, predicate, timeout: float = 3.0):
    """Read until `predicate(reading)` holds; returns that reading and every event seen on the way."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        reading = device.read()
        seen.extend(reading.events)
        if predicate(reading):
            return reading, seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting on {device.name}; last reading {reading}")
        time.sleep(0.005)


# --- the key table (shared by the keyboard and the web page) -----------------------------------------------------
def test_keymap_held_keys_move_and_release_stops():
    keys = KeyMap(speed=0.5)
    assert keys.down("Up") == ({"motion": pytest.approx(np.array([0.5, 0, 0, 0, 0, 0]))}, [])
    fields, _ = keys.down("a")
    np.testing.assert_allclose(fields["motion"], [0.5, 0.5, 0, 0, 0, 0])
    assert keys.down("up") == ({}, [])  # auto-repeat of a held key is not a new press
    fields, _ = keys.down("s")  # the opposite key cancels
    np.testing.assert_allclose(fields["motion"], [0, 0.5, 0, 0, 0, 0])
    keys.up("ArrowUp"), keys.up("s")
    fields, _ = keys.up("a")
    np.testing.assert_allclose(fields["motion"], np.zeros(6))
    assert keys.up("a") == ({}, [])  # a key-up without its key-down does nothing


def test_keymap_events_fire_once_per_press_and_gripper_toggles_or_holds():
    keys = KeyMap()
    assert keys.down("Return") == ({}, ["success"])
    assert keys.down("Return") == ({}, [])  # still held: auto-repeat
    keys.up("Return")
    assert keys.down("enter") == ({}, ["success"])
    assert keys.down(" ")[1] == ["intervention_toggle"]
    assert keys.down("x")[1] == ["estop"] and keys.down("Escape")[1] == ["terminate_episode"]
    assert keys.gripper is None
    assert keys.down("c")[0] == {"gripper": 1.0}
    keys.up("c")
    assert keys.down("c")[0] == {"gripper": -1.0}
    hold = KeyMap(gripper_mode="hold")
    assert hold.down("c")[0] == {"gripper": 1.0} and hold.up("c")[0] == {"gripper": -1.0}


def test_keymap_custom_bindings_and_errors():
    keys = KeyMap({"i": "+pitch", "q": None, "PageUp": "-yaw"})
    np.testing.assert_allclose(keys.down("i")[0]["motion"], [0, 0, 0, 0, 1, 0])
    assert keys.down("q") == ({}, [])  # unbound
    np.testing.assert_allclose(keys.down("Prior")[0]["motion"], [0, 0, 0, 0, 1, -1])
    assert normalize_key("ArrowLeft") == "left" and normalize_key(" ") == "space" and normalize_key("W") == "w"
    with pytest.raises(ValueError, match="unknown binding 'fly'"):
        KeyMap({"f": "fly"})
    with pytest.raises(ValueError, match="gripper_mode"):
        KeyMap(gripper_mode="squeeze")


# --- the web device -------------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_web_keys_events_and_motion():
    web = WebDevice(clock=Clock()).start()
    web.key_down("ArrowUp")
    for _ in range(3):  # held across several reads: keeps moving
        np.testing.assert_allclose(web.read().motion, [1, 0, 0, 0, 0, 0])
    web.key_up("ArrowUp")
    np.testing.assert_allclose(web.read().motion, np.zeros(6))
    web.press("success")
    web.key_down("Backspace")
    assert web.read().events == {"success", "failure"}
    assert web.read().events == frozenset()  # delivered once
    web.set_motion([0.2, -3, 0, 0, 0, 0.5], gripper=2.0)
    reading = web.read()
    np.testing.assert_allclose(reading.motion, [0.2, -1, 0, 0, 0, 0.5])  # clipped to [-1, 1]
    assert reading.gripper == 1.0
    with pytest.raises(ValueError, match="unknown teleop event 'win'"):
        web.press("win")


def test_web_toggle_and_explicit_intervention_agree():
    web = WebDevice(clock=Clock()).start()
    web.press("intervention_toggle")
    assert web.read().is_intervention
    web.key_down(" ")
    web.key_up(" ")
    assert not web.read().is_intervention
    web.set_intervention(True)
    assert web.read().is_intervention
    web.press("intervention_toggle")  # the toggle flips what the human sees (the fix in base._update)
    assert not web.read().is_intervention


def test_web_page_gone_while_intervening_disconnects_and_hands_back():
    clock = Clock()
    web = WebDevice(timeout_s=2.0, clock=clock).start()
    clock.now += 10
    assert web.read().connected  # idle silence is fine
    web.set_intervention(True)
    web.key_down("w")
    clock.now += 1.5
    web.heartbeat()
    clock.now += 1.5
    reading = web.read()
    assert reading.connected and reading.is_intervention  # the heartbeat kept it alive
    clock.now += 2.5
    reading = web.read()
    assert not reading.connected and not reading.is_intervention
    np.testing.assert_allclose(reading.motion, np.zeros(6))  # the held key no longer moves the robot
    web.key_up("w")  # the page came back: its next input reconnects it, and nothing is held any more
    reading = web.read()
    assert reading.connected and not reading.is_intervention
    np.testing.assert_allclose(reading.motion, np.zeros(6))


def test_web_is_thread_safe():
    web = WebDevice().start()

    def hammer(key: str) -> None:
        for _ in range(300):
            web.key_down(key)
            web.key_up(key)

    threads = [threading.Thread(target=hammer, args=(key,)) for key in ("w", "a", "q", "s")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_allclose(web.read().motion, np.zeros(6))


# --- the gamepad ----------------------------------------------------------------------------------------------
class FakeJoystick:
    def __init__(self, instance_id: int, numaxes: int = 6, numbuttons: int = 11) -> None:
        self.instance_id = instance_id
        self.axes = [0.0] * numaxes
        self.buttons = [0] * numbuttons
        self.initialised = False

    def init(self) -> None:
        self.initialised = True

    def quit(self) -> None:
        self.initialised = False

    def get_init(self) -> bool:
        return self.initialised

    def get_instance_id(self) -> int:
        return self.instance_id

    def get_numaxes(self) -> int:
        return len(self.axes)

    def get_axis(self, i: int) -> float:
        return self.axes[i]

    def get_numbuttons(self) -> int:
        return len(self.buttons)

    def get_button(self, i: int) -> int:
        return self.buttons[i]


class FakePygame:
    """The parts of pygame the gamepad uses: joysticks, and an event queue the test fills."""

    JOYDEVICEADDED, JOYDEVICEREMOVED, JOYBUTTONDOWN, JOYAXISMOTION = 1541, 1542, 1539, 1536

    def __init__(self, pads: list[FakeJoystick]) -> None:
        self.pads = pads
        self.queue: list[SimpleNamespace] = []
        self.display = SimpleNamespace(init=lambda: None)
        count = lambda: len(self.pads)  # noqa: E731
        self.joystick = SimpleNamespace(init=lambda: None, get_count=count, Joystick=self.pads.__getitem__)
        self.event = SimpleNamespace(get=self._get)

    def _get(self) -> list[SimpleNamespace]:
        events, self.queue = self.queue, []
        return events

    def post(self, type_: int, **fields) -> None:
        self.queue.append(SimpleNamespace(type=type_, **fields))

    def press(self, pad: FakeJoystick, button: int) -> None:
        self.post(self.JOYBUTTONDOWN, instance_id=pad.instance_id, button=button)


def test_gamepad_sticks_map_to_motion_with_deadzone():
    pad = FakeJoystick(7)
    pg = FakePygame([pad])
    device = GamepadDevice(deadzone=0.1, backend=pg).start()
    pad.axes[:5] = [0.05, -1.0, 0.0, 0.55, 0.08]  # left x in the deadzone, left y full up, right x half right
    reading = device.read()
    np.testing.assert_allclose(reading.motion, [1.0, 0.0, 0.0, 0.0, 0.0, -0.5], atol=1e-6)
    assert reading.gripper is None and not reading.is_intervention
    changed = reading.changed_at
    assert device.read().changed_at == changed  # nothing moved: the reading did not change
    pad.axes[5] = 0.9  # right trigger: close, and it stays closed once released
    assert device.read().gripper == 1.0
    pad.axes[5] = -1.0
    assert device.read().gripper == 1.0
    pad.axes[2] = 1.0
    assert device.read().gripper == -1.0
    np.testing.assert_allclose(apply_deadzone(np.array([0.1, 0.55, -1.0]), 0.1), [0.0, 0.5, -1.0], atol=1e-6)


def test_gamepad_buttons_are_events_once_and_rb_held_is_intervention():
    pad = FakeJoystick(3)
    pg = FakePygame([pad])
    device = GamepadDevice(backend=pg).start()
    pg.press(pad, 0)
    pg.press(pad, 3)
    pg.post(pg.JOYBUTTONDOWN, instance_id=99, button=1)  # another pad's press is not ours
    assert device.read().events == {"success", "rerecord_episode"}
    assert device.read().events == frozenset()
    pad.buttons[5] = 1
    assert device.read().is_intervention and device.read().is_intervention  # held across reads
    pad.buttons[5] = 0
    assert not device.read().is_intervention
    pg.press(pad, 6)
    assert device.read().events == {"estop"}


def test_gamepad_toggle_mode_and_custom_buttons():
    pad = FakeJoystick(0)
    pg = FakePygame([pad])
    device = GamepadDevice(intervention_mode="toggle", buttons={"4": "intervention", 0: None}, backend=pg).start()
    pg.press(pad, 4)
    assert device.read().is_intervention
    assert device.read().is_intervention  # a toggle stays
    pg.press(pad, 4)
    pg.press(pad, 0)  # unbound now
    reading = device.read()
    assert not reading.is_intervention and reading.events == frozenset()
    with pytest.raises(ValueError, match="unknown action 'jump'"):
        GamepadDevice(buttons={1: "jump"}, backend=pg)


def test_gamepad_unplugged_mid_episode_hands_back_and_replug_reconnects():
    pad = FakeJoystick(5)
    pg = FakePygame([pad])
    device = GamepadDevice(backend=pg).start()
    pad.buttons[5], pad.axes[1] = 1, -1.0
    assert device.read().is_intervention
    pg.post(pg.JOYDEVICEREMOVED, instance_id=5)
    reading = device.read()
    assert not reading.connected and not reading.is_intervention
    np.testing.assert_allclose(reading.motion, np.zeros(6))
    assert not device.read().connected  # stays disconnected
    pad2 = FakeJoystick(6)
    pg.pads[:] = [pad2]
    pg.post(pg.JOYDEVICEADDED, device_index=0)
    reading = device.read()
    assert reading.connected and not reading.is_intervention
    pad2.quit()  # the joystick subsystem dropped it without an event
    assert not device.read().connected


def test_gamepad_missing_names_the_device():
    with pytest.raises(DeviceUnavailable, match=r"^gamepad: no gamepad found \(pygame sees 0 joysticks\)"):
        GamepadDevice(backend=FakePygame([])).start()


def test_gamepad_missing_with_real_pygame(monkeypatch):
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")
    device = GamepadDevice()
    try:
        device.start()
    except DeviceUnavailable as exc:
        assert str(exc).startswith("gamepad: no gamepad found")
    else:
        device.close()
        pytest.skip("a real gamepad is plugged in")


# --- the spacemouse -------------------------------------------------------------------------------------------
UNPLUG = object()


class FakeHidDevice:
    def __init__(self) -> None:
        self.reports: queue.Queue = queue.Queue()
        self.opened = self.closed = False

    def open_path(self, path: bytes) -> None:
        if path == b"/dev/hidraw-locked":
            raise OSError("open failed")
        self.opened = True

    def read(self, max_length: int, timeout_ms: int = 0) -> list[int]:
        try:
            report = self.reports.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return []
        if report is UNPLUG:
            raise OSError("read error")
        return list(report)[:max_length]

    def close(self) -> None:
        self.closed = True


class FakeHid:
    def __init__(self, infos: list[dict]) -> None:
        self.infos = infos
        self.dev = FakeHidDevice()

    def enumerate(self, vendor_id: int = 0, product_id: int = 0) -> list[dict]:
        return [info for info in self.infos if info["vendor_id"] == vendor_id]

    def device(self) -> FakeHidDevice:
        return self.dev


SPACEMOUSE = {
    "vendor_id": 0x256F,
    "product_id": 0xC635,
    "path": b"/dev/hidraw3",
    "product_string": "SpaceMouse",
    "usage_page": 1,
    "usage": 8,
}


def report(report_id: int, *values: int) -> bytes:
    return bytes([report_id]) + struct.pack(f"<{len(values)}h", *values)


def test_spacemouse_reports_scale_into_motion():
    hid = FakeHid([SPACEMOUSE])
    device = SpaceMouseDevice(full_scale=350, deadzone=0.0, read_timeout_ms=10, backend=hid).start()
    hid.dev.reports.put(report(1, 175, -350, 700))  # right half, away from the user fully, pressed down (clipped)
    reading, _ = wait_for(device, lambda r: r.motion.any())
    np.testing.assert_allclose(reading.motion, [1.0, -0.5, -1.0, 0, 0, 0], atol=1e-6)
    hid.dev.reports.put(report(2, 35, 0, -70))  # rotation only: translation stays
    reading, _ = wait_for(device, lambda r: r.motion[5] != 0)
    np.testing.assert_allclose(reading.motion, [1.0, -0.5, -1.0, 0, -0.1, 0.2], atol=1e-6)
    hid.dev.reports.put(report(1, 0, 0, 0, 0, 0, 0))  # a 13-byte report with all six axes: all back to rest
    wait_for(device, lambda r: not r.motion.any())
    device.close()
    assert hid.dev.closed


def test_spacemouse_deadzone_and_axis_map():
    hid = FakeHid([SPACEMOUSE])
    device = SpaceMouseDevice(deadzone=0.1, axis_map={"z": "+tz", "yaw": None}, read_timeout_ms=10, backend=hid)
    device.start()
    hid.dev.reports.put(report(1, 20, 0, 350, 0, 0, 350))  # x inside the deadzone; yaw unmapped
    reading, _ = wait_for(device, lambda r: r.motion.any())
    np.testing.assert_allclose(reading.motion, [0, 0, 1.0, 0, 0, 0], atol=1e-6)
    device.close()
    with pytest.raises(ValueError, match="unknown raw axis '-tw'"):
        SpaceMouseDevice(axis_map={"x": "-tw"})


def test_spacemouse_buttons_toggle_gripper_and_intervention_once():
    hid = FakeHid([SPACEMOUSE])
    device = SpaceMouseDevice(read_timeout_ms=10, backend=hid).start()
    for mask in (0b01, 0b01, 0b00, 0b10, 0b00):  # left pressed (repeated report), released, right pressed
        hid.dev.reports.put(bytes([3, mask, 0]))
    reading, _ = wait_for(device, lambda r: r.is_intervention)
    assert reading.gripper == 1.0  # one toggle for one press, even with the report repeated
    hid.dev.reports.put(bytes([3, 0b01]))
    reading, _ = wait_for(device, lambda r: r.gripper == -1.0)
    assert reading.is_intervention
    device.close()


def test_spacemouse_unplugged_disconnects_and_hands_back():
    hid = FakeHid([SPACEMOUSE])
    device = SpaceMouseDevice(read_timeout_ms=10, backend=hid).start()
    hid.dev.reports.put(bytes([3, 0b10]))
    hid.dev.reports.put(report(1, 350, 0, 0))
    wait_for(device, lambda r: r.is_intervention and r.motion.any())
    hid.dev.reports.put(UNPLUG)
    reading, _ = wait_for(device, lambda r: not r.connected)
    assert not reading.is_intervention and not reading.motion.any()
    device.close()


def test_spacemouse_missing_or_unopenable_names_the_device():
    logitech_mouse = {**SPACEMOUSE, "vendor_id": 0x046D, "product_id": 0xC077}  # a Logitech mouse, not a SpaceMouse
    with pytest.raises(DeviceUnavailable, match=r"^spacemouse: no 3Dconnexion device found over HID"):
        SpaceMouseDevice(backend=FakeHid([logitech_mouse])).start()
    locked = {**SPACEMOUSE, "path": b"/dev/hidraw-locked"}
    with pytest.raises(DeviceUnavailable, match=r"^spacemouse: found SpaceMouse 256f:c635 .* udev"):
        SpaceMouseDevice(backend=FakeHid([locked])).start()


def test_spacemouse_missing_with_real_hid():
    hid = pytest.importorskip("hid")
    if hid.enumerate(0x256F) or hid.enumerate(0x046D):
        pytest.skip("HID devices from 3Dconnexion's vendor ids are present")
    with pytest.raises(DeviceUnavailable, match=r"^spacemouse: no 3Dconnexion device found"):
        SpaceMouseDevice().start()


# --- the leader arm -------------------------------------------------------------------------------------------
class FakeTeleop:
    """Stands for a lerobot teleoperator: `get_action()` gives the joints it was set to."""

    def __init__(self, calibrated: bool = True, fail_connect: str | None = None) -> None:
        self.values = {"shoulder_pan.pos": 0.0, "elbow_flex.pos": 50.0, "gripper.pos": 100.0}
        self.calibrated, self.fail_connect = calibrated, fail_connect
        self.broken = False
        self.connected = False
        self.calls = 0

    @property
    def is_calibrated(self) -> bool:
        return self.calibrated

    def connect(self, calibrate: bool = True) -> None:
        assert not calibrate, "calibrating prompts on the terminal: the device must not ask for it"
        if self.fail_connect:
            raise ConnectionError(self.fail_connect)
        self.connected = True

    def get_action(self) -> dict[str, float]:
        self.calls += 1
        if self.broken:
            raise ConnectionError("Failed to sync read")
        return dict(self.values)

    def disconnect(self) -> None:
        self.connected = False


def leader(teleop: FakeTeleop, **options) -> LeaderArmDevice:
    seen = {}

    def factory(**kwargs):
        seen.update(kwargs)
        return teleop

    device = LeaderArmDevice(port="/dev/ttyFAKE", id="arm", factory=factory, **options)
    device.factory_kwargs = seen
    return device


def test_leader_arm_maps_joints_onto_the_env_action():
    teleop = FakeTeleop()
    device = leader(
        teleop,
        action_keys=["elbow_flex.pos", "gripper.pos", "shoulder_pan.pos"],
        ranges={"elbow_flex.pos": [0, 200]},
        rate_hz=200,
    ).start()
    assert device.factory_kwargs == {"teleop_type": "so101_leader", "port": "/dev/ttyFAKE", "id": "arm"}
    np.testing.assert_allclose(device.read().action, [-0.5, 1.0, 0.0])  # elbow 50 of 0..200, gripper 100 of 0..100
    teleop.values.update({"shoulder_pan.pos": -50.0, "gripper.pos": 25.0})
    reading, _ = wait_for(device, lambda r: r.action[2] < 0)
    np.testing.assert_allclose(reading.action, [-0.5, -0.5, -0.5])
    calls = teleop.calls
    time.sleep(0.1)
    assert 5 <= teleop.calls - calls <= 40  # read in the background at about rate_hz (20 in 0.1 s), not per read()
    device.close()
    assert not teleop.connected


def test_leader_arm_read_failures_disconnect_then_recover():
    teleop = FakeTeleop()
    device = leader(teleop, rate_hz=200, max_failures=3).start()
    assert device.read().action.shape == (3,)  # the arm's own key order by default
    device._update(is_intervention=True)  # as if the arbitration had handed control to the arm
    teleop.broken = True
    reading, _ = wait_for(device, lambda r: not r.connected)
    assert not reading.is_intervention
    teleop.broken = False
    wait_for(device, lambda r: r.connected)
    device.close()


def test_leader_arm_failures_name_the_device_and_port():
    with pytest.raises(DeviceUnavailable, match=r"^leader_arm \(so101_leader on None\): no port given"):
        LeaderArmDevice(factory=lambda **_: FakeTeleop()).start()
    with pytest.raises(DeviceUnavailable, match=r"^leader_arm \(so101_leader on /dev/ttyFAKE\): ConnectionError: no"):
        leader(FakeTeleop(fail_connect="no reply from motor 1")).start()
    with pytest.raises(DeviceUnavailable, match=r"not calibrated; run `lerobot-calibrate --teleop.type=so101_leader"):
        leader(FakeTeleop(calibrated=False)).start()
    teleop = FakeTeleop()
    with pytest.raises(DeviceUnavailable, match=r"the arm has no \['wrist.pos'\]"):
        leader(teleop, action_keys=["wrist.pos"]).start()
    assert not teleop.connected  # a failed start does not leave the arm connected


def test_leader_arm_through_lerobot_names_the_port(tmp_path):
    pytest.importorskip("lerobot.teleoperators")
    factory = functools.partial(lerobot_teleoperator, calibration_dir=tmp_path)
    device = LeaderArmDevice(teleop_type="so100_leader", port="/dev/no_such_port", factory=factory)
    with pytest.raises(DeviceUnavailable, match=r"^leader_arm \(so100_leader on /dev/no_such_port\): \w+"):
        device.start()
    with pytest.raises(DeviceUnavailable, match=r"unknown lerobot teleoperator type 'so102_leader'"):
        LeaderArmDevice(teleop_type="so102_leader", port="/dev/x", factory=factory).start()


# --- make_device ----------------------------------------------------------------------------------------------
class EnvDevice(TeleopDevice):
    needs_env = True

    def __init__(self, env, name: str | None = None) -> None:
        super().__init__(name)
        self.env = env


def test_make_device_builds_targets_and_checks_options():
    device = make_device({"_target_": "robo_rl.gui.web_device.WebDevice", "name": "page", "timeout_s": 5})
    assert isinstance(device, WebDevice) and device.name == "page" and device.timeout_s == 5
    assert isinstance(make_device({"_target_": "robo_rl.teleop.base.FakeDevice"}), FakeDevice)
    keyboard = make_device({"_target_": "hardware.teleop.keyboard.KeyboardDevice", "speed": 0.3})
    assert isinstance(keyboard, KeyboardDevice)  # built, not started
    with pytest.raises(
        ValueError, match=r"no device class 'KeybordDevice'.*did you mean 'hardware.teleop.keyboard.Key"
    ):
        make_device({"_target_": "hardware.teleop.keyboard.KeybordDevice"})
    with pytest.raises(ValueError, match=r"no module 'hardware.teleop.keybord'"):
        make_device({"_target_": "hardware.teleop.keybord.KeyboardDevice"})
    with pytest.raises(ValueError, match=r"without a '_target_'"):
        make_device({"kind": "keyboard"})
    with pytest.raises(
        ValueError, match=r"teleop device 'robo_rl.gui.web_device.WebDevice': .*'bogus'.*its options are: name, keys"
    ):
        make_device({"_target_": "robo_rl.gui.web_device.WebDevice", "bogus": 1})


def test_make_device_passes_the_env_to_devices_that_need_it():
    with pytest.raises(ValueError, match="needs the env"):
        make_device({"_target_": "tests.test_teleop_devices.EnvDevice"})
    env = object()
    assert make_device({"_target_": "tests.test_teleop_devices.EnvDevice"}, env=env).env is env
    assert make_device({"_target_": "tests.test_teleop_devices.EnvDevice", "name": "h"}, env=env).name == "h"


def test_importing_the_package_and_building_web_pulls_no_device_library():
    code = (
        "import sys; import robo_rl.teleop.devices as t;"
        "t.make_device({'_target_': 'robo_rl.gui.web_device.WebDevice'}).start().read();"
        "print(sorted(m for m in ('pygame', 'pynput', 'hid', 'lerobot') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- the keyboard: no display, and for real under Xvfb ----------------------------------------------------------
def test_keyboard_without_display_names_the_device():
    code = (
        "from hardware.teleop.keyboard import KeyboardDevice\n"
        "from robo_rl.teleop.base import DeviceUnavailable\n"
        "try:\n    KeyboardDevice().start()\nexcept DeviceUnavailable as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("keyboard: no X display (DISPLAY=''): "), out.stdout + out.stderr


@pytest.fixture
def xvfb():
    """A private X server (display number with no lock file), always killed."""
    if not (shutil.which("Xvfb") and shutil.which("xdotool")):
        pytest.skip("Xvfb or xdotool is not installed")
    number = next(n for n in range(140, 400) if not os.path.exists(f"/tmp/.X{n}-lock"))
    proc = subprocess.Popen(
        ["Xvfb", f":{number}", "-screen", "0", "320x240x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/tmp/.X11-unix/X{number}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Xvfb :{number} did not start (exit {proc.poll()})")
            time.sleep(0.02)
        yield f":{number}"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def keyboard_scenario() -> None:
    """Real key presses (xdotool) into a KeyboardDevice on $DISPLAY; asserts on what read() gives."""

    def xdotool(*args: str) -> None:
        time.sleep(0.05)  # no person presses a key again within the device's 20 ms auto-repeat grace
        subprocess.run(["xdotool", *args], check=True, timeout=10)

    device = KeyboardDevice().start()
    try:
        xdotool("keydown", "Up")
        wait_for(device, lambda r: r.motion[0] == 1.0)
        for _ in range(5):  # held across reads for ~0.2 s: keeps moving
            reading = device.read()
            np.testing.assert_allclose(reading.motion, [1, 0, 0, 0, 0, 0])
            time.sleep(0.04)
        xdotool("keyup", "Up")
        wait_for(device, lambda r: not r.motion.any())
        xdotool("key", "space")
        wait_for(device, lambda r: r.is_intervention)
        xdotool("key", "space")
        wait_for(device, lambda r: not r.is_intervention)
        xdotool("key", "Return")
        _, seen = wait_for(device, lambda r: "success" in r.events)
        time.sleep(0.1)
        seen += device.read().events
        assert seen.count("success") == 1, seen
        xdotool("key", "c")
        reading, _ = wait_for(device, lambda r: r.gripper is not None)
        assert reading.gripper == 1.0 and reading.connected
    finally:
        listener = device._listener
        closing = time.monotonic()
        device.close()
    assert time.monotonic() - closing < 10.0  # close() never hangs on the listener
    listener.join(2.0)
    if listener.is_alive():  # the wake raced the listener's RECORD loop (seen once on CI)
        subprocess.run(["xdotool", "key", "shift"], check=True, timeout=10)  # pynput's own stop acts on the next key
        listener.join(5.0)
    assert not listener.is_alive()  # close() ends the listener thread: at once, or at the latest at the next key


def test_keyboard_auto_repeat_release_press_pairs_keep_a_held_key_moving():
    """X sends a release and a press together for every auto-repeat of a held key: the motion must not flicker."""
    device = KeyboardDevice(repeat_grace_s=0.05)
    device.started = True  # the listener's callbacks, fed by hand
    device._on_press("up")
    for _ in range(3):
        device._release_soon("up")
        device._on_press("up")  # the auto-repeat pair
        assert device.read().motion[0] == 1.0
    time.sleep(0.1)
    assert device.read().motion[0] == 1.0, "still held: no release took effect"
    device._release_soon("up")
    assert device.read().motion[0] == 1.0  # a real release takes effect after the grace ...
    time.sleep(0.1)
    assert device.read().motion[0] == 0.0  # ... and then stops the motion


def test_keyboard_for_real_under_xvfb(xvfb, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb)
    if any(name == "pynput" or name.startswith("pynput.") for name in sys.modules):
        # pynput picked its backend (and display) when first imported here: run where it has not been
        code = "from tests.test_teleop_devices import keyboard_scenario; keyboard_scenario(); print('ok')"
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
    else:
        keyboard_scenario()
