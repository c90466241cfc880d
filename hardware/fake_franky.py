"""A fake `franky` backed by an `ArmTwin`: what `FrankaDriver` talks to in CI in place of the arm.

It has franky 2.0's names, signatures and value types for the part a joint-streaming driver uses: `Robot` (`move`
with joint motions, `poll_motion`, `join_motion`, `stop`, `recover_from_errors`, `state`, `current_joint_state`),
`Gripper` (`move`/`grasp`/`open` and their `_async` futures, `width`, `max_width`), `JointMotion`,
`JointStopMotion`, `JointState`, `RobotState` (q, dq, O_F_ext_hat_K, robot_mode), `RobotMode`, `ReferenceType` and
the exceptions. A twin fault is a reflex: the running motion ends with a `ControlException` (from `poll_motion` or
the next `move`) and `recover_from_errors` clears it, leaving the arm where it stopped.
"""

from __future__ import annotations

import dataclasses
import enum
import types

import numpy as np

from hardware.twin import ArmTwin

FRANKA_HAND_MAX_WIDTH_M = 0.08
REACHED_RAD = 1e-3  # a blocking motion is finished this close to its target
REACHED_FRACTION = 1e-3  # of the gripper stroke
WAIT_STEP_S = 0.01  # how a blocking call advances the clock while it waits
WAIT_TIMEOUT_S = 30.0  # a blocking call that has not finished by then raises (the twin is stuck)
HOMING_SPEED_M_S = 0.1


class ControlException(Exception):
    """Raised when a motion is aborted (a reflex, a limit)."""


class CommandException(Exception):
    """Raised when a command is rejected (franky's `CommandException`)."""


class NetworkException(Exception):
    pass


class RobotMode(enum.Enum):
    Other = 0
    Idle = 1
    Move = 2
    Guiding = 3
    Reflex = 4
    UserStopped = 5
    AutomaticErrorRecovery = 6


class ReferenceType(enum.Enum):
    Absolute = 0
    Relative = 1


class JointState:
    def __init__(self, position, velocity=None) -> None:
        if isinstance(position, JointState):
            position, velocity = position.position, position.velocity
        self._position = np.asarray(position, float).copy()
        self._velocity = np.zeros_like(self._position) if velocity is None else np.asarray(velocity, float).copy()

    @property
    def position(self) -> np.ndarray:
        return self._position.copy()

    @property
    def velocity(self) -> np.ndarray:
        return self._velocity.copy()

    def __repr__(self) -> str:
        return f"JointState(position={self._position.tolist()}, velocity={self._velocity.tolist()})"


class JointMotion:
    """A joint motion with a single target (franky plans a jerk-limited trajectory; the twin's servos move there)."""

    def __init__(
        self,
        target,
        reference_type: ReferenceType = ReferenceType.Absolute,
        relative_dynamics_factor: float = 1.0,
        return_when_finished: bool = True,
    ) -> None:
        self._target = JointState(target)
        self._reference_type = reference_type
        self.relative_dynamics_factor = float(relative_dynamics_factor)
        self.return_when_finished = bool(return_when_finished)

    @property
    def target(self) -> JointState:
        return self._target

    @property
    def reference_type(self) -> ReferenceType:
        return self._reference_type


class JointStopMotion:
    """Decelerates the running joint motion to rest (the twin: stops where it is)."""

    def __init__(self, relative_dynamics_factor: float = 1.0) -> None:
        self.relative_dynamics_factor = float(relative_dynamics_factor)


@dataclasses.dataclass
class RobotState:
    q: np.ndarray  # (7,) rad
    dq: np.ndarray  # (7,) rad/s
    O_F_ext_hat_K: np.ndarray  # (6,) estimated external wrench on the tool, base frame: N, N, N, Nm, Nm, Nm
    robot_mode: RobotMode


