"""The keyboard as a teleop device (pynput), and the key table that the web page's keys share.

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

pynput listens to the whole X session (keys typed into any window count), and needs an X display: without one it
cannot even be imported, so it is imported in `_open` and its failure is reported as `DeviceUnavailable`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import Any

import numpy as np

from hardware.teleop.base import AXES, EVENTS, DeviceUnavailable, TeleopDevice

log = logging.getLogger(__name__)

DEFAULT_KEYS: dict[str, str] = {
    "up": "+x", "w": "+x", "down": "-x", "s": "-x",
    "left": "+y", "a": "+y", "right": "-y", "d": "-y",
    "page_up": "+z", "q": "+z", "page_down": "-z", "z": "-z",
    "c": "gripper",
    "space": "intervention_toggle",
    "enter": "success", "backspace": "failure",
    "r": "rerecord_episode", "esc": "terminate_episode",
    "p": "pause", "x": "estop",
}  # fmt: skip

BINDINGS = frozenset([f"{sign}{axis}" for axis in AXES for sign in "+-"] + ["gripper", "intervention_toggle", *EVENTS])

# Other spellings of the same key: X keysyms (xdotool), browser `KeyboardEvent.key` values, pynput names.
_ALIASES = {
    "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right",
    "pageup": "page_up", "prior": "page_up", "pagedown": "page_down", "next": "page_down",
    " ": "space", "spacebar": "space", "return": "enter", "escape": "esc",
}  # fmt: skip


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


def _pynput_key_name(key: Any) -> str | None:
    """pynput gives `Key.up` (an enum with a name) or a `KeyCode` with a char (None for keys it cannot spell)."""
    name = getattr(key, "name", None)
    if isinstance(name, str):
        return name
    char = getattr(key, "char", None)
    return char.lower() if isinstance(char, str) and char else None


class KeyboardDevice(KeyTableDevice):
    """The keyboard of the X session, read by a pynput listener thread (see the module docstring for the keys)."""

    name = "keyboard"
    needs_env = False

    def __init__(
        self,
        name: str | None = None,
        keys: dict[str, str | None] | None = None,
        speed: float = 1.0,
        gripper_mode: str = "toggle",
        ready_timeout_s: float = 2.0,
        repeat_grace_s: float = 0.02,
    ) -> None:
        super().__init__(name, keys, speed, gripper_mode)
        self.ready_timeout_s = ready_timeout_s
        self.repeat_grace_s = repeat_grace_s  # X auto-repeat sends release+press pairs while a key is held
        self._listener: Any = None
        self._pending_up: dict[str, threading.Timer] = {}
        self._pending_lock = threading.Lock()

    def _open(self) -> None:
        display = os.environ.get("DISPLAY", "")
        if importlib.util.find_spec("pynput") is None:
            raise DeviceUnavailable("keyboard: pynput is not installed (pip install pynput)")
        try:
            from pynput import keyboard
        except ImportError as exc:  # pynput picks its backend at import, and the X one connects to the display
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DeviceUnavailable(f"keyboard: no X display (DISPLAY={display!r}): {reason}") from exc

        def on_press(key: Any) -> None:
            if (name := _pynput_key_name(key)) is not None:
                self._on_press(name)

        def on_release(key: Any) -> None:
            if (name := _pynput_key_name(key)) is not None:
                self._release_soon(name)

        listener = keyboard.Listener(on_press=on_press, on_release=on_release)
        listener.start()
        # Listener.wait() blocks for ever when the listener dies before it is ready; wait from a helper instead.
        ready = threading.Event()
        threading.Thread(target=lambda: (listener.wait(), ready.set()), daemon=True).start()
        if not ready.wait(self.ready_timeout_s) or not listener.is_alive():
            listener.stop()
            raise DeviceUnavailable(
                f"keyboard: the key listener did not start on DISPLAY={display!r} within {self.ready_timeout_s} s "
                "(does the X server have the RECORD extension?)"
            )
        self._listener = listener

    def _on_press(self, name: str) -> None:
        with self._pending_lock:
            repeat = self._pending_up.pop(name, None)
        if repeat is not None:
            repeat.cancel()  # the release was half of an auto-repeat pair: the key is still held
        else:
            self._key_down(name)

    def _release_soon(self, name: str) -> None:
        """A key-up takes effect after `repeat_grace_s` unless the same key goes down again first (auto-repeat)."""

        def release() -> None:
            with self._pending_lock:
                if self._pending_up.get(name) is not timer:
                    return
                del self._pending_up[name]
            self._key_up(name)

        timer = threading.Timer(self.repeat_grace_s, release)
        timer.daemon = True
        with self._pending_lock:
            old = self._pending_up.pop(name, None)
            self._pending_up[name] = timer
        if old is not None:
            old.cancel()
        timer.start()

    def _poll(self) -> None:
        if self._listener is not None and not self._listener.is_alive() and self._state.connected:
            self._release_all(connected=False, is_intervention=False)  # the X connection went away

    def _close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
            for _ in range(50):  # a wake sent before the thread blocks in its RECORD loop is lost: send again
                _wake_xorg_listener(listener)
                try:
                    listener.join(0.1)
                except Exception:  # noqa: BLE001 - join re-raises the listener's own failure; closing anyway
                    break
                if not listener.is_alive():
                    break
            else:
                log.warning("keyboard: the X key listener did not end on close; it ends at the next key event")
        self._release_all()


def _wake_xorg_listener(listener: Any) -> None:
    """pynput's X listener asks its own blocked RECORD connection to stop, so `stop()` takes effect only at the next
    key event (and the thread outlives its X server); ending the RECORD context from a fresh connection wakes it now.
    Best effort: another backend, or an X server already gone, has nothing to wake."""
    context = getattr(listener, "_context", None)
    if context is None or not type(listener).__module__.endswith("_xorg"):
        return
    try:
        import Xlib.display

        display = Xlib.display.Display()
        try:
            display.record_disable_context(context)
            display.sync()  # a round trip: the server has acted on the request before the connection closes
        finally:
            display.close()
    except Exception:  # noqa: BLE001 - nothing more to do for a listener that cannot be reached
        pass
