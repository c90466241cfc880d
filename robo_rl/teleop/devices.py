"""Teleoperation devices, built from a config spec by `make_device`.

Device classes are imported only when a spec names them (the registry holds "module:Class" paths), so importing
this package pulls in none of pygame, pynput or hid: a machine without a display or a gamepad can still load it.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

from robo_rl.teleop.base import AXES, EVENTS, DeviceUnavailable, FakeDevice, TeleopDevice, TeleopReading

DEVICE_KINDS: dict[str, str] = {
    "keyboard": "hardware.teleop.keyboard:KeyboardDevice",
    "gamepad": "hardware.teleop.gamepad:GamepadDevice",
    "spacemouse": "hardware.teleop.spacemouse:SpaceMouseDevice",
    "leader_arm": "hardware.teleop.leader_arm:LeaderArmDevice",
    "web": "robo_rl.gui.web_device:WebDevice",
    "fake": "robo_rl.teleop.base:FakeDevice",
    "sim_human": "sim.simulated_human:SimulatedHuman",
}


def register_device(kind: str, path: str) -> None:
    """Add (or replace) a device kind; `path` is "module:Class", imported when a spec first names the kind."""
    if ":" not in path:
        raise ValueError(f"device path must be 'module:Class', not {path!r}")
    DEVICE_KINDS[kind] = path


def device_class(kind: str) -> type[TeleopDevice]:
    if kind not in DEVICE_KINDS:
        close = difflib.get_close_matches(str(kind), DEVICE_KINDS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown teleop device '{kind}'; the kinds are: {', '.join(DEVICE_KINDS)}{hint}")
    module, _, cls = DEVICE_KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_device(spec: dict[str, Any], **context: Any) -> TeleopDevice:
    """A device (not started) from `{"kind": ..., "name": optional, **options}`; `context` holds what some kinds
    need from the caller (`env` for a class with `needs_env = True`, such as the simulated human)."""
    if "kind" not in spec:
        raise ValueError(f"teleop device spec without a 'kind': {spec!r} (kinds: {', '.join(DEVICE_KINDS)})")
    options = {key: value for key, value in spec.items() if key != "kind"}
    kind = spec["kind"]
    cls = device_class(kind)
    if options.get("name") is None:
        options.pop("name", None)
    if getattr(cls, "needs_env", False):
        if context.get("env") is None:
            raise ValueError(f"teleop device '{kind}' needs the env; pass make_device(spec, env=env)")
        options["env"] = context["env"]
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as exc:  # an option the device does not have: name the device and its options
        accepted = [p for p in inspect.signature(cls).parameters if p not in ("self", "env")]
        raise ValueError(f"teleop device '{kind}': {exc}; its options are: {', '.join(accepted)}") from exc
    return cls(**options)


__all__ = [
    "AXES",
    "DEVICE_KINDS",
    "EVENTS",
    "DeviceUnavailable",
    "FakeDevice",
    "TeleopDevice",
    "TeleopReading",
    "device_class",
    "make_device",
    "register_device",
]
