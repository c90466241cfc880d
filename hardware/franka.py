"""A Franka arm (Panda or FR3) through `franky` (`uv sync --extra franka`), or its MuJoCo twin through a fake `franky`.

The driver streams joint targets: each command is an asynchronous `JointMotion` that preempts the one before, and
franky re-plans a jerk-limited trajectory to it at 1 kHz (scaled by `dynamics_factor`). The effort is the norm of
the external force franky estimates at the tool (N). A reflex (a collision, a limit) aborts the motion with a
`ControlException`; its message is kept in `ArmState.fault` until `recover()`.

franky's PyPI wheel is built for the newest robot server; a Panda or an FR3 on older firmware needs the wheel for its
server version (franky's FAQ: "server version mismatch").
"""

from __future__ import annotations

import numpy as np

from hardware.arm import ArmDriver, ArmState, Clock, HardwareError, import_sdk
from hardware.kinematics import ArmModel, robosuite_robot_xml
from hardware.twin import ArmTwin, resolve_twin

PANDA_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
PANDA_HOME_RAD = (0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4)  # franky's "ready" pose
FRANKA_HAND_TCP_M = 0.1034  # flange to the fingertip centre along the flange z: Desk's default end effector

FRANKA_FORCE_LIMIT_N = 20.0  # the safety stop, below franky's default collision reflex (30 N) so it comes first
FRANKA_HAND_MAX_WIDTH_M = 0.08  # the Franka Hand's stroke, used when the gripper does not report its own
GRIPPER_SPEED_M_S = 0.1
GRASP_FORCE_N = 40.0  # what a grasp holds the object with
GRASP_ABOVE = 0.95  # a command this closed grasps (keeps squeezing whatever is there) instead of moving to a width
GRIPPER_DEADBAND = 0.05  # fraction of the stroke: smaller changes are not sent (each command restarts the gripper)
STOP_DYNAMICS_FACTOR = 1.0  # a hold decelerates at the full (global-factor-scaled) limits
CLOSE_TIMEOUT_S = 2.0  # how long closing waits for the stop motion to finish


def panda_model(tcp_m: float = FRANKA_HAND_TCP_M) -> ArmModel:
    """The Panda of robosuite, its tool point `tcp_m` beyond the flange (the Franka Hand's fingertips by default).
    At home the tool is 0.31 m in front of the base, 0.49 m up, pointing down; an FR3 has the same kinematics."""
    return ArmModel(
        robosuite_robot_xml("panda"),
        list(PANDA_JOINTS),
        "ee",
        list(PANDA_HOME_RAD),
        "panda",
        ee_body="right_hand",
        ee_offset=(0.0, 0.0, tcp_m),
    )