class BoolFuture:
    def __init__(self, result: bool) -> None:
        self._result = result

    def get(self) -> bool:
        return self._result

    def wait(self, timeout: float | None = None) -> bool:
        return True


def _wait_until(twin: ArmTwin, done) -> None:
    """Advance the twin's clock until `done()`: a blocking franky call."""
    clock = twin.clock
    deadline = clock.now() + WAIT_TIMEOUT_S
    while not done():
        if twin.fault is not None:
            raise ControlException(f"libfranka: motion aborted by reflex ({twin.fault})")
        if clock.now() > deadline:
            raise ControlException(f"the twin did not finish the motion within {WAIT_TIMEOUT_S:.0f} s")
        clock.sleep_until(clock.now() + WAIT_STEP_S)


class Robot:
    """franky's `Robot` on the twin. `twin` is set by `module_for`."""

    twin: ArmTwin
    control_rate = 0.001
    degrees_of_freedom = 7

    def __init__(
        self,
        fci_hostname: str,
        relative_dynamics_factor: float = 1.0,
        default_torque_threshold: float = 20.0,
        default_force_threshold: float = 30.0,
    ) -> None:
        self.fci_hostname = fci_hostname
        self.relative_dynamics_factor = float(relative_dynamics_factor)
        self.default_torque_threshold = float(default_torque_threshold)
        self.default_force_threshold = float(default_force_threshold)
        self._motion: JointMotion | JointStopMotion | None = None  # the running motion, None when idle

    def _reached(self) -> bool:
        _, q, _, _ = self.twin.read()
        return bool(np.max(np.abs(q - self.twin.target)) < REACHED_RAD)

    def move(
        self, motion, asynchronous: bool = False, limit_rate: bool = False, cutoff_frequency: float = 100.0
    ) -> None:
        if self.twin.fault is not None:
            self._motion = None
            raise ControlException(f"libfranka: Move command aborted: motion aborted by reflex! ({self.twin.fault})")
        q_now = self.twin.read()[1]
        if isinstance(motion, JointStopMotion):
            self.twin.set_target(q_now)
        elif isinstance(motion, JointMotion):
            target = motion.target.position
            if target.shape != q_now.shape:
                raise ValueError(f"JointMotion target has {target.size} joints, the robot {q_now.size}")
            self.twin.set_target(q_now + target if motion.reference_type == ReferenceType.Relative else target)
        else:
            raise TypeError(f"the fake franky runs joint motions only, got {type(motion).__name__}")
        self._motion = motion
        if not asynchronous:
            self.join_motion()

    def poll_motion(self) -> bool:
        """Whether a motion is running; raises the ControlException of one a reflex aborted."""
        if self._motion is None:
            return False
        if self.twin.fault is not None:
            self._motion = None
            raise ControlException(f"libfranka: Move command aborted: motion aborted by reflex! ({self.twin.fault})")
        if getattr(self._motion, "return_when_finished", True) and self._reached():
            self._motion = None
        return self._motion is not None

    def join_motion(self, timeout: float | None = None) -> bool:
        if self._motion is None:
            return True
        if not getattr(self._motion, "return_when_finished", True):  # holds its target until preempted
            if timeout is not None:
                self.twin.clock.sleep_until(self.twin.clock.now() + timeout)
            return False
        _wait_until(self.twin, self._reached)
        self._motion = None
        return True

    def stop(self) -> None:
        self.twin.set_target(self.twin.read()[1])
        self._motion = None

    def recover_from_errors(self) -> bool:
        if self.twin.fault is not None:
            self.twin.fault = None
            self.twin.set_target(self.twin.read()[1])  # the aborted motion is gone: the arm stays
        self._motion = None
        return True

    @property
    def state(self) -> RobotState:
        _, q, dq, _ = self.twin.read()
        if self.twin.fault is not None:
            mode = RobotMode.Reflex
        else:
            mode = RobotMode.Move if self._motion is not None else RobotMode.Idle
        wrench = np.array([0.0, 0.0, -self.twin.force_n(), 0.0, 0.0, 0.0])  # the environment pushes the tool up
        return RobotState(q, dq, wrench, mode)

    @property
    def current_joint_state(self) -> JointState:
        _, q, dq, _ = self.twin.read()
        return JointState(q, dq)

    @property
    def current_joint_positions(self) -> np.ndarray:
        return self.twin.read()[1]

    @property
    def current_joint_velocities(self) -> np.ndarray:
        return self.twin.read()[2]

    @property
    def has_errors(self) -> bool:
        return self.twin.fault is not None

    @property
    def is_in_control(self) -> bool:
        return self._motion is not None


