"""The device the web GUI feeds: the page's handler (in the web server's threads) calls these methods.

Keys go through the keyboard's own table (`robo_rl.teleop.keys.KeyMap`), so a key does the same on the page as
on the keyboard. A page that goes away while the human is in control (a closed tab, a lost network) would otherwise
leave the robot under a human who is no longer there: without any input or `heartbeat()` for `timeout_s` while
intervening or holding a key, the device reads `connected=False` and gives control back; the next input from the
page reconnects it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from robo_rl.teleop.keys import KeyTableDevice


class WebDevice(KeyTableDevice):
    """An in-process device fed by the web GUI; every method is safe to call from any thread."""

    name = "web"
    needs_env = False

    def __init__(
        self,
        name: str | None = None,
        keys: dict[str, str | None] | None = None,
        speed: float = 1.0,
        gripper_mode: str = "toggle",
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name, keys, speed, gripper_mode)
        self.timeout_s = timeout_s
        self._clock = clock
        self._last_input = clock()

    def _touch(self) -> None:
        """Input from the page: it is there (reconnects a timed-out page)."""
        self._last_input = self._clock()
        if not self._state.connected:
            self._update(connected=True)

    # --- for the web server ---------------------------------------------------------------------
    def heartbeat(self) -> None:
        """The page is still open (sent periodically by the page even when nothing is pressed)."""
        with self._input_lock:
            self._touch()

    def press(self, event: str) -> None:
        """A one-shot event of `EVENTS`, or `intervention_toggle`."""
        with self._input_lock:
            self._touch()
            self._emit(event)

    def set_intervention(self, on: bool) -> None:
        """Take (True) or hand back (False) control explicitly."""
        with self._input_lock:
            self._touch()
            self._update(is_intervention=bool(on))

    def set_motion(self, motion: Sequence[float] | np.ndarray, gripper: float | None = None) -> None:
        """A whole motion command [x, y, z, roll, pitch, yaw] in [-1, 1] (a virtual joystick), and the gripper."""
        fields: dict[str, object] = {"motion": np.asarray(motion, np.float32).reshape(6)}
        if gripper is not None:
            fields["gripper"] = float(np.clip(gripper, -1.0, 1.0))
        with self._input_lock:
            self._touch()
            self._update(**fields)

    def key_down(self, key: str) -> None:
        """A key went down on the page (`KeyboardEvent.key` spellings such as 'ArrowUp' and ' ' are understood)."""
        with self._input_lock:
            self._touch()
            self._apply(self._keymap.down(key))

    def key_up(self, key: str) -> None:
        with self._input_lock:
            self._touch()
            self._apply(self._keymap.up(key))

    def release(self) -> None:
        """Hand control back and let go of every key (the page's operator went away)."""
        with self._input_lock:
            self._update(is_intervention=False, **self._keymap.release_all())

    # --- for the actor --------------------------------------------------------------------------
    def _poll(self) -> None:
        with self._input_lock:
            if self._clock() - self._last_input <= self.timeout_s or not self._state.connected:
                return
            with self._lock:
                moving = bool(self._state.motion is not None and np.any(self._state.motion))
                active = self._state.is_intervention or moving or bool(self._keymap.held)
            if active:  # silence while idle is fine; silence while in control means the page went away
                self._update(connected=False, is_intervention=False, **self._keymap.release_all())
