"""A gamepad as a teleop device, read through pygame's joystick module from `read()` (pumping pygame's events is
cheap and never blocks, so no thread is needed).

Default layout (an Xbox-style pad as SDL numbers it on Linux; override with `axes` and `buttons`):

    left stick      up/down +x/-x, left/right +y/-y          right stick   up/down +z/-z, left/right +yaw/-yaw
    RT / LT         gripper close / open (past half travel; the gripper stays where it was put)
    RB (5)          intervention: held = the human is in control (`intervention_mode="toggle"`: each press flips)
    A (0) success   B (1) failure   Y (3) rerecord_episode   X (2) terminate_episode
    Start (7) pause                 Back (6) estop

`axes` maps a motion axis to `[pad axis index, sign]`; `buttons` maps a pad button index to an event of `EVENTS`,
`intervention` (the takeover button, per `intervention_mode`) or `intervention_toggle`. Button presses come from
pygame's event queue, so a press shorter than the control period is not missed and is delivered once; a pad
unplugged mid-episode (JOYDEVICEREMOVED) reads `connected=False` and hands control back, and one plugged in again is
picked up.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from robo_rl.teleop.base import AXES, EVENTS, DeviceUnavailable, TeleopDevice

DEFAULT_AXES: dict[str, tuple[int, float]] = {"x": (1, -1.0), "y": (0, -1.0), "z": (4, -1.0), "yaw": (3, -1.0)}
DEFAULT_BUTTONS: dict[int, str] = {
    0: "success",
    1: "failure",
    3: "rerecord_episode",
    2: "terminate_episode",
    5: "intervention",
    7: "pause",
    6: "estop",
}
BUTTON_ACTIONS = frozenset(("intervention", "intervention_toggle", *EVENTS))


def apply_deadzone(values: np.ndarray, deadzone: float) -> np.ndarray:
    """Zero what is inside the deadzone and rescale the rest to keep the response continuous (deadzone..1 → 0..1)."""
    values = np.clip(np.asarray(values, np.float32), -1.0, 1.0)
    if deadzone <= 0:
        return values
    scaled = (np.abs(values) - deadzone) / (1.0 - deadzone)
    return (np.sign(values) * np.clip(scaled, 0.0, 1.0)).astype(np.float32)


class GamepadDevice(TeleopDevice):
    """A pygame joystick; `backend` stands for the pygame module (tests pass a fake with fake joysticks)."""

    name = "gamepad"
    needs_env = False

    def __init__(
        self,
        name: str | None = None,
        index: int = 0,
        axes: dict[str, Any] | None = None,
        buttons: dict[int | str, str | None] | None = None,
        deadzone: float = 0.1,
        speed: float = 1.0,
        intervention_mode: str = "hold",
        gripper_axes: tuple[int, int] | list[int] | None = (5, 2),
        trigger_threshold: float = 0.5,
        backend: Any = None,
    ) -> None:
        super().__init__(name)
        if intervention_mode not in ("hold", "toggle"):
            raise ValueError(f"intervention_mode must be 'hold' or 'toggle', not {intervention_mode!r}")
        self.axes = {**DEFAULT_AXES, **{k: (int(v[0]), float(v[1])) for k, v in (axes or {}).items()}}
        for axis in self.axes:
            if axis not in AXES:
                raise ValueError(f"gamepad axes: unknown motion axis {axis!r} (known: {', '.join(AXES)})")
        self.buttons: dict[int, str] = dict(DEFAULT_BUTTONS)
        for button, action in (buttons or {}).items():
            if not action:
                self.buttons.pop(int(button), None)
            elif action not in BUTTON_ACTIONS:
                raise ValueError(f"gamepad button {button}: unknown action {action!r} ({', '.join(BUTTON_ACTIONS)})")
            else:
                self.buttons[int(button)] = action
        self.index = index
        self.deadzone = deadzone
        self.speed = speed
        self.intervention_mode = intervention_mode
        self.gripper_axes = tuple(gripper_axes) if gripper_axes is not None else None
        self.trigger_threshold = trigger_threshold
        self._pg = backend
        self._joy: Any = None
        self._instance_id: int | None = None
        self._last: tuple[bytes, float | None, bool] | None = None

    def _open(self) -> None:
        if self._pg is None:
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # no window: pygame only needs its event queue
            os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
            os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
            try:
                import pygame
            except ImportError as exc:
                raise DeviceUnavailable(f"gamepad: pygame is not installed ({exc})") from exc
            self._pg = pygame
        pg = self._pg
        pg.display.init()  # pygame's event queue (hot-plug and button events) lives in the video subsystem
        pg.joystick.init()
        count = pg.joystick.get_count()
        if count == 0:
            raise DeviceUnavailable(
                "gamepad: no gamepad found (pygame sees 0 joysticks); plug one in or choose another device"
            )
        if self.index >= count:
            raise DeviceUnavailable(f"gamepad: no gamepad number {self.index} (pygame sees {count} joysticks)")
        self._attach(self.index)
        pg.event.get()  # drop what queued before the start (SDL's own JOYDEVICEADDED, stale presses)

    def _attach(self, device_index: int) -> None:
        joy = self._pg.joystick.Joystick(device_index)
        joy.init()
        self._joy, self._instance_id = joy, joy.get_instance_id()
        self._last = None
        self._update(connected=True)

    def _detach(self) -> None:
        self._joy = self._instance_id = None
        self._update(connected=False, is_intervention=False, motion=np.zeros(len(AXES), np.float32))

    def _poll(self) -> None:
        pg = self._pg
        presses: list[int] = []
        for event in pg.event.get():
            if event.type == pg.JOYDEVICEREMOVED and self._joy is not None and event.instance_id == self._instance_id:
                self._detach()
                presses.clear()
            elif event.type == pg.JOYDEVICEADDED and self._joy is None:
                self._attach(event.device_index)
            elif event.type == pg.JOYBUTTONDOWN and self._joy is not None and event.instance_id == self._instance_id:
                presses.append(event.button)
        if self._joy is None:
            return
        if not self._joy.get_init():
            self._detach()
            return
        for button in presses:
            action = self.buttons.get(button)
            if action == "intervention" and self.intervention_mode == "toggle":
                self._emit("intervention_toggle")
            elif action is not None and action != "intervention":
                self._emit(action)
        self._read_state()

    def _axis(self, index: int) -> float:
        return float(self._joy.get_axis(index)) if index < self._joy.get_numaxes() else 0.0

    def _read_state(self) -> None:
        """Sticks, triggers and the held takeover button; the reading changes only when they do."""
        raw = np.zeros(len(AXES), np.float32)
        for axis, (index, sign) in self.axes.items():
            raw[AXES.index(axis)] = sign * self._axis(index)
        motion = apply_deadzone(raw, self.deadzone) * self.speed
        with self._lock:
            gripper = self._state.gripper
            intervening = self._state.is_intervention
        if self.gripper_axes is not None:
            close, open_ = (self._axis(i) > self.trigger_threshold for i in self.gripper_axes)
            if close != open_:
                gripper = 1.0 if close else -1.0
        if self.intervention_mode == "hold":
            held = [b for b, action in self.buttons.items() if action == "intervention"]
            numbuttons = self._joy.get_numbuttons()
            intervening = any(self._joy.get_button(b) for b in held if b < numbuttons)
        state = (motion.tobytes(), gripper, intervening)
        if state != self._last:
            self._last = state
            self._update(motion=motion, gripper=gripper, is_intervention=intervening)

    def _close(self) -> None:
        if self._joy is not None:
            self._joy.quit()
            self._joy = None