class Gripper:
    """franky's `Gripper` (the Franka Hand) on the twin's gripper: width (m) = (1 - closed) × max width."""

    twin: ArmTwin
    _max_width_m = FRANKA_HAND_MAX_WIDTH_M

    def __init__(self, fci_hostname: str) -> None:
        self.fci_hostname = fci_hostname
        self._grasping = False

    def _set(self, width: float) -> None:
        self.twin.read()  # brings the twin up to now before its target changes
        with self.twin.lock:
            self.twin.gripper_target = float(np.clip(1.0 - width / self._max_width_m, 0.0, 1.0))

    def _reached(self) -> bool:
        return abs(self.twin.read()[3] - self.twin.gripper_target) < REACHED_FRACTION

    def move(self, width: float, speed: float) -> bool:
        self.move_async(width, speed)
        _wait_until(self.twin, self._reached)
        return True

    def move_async(self, width: float, speed: float) -> BoolFuture:
        if not 0.0 <= width <= self._max_width_m:
            raise CommandException(f"libfranka gripper: width {width} m outside [0, {self._max_width_m}]")
        self._grasping = False
        self._set(width)
        return BoolFuture(True)

    def grasp(
        self, width: float, speed: float, force: float, epsilon_inner: float = 0.005, epsilon_outer: float = 0.005
    ) -> bool:
        self.grasp_async(width, speed, force, epsilon_inner, epsilon_outer)
        _wait_until(self.twin, self._reached)
        return True

    def grasp_async(
        self, width: float, speed: float, force: float, epsilon_inner: float = 0.005, epsilon_outer: float = 0.005
    ) -> BoolFuture:
        self._grasping = True
        self._set(width)  # nothing between the twin's fingers: they close to `width`
        return BoolFuture(True)

    def open(self, speed: float) -> bool:
        return self.move(self._max_width_m, speed)

    def open_async(self, speed: float) -> BoolFuture:
        return self.move_async(self._max_width_m, speed)

    def homing(self) -> bool:
        return self.move(self._max_width_m, HOMING_SPEED_M_S)

    def stop(self) -> bool:
        self._set(self.width)
        return True

    @property
    def width(self) -> float:
        return (1.0 - self.twin.read()[3]) * self._max_width_m

    @property
    def max_width(self) -> float:
        return self._max_width_m

    @property
    def is_grasped(self) -> bool:
        return self._grasping


def module_for(twin: ArmTwin, max_width_m: float = FRANKA_HAND_MAX_WIDTH_M) -> types.ModuleType:
    """A `franky` module whose `Robot` and `Gripper` drive `twin` (pass it as `FrankaDriver(franky_module=...)`)."""
    module = types.ModuleType("franky", "fake franky backed by a MuJoCo twin (hardware.fake_franky)")
    module.Robot = type("Robot", (Robot,), {"twin": twin})
    module.Gripper = type("Gripper", (Gripper,), {"twin": twin, "_max_width_m": float(max_width_m)})
    for cls in (
        JointMotion,
        JointStopMotion,
        JointState,
        RobotState,
        RobotMode,
        ReferenceType,
        BoolFuture,
        ControlException,
        CommandException,
        NetworkException,
    ):
        setattr(module, cls.__name__, cls)
    return module