class FrankaDriver(ArmDriver):
    """`twin=True` (or an `ArmTwin`): the same code against a fake `franky` backed by the twin; `twin_kw` go to
    `ArmTwin`. `dynamics_factor` scales franky's velocity, acceleration and jerk limits (0..1]. `franky_module`
    replaces the SDK (what the twin path does)."""

    robot = "franka"
    joint_names = PANDA_JOINTS
    effort_kind = "force_n"
    default_effort_limit = FRANKA_FORCE_LIMIT_N
    sdk_module, sdk_extra = "franky", "franka"
    network_port = 1337  # libfranka's command connection to the FCI

    def __init__(
        self,
        host: str = "172.16.0.2",
        twin: bool | ArmTwin = False,
        clock: Clock | None = None,
        home: list[float] | None = None,
        dynamics_factor: float = 0.2,
        gripper: bool = True,
        franky_module=None,
        **twin_kw,
    ) -> None:
        if not 0.0 < dynamics_factor <= 1.0:
            raise ValueError(f"franka: dynamics_factor must be in (0, 1], got {dynamics_factor}")
        self.twin, clock = resolve_twin("franka", twin, clock, panda_model, twin_kw)
        super().__init__(self.twin.arm if self.twin else panda_model(), clock, home)
        if franky_module is None:
            if self.twin is not None:
                from hardware import fake_franky

                franky_module = fake_franky.module_for(self.twin)
            else:
                franky_module = import_sdk(self.sdk_module, self.sdk_extra, "Franka")
        self.franky = franky_module
        self.host = host
        self.dynamics_factor = float(dynamics_factor)
        self.use_gripper = bool(gripper)
        self._robot = None
        self._gripper = None
        self._max_width_m = FRANKA_HAND_MAX_WIDTH_M
        self._gripper_cmd: float | None = None
        self._fault: str | None = None

    def connect(self) -> None:
        try:
            self._robot = self.franky.Robot(self.host, relative_dynamics_factor=self.dynamics_factor)
            if self.use_gripper:
                self._gripper = self.franky.Gripper(self.host)
                self._max_width_m = float(self._gripper.max_width) or FRANKA_HAND_MAX_WIDTH_M  # 0 before homing
        except Exception as e:  # franky's NetworkException, IncompatibleVersionException, ...
            raise HardwareError(f"franka: cannot connect to {self.host}: {type(e).__name__}: {e}") from e
        self._gripper_cmd = None
        self._fault = None
        super().connect()

    def close(self) -> None:
        with self.lock:
            if self._robot is not None:
                try:
                    self._robot.move(self.franky.JointStopMotion(STOP_DYNAMICS_FACTOR), asynchronous=True)
                    self._robot.join_motion(CLOSE_TIMEOUT_S)
                except Exception:  # a faulted or lost arm is already still
                    pass
            self._robot = self._gripper = None
            super().close()

    def read(self) -> ArmState:
        with self.lock:
            if self._robot is None:
                raise HardwareError("franka: not connected")
            try:  # an asynchronous motion's reflex surfaces here
                self._robot.poll_motion()
            except self.franky.ControlException as e:
                self._fault = self._fault or f"{type(e).__name__}: {e}"
            state = self._robot.state
            q = np.asarray(state.q, float).reshape(-1)
            dq = np.asarray(state.dq, float).reshape(-1)
            force = float(np.linalg.norm(np.asarray(state.O_F_ext_hat_K, float).reshape(-1)[:3]))
            fault = self._fault
            if fault is None and state.robot_mode in (self.franky.RobotMode.Reflex, self.franky.RobotMode.UserStopped):
                fault = f"robot mode {state.robot_mode}"  # a reflex outside our motions, or the enabling button
            gripper = 1.0 - float(self._gripper.width) / self._max_width_m if self._gripper is not None else 0.0
            pos, quat = self.model.fk(q)
            return ArmState(self.clock.now(), q, dq, pos, quat, float(np.clip(gripper, 0.0, 1.0)), force, fault)

    def _send_joints(self, q: np.ndarray, gripper: float | None) -> None:
        if self._fault is not None:
            return  # the arm is in reflex: franky refuses motions until recover()
        motion = self.franky.JointMotion(q, return_when_finished=False)  # keeps holding: no loop restart
        try:
            self._robot.move(motion, asynchronous=True)  # preempts the running motion
        except (self.franky.ControlException, self.franky.CommandException) as e:  # aborted, or refused in reflex
            self._fault = f"{type(e).__name__}: {e}"
            return
        if gripper is not None and self._gripper is not None:
            self._command_gripper(gripper)

    def _command_gripper(self, closed: float) -> None:
        if self._gripper_cmd is not None and abs(closed - self._gripper_cmd) < GRIPPER_DEADBAND:
            return
        if closed >= GRASP_ABOVE:  # any width counts as grasped: it squeezes an object or closes fully
            self._gripper.grasp_async(0.0, GRIPPER_SPEED_M_S, GRASP_FORCE_N, epsilon_outer=self._max_width_m)
        else:
            self._gripper.move_async((1.0 - closed) * self._max_width_m, GRIPPER_SPEED_M_S)
        self._gripper_cmd = closed

    def hold(self) -> None:
        """A native stop: franky decelerates the running motion to rest at its limits."""
        with self.lock:
            if self._robot is None or self._fault is not None:
                return  # a reflex has already stopped the arm
            try:
                self._robot.move(self.franky.JointStopMotion(STOP_DYNAMICS_FACTOR), asynchronous=True)
            except (self.franky.ControlException, self.franky.CommandException) as e:
                self._fault = f"{type(e).__name__}: {e}"
            self.holds += 1

    def freedrive(self, on: bool) -> None:
        """A Franka is moved by hand with the guiding buttons on its wrist (the arm in Desk's 'programming' mode):
        nothing to send, only the operator to tell."""
        if on:
            print("franka: hold the guiding buttons on the wrist to move the arm by hand", flush=True)

    def recover(self) -> None:
        """Clear a reflex (franky's automatic error recovery); the arm stays where it stopped."""
        with self.lock:
            if self._robot is None:
                raise HardwareError("franka: not connected")
            try:
                ok = self._robot.recover_from_errors()
            except Exception as e:  # CommandException, NetworkException
                raise HardwareError(f"franka: error recovery failed: {type(e).__name__}: {e}") from e
            if not ok:
                raise HardwareError(
                    "franka: error recovery failed: is the enabling button released or the arm locked in Desk?"
                )
            self._fault = None
            self.last_command = None
