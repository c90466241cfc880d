"""A 3Dconnexion SpaceMouse as a teleop device, read over HID (hidapi) in a daemon thread.

The device sends reports only when something changes, so a reader thread keeps the newest state; `read()` never
touches the hardware. Reports: id 1 is translation (x, y, z as little-endian int16) and, on models that send all six
axes at once (13 bytes), rotation too; id 2 is rotation (rx, ry, rz); id 3 is the button bitmask. Raw values run to
about ±350 (`full_scale`); they are scaled into [-1, 1] and pass a deadzone.

The cap's raw frame is x right, y towards the user, z down; the default `axis_map` turns it into the motion frame
(x forward, y left, z up: push the cap away to go +x, lift it to go +z; the rotations follow the same turn). Map any
motion axis to a signed raw axis (`tx ty tz rx ry rz`), e.g. `axis_map: {z: "+tz"}`, if a unit differs.

Buttons (`buttons` maps a bit of the button mask to an action): left (bit 0) toggles the gripper closed/open, right
(bit 1) is `intervention_toggle`. Other actions: `intervention` (in control while held) or an event of `EVENTS`.
A read error in the thread (the device was unplugged) reads `connected=False` and hands control back.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np

from hardware.teleop.gamepad import apply_deadzone
from robo_rl.teleop.base import AXES, EVENTS, DeviceUnavailable, TeleopDevice

VENDOR_3DCONNEXION = 0x256F  # current devices
VENDOR_LOGITECH = 0x046D  # older 3Dconnexion devices, sold under Logitech's vendor id
# Logitech's id also covers its mice and keyboards: only these product ids are 3Dconnexion's.
LOGITECH_3DCONNEXION_PRODUCTS = frozenset(
    (0xC603, 0xC605, 0xC606, 0xC621, 0xC623, 0xC625, 0xC626, 0xC627, 0xC628, 0xC629, 0xC62B, 0xC640)
)
RAW_AXES = ("tx", "ty", "tz", "rx", "ry", "rz")
DEFAULT_AXIS_MAP: dict[str, str] = {"x": "-ty", "y": "-tx", "z": "-tz", "roll": "-ry", "pitch": "-rx", "yaw": "-rz"}
DEFAULT_BUTTONS: dict[int, str] = {0: "gripper_toggle", 1: "intervention_toggle"}
BUTTON_ACTIONS = frozenset(("gripper_toggle", "intervention", "intervention_toggle", *EVENTS))


def _parse_signed_axis(spec: str) -> tuple[int, float]:
    sign, axis = (spec[0], spec[1:]) if spec[:1] in "+-" else ("+", spec)
    if axis not in RAW_AXES:
        raise ValueError(f"spacemouse axis_map: unknown raw axis {spec!r} (known: ±{', ±'.join(RAW_AXES)})")
    return RAW_AXES.index(axis), -1.0 if sign == "-" else 1.0


class SpaceMouseDevice(TeleopDevice):
    """A SpaceMouse over HID; `backend` stands for the `hid` module (tests pass a fake that scripts reports)."""

    name = "spacemouse"
    needs_env = False

    def __init__(
        self,
        name: str | None = None,
        full_scale: float = 350.0,
        deadzone: float = 0.05,
        axis_map: dict[str, str | None] | None = None,
        buttons: dict[int | str, str | None] | None = None,
        product_id: int | None = None,
        path: str | bytes | None = None,
        read_timeout_ms: int = 50,
        backend: Any = None,
    ) -> None:
        super().__init__(name)
        mapping = {**DEFAULT_AXIS_MAP, **(axis_map or {})}
        unknown = set(mapping) - set(AXES)
        if unknown:
            raise ValueError(f"spacemouse axis_map: unknown motion axes {sorted(unknown)} (known: {', '.join(AXES)})")
        self._map = [_parse_signed_axis(mapping[axis]) if mapping.get(axis) else (0, 0.0) for axis in AXES]
        self.buttons: dict[int, str] = dict(DEFAULT_BUTTONS)
        for bit, action in (buttons or {}).items():
            if not action:
                self.buttons.pop(int(bit), None)
            elif action not in BUTTON_ACTIONS:
                raise ValueError(f"spacemouse button {bit}: unknown action {action!r} ({', '.join(BUTTON_ACTIONS)})")
            else:
                self.buttons[int(bit)] = action
        self.full_scale = float(full_scale)
        self.deadzone = deadzone
        self.product_id = product_id
        self.path = path.encode() if isinstance(path, str) else path
        self.read_timeout_ms = read_timeout_ms
        self._hid = backend
        self._dev: Any = None
        self._raw = np.zeros(6, np.float32)
        self._button_mask = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _candidates(self) -> list[dict[str, Any]]:
        """3Dconnexion HID interfaces, the multi-axis controller interface (usage page 1, usage 8) first."""
        found = []
        for info in [*self._hid.enumerate(VENDOR_3DCONNEXION), *self._hid.enumerate(VENDOR_LOGITECH)]:
            vendor, product = info.get("vendor_id"), info.get("product_id")
            if vendor == VENDOR_LOGITECH and product not in LOGITECH_3DCONNEXION_PRODUCTS:
                continue
            if self.product_id is not None and product != self.product_id:
                continue
            if self.path is not None and info.get("path") != self.path:
                continue
            found.append(info)
        return sorted(found, key=lambda info: (info.get("usage_page"), info.get("usage")) != (1, 8))

    def _open(self) -> None:
        if self._hid is None:
            try:
                import hid
            except ImportError as exc:
                raise DeviceUnavailable(f"spacemouse: the hidapi package is not importable ({exc})") from exc
            self._hid = hid
        candidates = self._candidates()
        if not candidates:
            raise DeviceUnavailable(
                "spacemouse: no 3Dconnexion device found over HID (vendor 0x256f/0x046d); is it plugged in and "
                "readable (udev rules)?"
            )
        info = candidates[0]
        ids = f"{info.get('vendor_id', 0):04x}:{info.get('product_id', 0):04x}"
        label = f"{info.get('product_string') or 'device'} {ids}"
        dev = self._hid.device()
        try:
            dev.open_path(info["path"])
        except (OSError, ValueError) as exc:
            raise DeviceUnavailable(
                f"spacemouse: found {label} at {info.get('path')!r} but cannot open it ({exc}); check the udev rules "
                "(read/write access to its /dev/hidraw node)"
            ) from exc
        self._dev = dev
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-hid", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._dev.read(64, timeout_ms=self.read_timeout_ms)
            except (OSError, ValueError):  # unplugged: hidapi reports a read error
                if not self._stop.is_set():
                    self._update(connected=False, is_intervention=False, motion=np.zeros(6, np.float32))
                return
            if data:
                self._handle(bytes(data))

    def _handle(self, data: bytes) -> None:
        """One HID report: axes update the motion, button presses (new bits) act once."""
        report = data[0]
        if report == 1 and len(data) >= 7:
            self._raw[:3] = struct.unpack_from("<3h", data, 1)
            if len(data) >= 13:  # models that send all six axes in one report
                self._raw[3:] = struct.unpack_from("<3h", data, 7)
        elif report == 2 and len(data) >= 7:
            self._raw[3:] = struct.unpack_from("<3h", data, 1)
        elif report == 3 and len(data) >= 2:
            self._buttons(int.from_bytes(data[1:5], "little"))
            return
        else:
            return
        scaled = apply_deadzone(self._raw / self.full_scale, self.deadzone)
        self._update(motion=np.array([sign * scaled[index] for index, sign in self._map], np.float32))

    def _buttons(self, mask: int) -> None:
        pressed, self._button_mask = mask & ~self._button_mask, mask
        for bit, action in sorted(self.buttons.items()):
            if action == "intervention":
                self._update(is_intervention=bool(mask >> bit & 1))
            elif pressed >> bit & 1:
                if action == "gripper_toggle":
                    with self._lock:
                        gripper = self._state.gripper
                    self._update(gripper=-1.0 if gripper is not None and gripper > 0 else 1.0)
                else:
                    self._emit(action)

    def _close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0 + self.read_timeout_ms / 1000)
            self._thread = None
        if self._dev is not None:
            try:
                self._dev.close()
            finally:
                self._dev = None
