"""The keyboard as a teleop device (pynput); the key table it reads is `robo_rl.teleop.keys`.

pynput listens to the whole X session (keys typed into any window count), and needs an X display: without one it
cannot even be imported, so it is imported in `_open` and its failure is reported as `DeviceUnavailable`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import Any

from robo_rl.teleop.base import DeviceUnavailable
from robo_rl.teleop.keys import KeyTableDevice

log = logging.getLogger(__name__)


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
