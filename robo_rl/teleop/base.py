"""One vocabulary for every teleoperation device, and the device interface the actor's arbitration reads.

A device runs its own reader (a listener thread, an HID poll, the web page's handler) and keeps the newest
`TeleopReading`; `read()` returns it at once, never waiting on the hardware, so the control loop is never held
up by a device. One-shot events (a success label, a re-record request) are delivered once, by the next `read()`.

Event names follow lerobot's `TeleopEvents` (`is_intervention`, `success`, `failure`, `rerecord_episode`,
`terminate_episode`), plus `pause`, `estop` and `acknowledge`:

    is_intervention   the human holds control (a toggle, a held button, or device motion above a threshold)
    success/failure   label the episode; it ends (`terminated`, ended_by human_success / human_failure)
    rerecord_episode  discard and record the episode again (`truncated`, ended_by human_rerecord)
    terminate_episode abort the episode (`truncated`, ended_by human_abort)
    pause             the actor holds the robot still until the next pause event
    estop             stop the robot now (ended_by estop); the actor stops acting
    acknowledge       a human has looked at a safety stop (hardware/safety.py): the arm may move again

Motion is a normalised end-effector command: `motion` = [x, y, z, roll, pitch, yaw] in [-1, 1] (the env scales it
like a policy action) and `gripper` in [-1, 1] (-1 open, +1 closed), or None when the device does not say. A
device that knows the whole env action (the simulated human, a leader arm mapped by the env) sets `action`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable

import numpy as np

from robo_rl.errors import UserError

AXES = ("x", "y", "z", "roll", "pitch", "yaw")
EVENTS = ("success", "failure", "rerecord_episode", "terminate_episode", "pause", "estop", "acknowledge")


class DeviceUnavailable(UserError, RuntimeError):
    """A device that is not plugged in, cannot be opened, or went away; the text names it and what to check."""


@dataclasses.dataclass
class TeleopReading:
    """What a device says now. `changed_at` is the monotonic time of its newest input (for latency figures)."""

    device: str
    is_intervention: bool = False
    motion: np.ndarray | None = None  # float32[6]: x y z roll pitch yaw in [-1, 1]
    gripper: float | None = None  # -1 open .. +1 closed; None: the device does not command the gripper
    action: np.ndarray | None = None  # a whole env action in [-1, 1] (overrides motion/gripper)
    events: frozenset[str] = frozenset()
    connected: bool = True
    changed_at: float = 0.0

    def magnitude(self) -> float:
        """The size of the commanded motion (max |axis|), for implicit takeover."""
        if self.action is not None:
            return float(np.max(np.abs(self.action))) if self.action.size else 0.0
        return float(np.max(np.abs(self.motion))) if self.motion is not None else 0.0


class TeleopDevice:
    """Base class: subclasses open their hardware in `_open` and feed input through `_update` / `_emit` from their
    own thread (or from `_poll`, called by `read` for devices that are polled rather than pushed)."""

    name = "device"
    needs_env = False  # True: `make_device` passes the (unwrapped) env it runs on as `env=`

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.name
        self._lock = threading.Lock()
        self._state = TeleopReading(self.name, motion=np.zeros(6, np.float32))
        self._events: set[str] = set()
        self._toggle = False
        self.started = False

    # --- for subclasses -----------------------------------------------------------------------
    def _open(self) -> None:
        """Open the hardware; raise DeviceUnavailable naming the device when it is not there."""

    def _close(self) -> None:
        pass

    def _poll(self) -> None:
        """Called by `read()` for devices polled from the control loop; must not block."""

    def _update(self, **fields) -> None:
        """Set reading fields (motion, gripper, action, is_intervention, connected) from the device's input."""
        with self._lock:
            for key, value in fields.items():
                if key == "motion" and value is not None:
                    value = np.clip(np.asarray(value, np.float32).reshape(6), -1.0, 1.0)
                elif key == "action" and value is not None:
                    value = np.clip(np.asarray(value, np.float32), -1.0, 1.0)
                elif key == "is_intervention":
                    self._toggle = bool(value)  # the next toggle flips what the human sees, not a stale state
                setattr(self._state, key, value)
            self._state.changed_at = time.monotonic()

    def _emit(self, event: str) -> None:
        """A one-shot event, or `intervention_toggle` (explicit takeover: each press flips who is in control)."""
        with self._lock:
            if event == "intervention_toggle":
                self._toggle = not self._toggle
                self._state.is_intervention = self._toggle
            elif event in EVENTS:
                self._events.add(event)
            else:
                raise ValueError(f"unknown teleop event '{event}' (known: intervention_toggle, {', '.join(EVENTS)})")
            self._state.changed_at = time.monotonic()

    # --- for the actor ------------------------------------------------------------------------
    def observe(self, obs: dict, policy_action: np.ndarray) -> None:
        """What the robot sees and what the policy proposes, before each step (a simulated human watches these;
        a real device ignores them). Must not block."""

    def episode_start(self) -> None:
        """A new episode begins (a device with per-episode state resets it)."""

    def start(self) -> TeleopDevice:
        if not self.started:
            self._open()
            self.started = True
        return self

    def read(self) -> TeleopReading:
        """The newest reading, at once; its one-shot events are consumed."""
        if not self.started:
            raise DeviceUnavailable(f"{self.name}: read before start()")
        self._poll()
        with self._lock:
            reading = dataclasses.replace(self._state, events=frozenset(self._events))
            if reading.motion is not None:
                reading.motion = reading.motion.copy()
            self._events.clear()
        return reading

    def close(self) -> None:
        if self.started:
            self.started = False
            self._close()


class FakeDevice(TeleopDevice):
    """A device driven by the test or the benchmark: `push(...)` stands for the human's input."""

    name = "fake"

    def __init__(self, name: str = "fake", fail_on_open: bool = False) -> None:
        super().__init__(name)
        self.fail_on_open = fail_on_open

    def _open(self) -> None:
        if self.fail_on_open:
            raise DeviceUnavailable(f"{self.name}: not plugged in")

    def push(self, events: Iterable[str] = (), **fields) -> None:
        if fields:
            self._update(**fields)
        for event in events:
            self._emit(event)

    def unplug(self) -> None:
        self._update(connected=False, is_intervention=False)
