"""The arm driver interface every robot implements, and the clocks the drivers and their twins keep time by.

A driver talks to one arm's SDK (a Feetech bus, franky, ur-rtde) and speaks joints: `read()` gives the arm's state,
`command_joints()` sets a joint target without waiting, `hold()` stops where the arm is. The end-effector control,
the IK (with the same `ArmModel` as the arm's twin) and the safety checks sit above it in `hardware/env.py` and
`hardware/safety.py`, so every arm gets the same ones. A missing SDK is one line naming the extra that installs it.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time

import numpy as np

from hardware.kinematics import ArmModel
from robo_rl.errors import UserError

EFFORT_KINDS = ("force_n", "current")  # what `ArmState.effort` measures: external force (N) or max motor load (0..1)


class HardwareError(UserError, RuntimeError):
    """The arm cannot do what was asked (not connected, a fault it reports, a move that did not finish)."""


def import_sdk(module: str, extra: str, robot: str):
    """`module`, or ImportError in one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"the {robot} driver needs the `{module}` module ({e.name or module} is missing): uv sync --extra {extra}"
        ) from None


class Clock:
    """Wall time (monotonic). Drivers on metal and real-time twins run on it."""

    virtual = False

    def now(self) -> float:
        return time.monotonic()

    def sleep_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class VirtualClock(Clock):
    """Simulated time for a twin run faster than real time: sleeping advances it at once."""

    virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def sleep_until(self, t: float) -> None:
        with self._lock:
            self._t = max(self._t, t)


@dataclasses.dataclass
class ArmState:
    """One reading of the arm. Times are the driver clock's (`Clock.now`)."""

    t: float
    joints: np.ndarray  # rad, the arm joints of the kinematic model, in its order
    joint_vel: np.ndarray  # rad/s
    ee_pos: np.ndarray  # m, base frame
    ee_quat: np.ndarray  # w x y z
    gripper: float  # 0 open .. 1 closed
    effort: float  # EFFORT_KINDS: external force (N) or the largest motor load (fraction of its limit)
    fault: str | None = None  # what the arm itself reports (a reflex, a protective stop), None when fine


class ArmDriver:
    """Base class. Subclasses open the SDK in `connect`, implement `read`, `command_joints` and, where the arm has
    them, `recover` (clear a fault) and `hold` (a native stop); everything else is shared."""

    robot = "arm"
    joint_names: tuple[str, ...] = ()  # the kinematic model's arm joints: the learner's spec is told from these
    effort_kind = "current"
    default_effort_limit = 0.8  # where the safety layer stops the arm, in `effort_kind` units
    # what `robo-rl doctor` checks, read from the class the config's _target_ names (a new arm brings its own)
    sdk_module: str | None = None  # the SDK module the metal needs (None: none)
    sdk_extra: str | None = None  # the `uv sync --extra` that installs it
    network_port: int | None = None  # the TCP port a networked arm answers on at its `host`

    def __init__(self, model: ArmModel, clock: Clock | None = None, home: list[float] | None = None) -> None:
        self.model = model
        self.clock = clock or Clock()
        self.home_joints = np.asarray(home if home is not None else model.home, float)
        self.lock = threading.RLock()  # the control loop and the safety watchdog both command the arm
        self.connected = False
        self.last_command: np.ndarray | None = None
        self.commands = 0
        self.holds = 0

    # --- to implement -------------------------------------------------------------------------
    def connect(self) -> None:
        self.connected = True

    def close(self) -> None:
        self.connected = False

    def read(self) -> ArmState:
        raise NotImplementedError

    def _send_joints(self, q: np.ndarray, gripper: float | None) -> None:
        raise NotImplementedError

    def recover(self) -> None:
        """Clear a fault the arm reports (a Franka reflex, a UR protective stop); nothing to do by default."""

    def freedrive(self, on: bool) -> None:
        """Let a person move the arm by hand (its torque off, or the arm's free-drive mode), or end that."""
        raise HardwareError(
            f"{self.robot}: no free-drive mode through its SDK: calibrate with mode=device human=<a teleop device>"
        )

    # --- shared -------------------------------------------------------------------------------
    def command_joints(self, q: np.ndarray, gripper: float | None = None) -> None:
        """Set the joint target (rad) and gripper (0 open .. 1 closed, None: keep) without waiting."""
        q = np.asarray(q, float)
        if q.shape != (self.model.dof,) or not np.all(np.isfinite(q)):
            raise ValueError(f"{self.robot}: joint command must be {self.model.dof} finite values, got {q.tolist()}")
        with self.lock:
            if not self.connected:
                raise HardwareError(f"{self.robot}: not connected")
            self._send_joints(q, None if gripper is None else float(np.clip(gripper, 0.0, 1.0)))
            self.last_command = q
            self.commands += 1

    def hold(self) -> None:
        """Stop where the arm is now: its present joints become the target (the gripper keeps its command)."""
        with self.lock:
            if not self.connected:
                return
            self._send_joints(self.read().joints, None)
            self.holds += 1

    def move_to(
        self,
        q_goal: np.ndarray,
        speed_rad_s: float = 0.5,
        rate_hz: float = 50.0,
        tol_rad: float = 0.02,
        timeout_s: float = 15.0,
        gripper: float | None = None,
    ) -> None:
        """Blocking joint-space move at a bounded speed (reset to home, recovery after an IK failure); raises
        HardwareError if the arm does not get there within `timeout_s`."""
        q_goal = self.model.clip(np.asarray(q_goal, float))
        start = self.clock.now()
        q_cmd = self.read().joints
        period = 1.0 / rate_hz
        tick = start
        while True:
            step = q_goal - q_cmd
            q_cmd = q_cmd + np.clip(step, -speed_rad_s * period, speed_rad_s * period)
            self.command_joints(q_cmd, gripper)
            tick += period
            self.clock.sleep_until(tick)
            now = self.read()
            if np.array_equal(q_cmd, q_goal) and np.max(np.abs(now.joints - q_goal)) < tol_rad:
                return  # the goal itself commanded (not a point short of it) and the arm there
            if self.clock.now() - start > timeout_s:
                raise HardwareError(
                    f"{self.robot}: did not reach the joint goal within {timeout_s:.0f} s (off by "
                    f"{np.max(np.abs(now.joints - q_goal)):.3f} rad): is the arm blocked?"
                )

    def home(self, timeout_s: float = 15.0) -> None:
        self.move_to(self.home_joints, timeout_s=timeout_s, gripper=0.0)

    def __enter__(self) -> ArmDriver:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
