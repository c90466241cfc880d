"""The key table: which key does what, for every keyboard-like teleop device (the X keyboard in
`hardware/teleop/keyboard.py`, the web page's keys in `robo_rl/gui/web_device.py`).

Default keys (override any with the `keys` option, e.g. `keys: {i: "+pitch", q: null}`; a binding is "+axis" /
"-axis" for an axis of `AXES`, `gripper`, `intervention_toggle`, or an event of `EVENTS`):

    up / w          +x (forward)            down / s        -x
    left / a        +y (left)               right / d       -y
    page_up / q     +z (up)                 page_down / z   -z
    c               gripper: each press toggles closed/open (gripper_mode="hold": closed while held)
    space           intervention_toggle: take control; press again to hand it back
    enter           success                 backspace       failure
    r               rerecord_episode        esc             terminate_episode
    p               pause                   x               estop

Motion keys move for as long as they are held (key-down sets the axis, key-up clears it) at `speed` (of full
scale); opposite keys held together cancel. A held key's auto-repeat is not a new press, so holding space or
enter fires once. Rotations have no default keys: bind them with `keys`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from robo_rl.teleop.base import AXES, EVENTS, TeleopDevice

DEFAULT_KEYS: dict[str, str] = {
    "up": "+x",
    "w": "+x",
    "down": "-x",
    "s": "-x",
    "left": "+y",
    "a": "+y",
    "right": "-y",
    "d": "-y",
    "page_up": "+z",
    "q": "+z",
    "page_down": "-z",
    "z": "-z",
    "c": "gripper",
    "space": "intervention_toggle",
    "enter": "success",
    "backspace": "failure",
    "r": "rerecord_episode",
    "esc": "terminate_episode",
    "p": "pause",
    "x": "estop",
}

BINDINGS = frozenset([f"{sign}{axis}" for axis in AXES for sign in "+-"] + ["gripper", "intervention_toggle", *EVENTS])

# Other spellings of the same key: X keysyms (xdotool), browser `KeyboardEvent.key` values, pynput names.
_ALIASES = {
    "arrowup": "up",
    "arrowdown": "down",
    "arrowleft": "left",
    "arrowright": "right",
    "pageup": "page_up",
    "prior": "page_up",
    "pagedown": "page_down",
    "next": "page_down",
    " ": "space",
    "spacebar": "space",
    "return": "enter",
    "escape": "esc",
}


def normalize_key(key: str) -> str:
    """One name per key whatever spelled it: 'ArrowUp', 'Up' and 'up' are all 'up'; letters are lower case."""
    name = key if key == " " else key.strip().lower()
    return _ALIASES.get(name, name)


class KeyMap:
    """The key table and the held-key state behind it; `down`/`up` say what to tell the device.

    Not thread-safe: the device calls it under its own input lock, together with applying the result, so that two
    threads cannot apply their results out of order.
    """

    def __init__(self, keys: dict[str, str | None] | None = None, speed: float = 1.0, gripper_mode: str = "toggle"):
        if gripper_mode not in ("toggle", "hold"):
            raise ValueError(f"gripper_mode must be 'toggle' or 'hold', not {gripper_mode!r}")
        table = dict(DEFAULT_KEYS)
        for key, binding in (keys or {}).items():
            name = normalize_key(str(key))
            if not binding:
                table.pop(name, None)
            elif binding not in BINDINGS:
                raise ValueError(f"key {key!r}: unknown binding {binding!r} (known: {', '.join(sorted(BINDINGS))})")
            else:
                table[name] = binding
        self.table = table
        self.speed = float(speed)
        self.gripper_mode = gripper_mode
        self.held: set[str] = set()
        self.gripper: float | None = None  # None until a gripper key says something

    def motion(self) -> np.ndarray:
        motion = np.zeros(len(AXES), np.float32)
        for key in self.held:
            binding = self.table.get(key, "")
            if binding[:1] in "+-" and binding[1:] in AXES:
                motion[AXES.index(binding[1:])] += 1.0 if binding[0] == "+" else -1.0
        return np.clip(motion, -1.0, 1.0) * self.speed

    def down(self, key: str) -> tuple[dict[str, Any], list[str]]:
        """A key went down: the reading fields to set and the events to emit (none for an auto-repeat)."""
        name = normalize_key(key)
        binding = self.table.get(name)
        if binding is None or name in self.held:
            return {}, []
        self.held.add(name)
        if binding == "gripper":
            closed = self.gripper_mode == "hold" or self.gripper is None or self.gripper < 0
            self.gripper = 1.0 if closed else -1.0
            return {"gripper": self.gripper}, []
        if binding[:1] in "+-":
            return {"motion": self.motion()}, []
        return {}, [binding]

    def up(self, key: str) -> tuple[dict[str, Any], list[str]]:
        name = normalize_key(key)
        if name not in self.held:
            return {}, []
        self.held.discard(name)
        binding = self.table[name]
        if binding == "gripper" and self.gripper_mode == "hold":
            self.gripper = -1.0
            return {"gripper": self.gripper}, []
        if binding[:1] in "+-":
            return {"motion": self.motion()}, []
        return {}, []

    def release_all(self) -> dict[str, Any]:
        """Forget held keys (the page went away, the listener died): nothing keeps moving."""
        fields: dict[str, Any] = {}
        if self.gripper_mode == "hold" and any(self.table[key] == "gripper" for key in self.held):
            self.gripper = fields["gripper"] = -1.0
        self.held.clear()
        fields["motion"] = self.motion()
        return fields


class KeyTableDevice(TeleopDevice):
    """A device fed key-downs/key-ups (from a listener thread or a web request) through one `KeyMap`.

    The key table's result is computed and applied under one input lock, so two threads cannot apply theirs out of
    order (a stale motion after a newer one).
    """

    def __init__(
        self,
        name: str | None = None,
        keys: dict[str, str | None] | None = None,
        speed: float = 1.0,
        gripper_mode: str = "toggle",
    ) -> None:
        super().__init__(name)
        self._keymap = KeyMap(keys, speed, gripper_mode)
        self._input_lock = threading.Lock()

    def _apply(self, change: tuple[dict[str, Any], list[str]]) -> None:
        fields, events = change
        if fields:
            self._update(**fields)
        for event in events:
            self._emit(event)

    def _key_down(self, key: str) -> None:
        with self._input_lock:
            self._apply(self._keymap.down(key))

    def _key_up(self, key: str) -> None:
        with self._input_lock:
            self._apply(self._keymap.up(key))

    def _release_all(self, **fields: Any) -> None:
        """Forget held keys and set `fields` too (connected / is_intervention when the input went away)."""
        with self._input_lock:
            self._update(**self._keymap.release_all(), **fields)
