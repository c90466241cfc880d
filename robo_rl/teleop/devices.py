"""Teleoperation devices, built from a config spec by `make_device`.

A spec names its class the way every plugin is named here, by hydra's `_target_` (a dotted class path):
`{_target_: hardware.teleop.keyboard.KeyboardDevice, speed: 0.5}`. The class is imported only when a spec names it,
so importing this module pulls in none of pygame, pynput or hid: a machine without a display or a gamepad can still
load it.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

from robo_rl.teleop.base import AXES, EVENTS, DeviceUnavailable, FakeDevice, TeleopDevice, TeleopReading


def device_class(target: str) -> type[TeleopDevice]:
    """The device class a `_target_` names, with an error that says which part is wrong."""
    module_name, _, cls_name = str(target).rpartition(".")
    if not module_name:
        raise ValueError(f"teleop device _target_ '{target}' is not a class path (like robo_rl.teleop.base.FakeDevice)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ValueError(f"teleop device _target_ '{target}': no module '{e.name}'") from None
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, TeleopDevice)):
        devices = [n for n, c in vars(module).items() if isinstance(c, type) and issubclass(c, TeleopDevice)]
        close = difflib.get_close_matches(cls_name, devices, n=1)
        hint = f"; did you mean '{module_name}.{close[0]}'?" if close else ""
        found = f" (its devices: {', '.join(devices)})" if devices else ""
        raise ValueError(
            f"teleop device _target_ '{target}': {module_name} has no device class '{cls_name}'{found}{hint}"
        )
    return cls


def make_device(spec: dict[str, Any], **context: Any) -> TeleopDevice:
    """A device (not started) from `{"_target_": "<module>.<Class>", "name": optional, **options}`; `context` holds
    what some classes need from the caller (`env` for a class with `needs_env = True`, such as the simulated human)."""
    if "_target_" not in spec:
        raise ValueError(f"teleop device spec without a '_target_' (its class path): {spec!r}")
    options = {key: value for key, value in spec.items() if key != "_target_"}
    target = spec["_target_"]
    cls = device_class(target)
    if options.get("name") is None:
        options.pop("name", None)
    if getattr(cls, "needs_env", False):
        if context.get("env") is None:
            raise ValueError(f"teleop device '{target}' needs the env; pass make_device(spec, env=env)")
        options["env"] = context["env"]
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as exc:  # an option the device does not have: name the device and its options
        accepted = [p for p in inspect.signature(cls).parameters if p not in ("self", "env")]
        raise ValueError(f"teleop device '{target}': {exc}; its options are: {', '.join(accepted)}") from exc
    return cls(**options)


__all__ = [
    "AXES",
    "EVENTS",
    "DeviceUnavailable",
    "FakeDevice",
    "TeleopDevice",
    "TeleopReading",
    "device_class",
    "make_device",
]
