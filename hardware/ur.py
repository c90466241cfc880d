"""A Universal Robots arm (UR5e) through `ur_rtde` (`uv sync --extra ur`), or its MuJoCo twin through fake RTDE clients.

Joint targets stream as `servoJ`: the controller servos to each target over one command period (`1 / control_hz`,
set it to the env's rate), smoothed by `servo_lookahead_s` and tracked with `servo_gain`. The effort is the norm of
the TCP force the controller reports (N; zeroed at connect so the tool's weight does not read as contact). A
protective stop shows in `ArmState.fault`; `recover()` unlocks it through the dashboard server and restarts the RTDE
control script. A Robotiq gripper talks to its URCap's socket on the controller (`RobotiqGripper`).

The kinematic model is robosuite's UR5e: its base frame is ROS's `base_link`, turned 180° about z from the base
frame the pendant and `getActualTCPPose` use; the joints are the same, and the driver speaks only joints.
"""

from __future__ import annotations

import socket
import types

import numpy as np

from hardware.arm import ArmDriver, ArmState, Clock, HardwareError, import_sdk
from hardware.kinematics import ArmModel, robosuite_robot_xml
from hardware.twin import ArmTwin, resolve_twin

UR5E_JOINTS = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
)
UR5E_HOME_RAD = (0.0, -np.pi / 2, np.pi / 2, -np.pi / 2, -np.pi / 2, 0.0)  # tool 0.49 m in front, 0.49 m up, down

UR_FORCE_LIMIT_N = 25.0  # the safety stop: above the e-series TCP force noise, well below a protective stop
SERVOJ_UNUSED = 0.0  # servoJ's speed and acceleration arguments: not used by the controller (ur_rtde 1.6)
SERVO_LOOKAHEAD_RANGE_S = (0.03, 0.2)  # what the controller accepts
SERVO_GAIN_RANGE = (100.0, 2000.0)
SERVO_STOP_DECEL_M_S2 = 10.0  # a hold's deceleration of the tool (ur_rtde's default)
GRIPPER_DEADBAND = 0.02  # fraction of the stroke: smaller changes are not sent
# RTDE safety_mode values
SAFETY_MODES = {
    1: "normal",
    2: "reduced",
    3: "protective stop",
    4: "recovery",
    5: "safeguard stop",
    6: "system emergency stop",
    7: "robot emergency stop",
    8: "violation",
    9: "fault",
    10: "validate joint id",
    11: "undefined",
    12: "automatic mode safeguard stop",
    13: "system three position enabling stop",
}
SAFETY_OK = (1, 2)
SAFETY_PROTECTIVE_STOP = 3

ROBOTIQ_PORT = 63352  # the Robotiq URCap's command socket on the UR controller
ROBOTIQ_MAX = 255  # the URCap's position/speed/force scale: 0 open .. 255 closed
ROBOTIQ_ACTIVE = 3  # STA: activation complete
ROBOTIQ_TIMEOUT_S = 2.0  # socket replies
ROBOTIQ_ACTIVATION_S = 5.0  # activation opens and closes the fingers once
ROBOTIQ_POLL_S = 0.1
ROBOTIQ_REPLY_BYTES = 1024


def ur5e_model(tcp_m: float = 0.0) -> ArmModel:
    """robosuite's UR5e, its tool point `tcp_m` beyond the flange along the tool axis (0: the flange; set the
    gripper's TCP length, as on the pendant)."""
    return ArmModel(
        robosuite_robot_xml("ur5e"),
        list(UR5E_JOINTS),
        "ee",
        list(UR5E_HOME_RAD),
        "ur5e",
        ee_body="right_hand",
        ee_offset=(0.0, 0.0, tcp_m),
    )


class RobotiqGripper:
    """A Robotiq 2F gripper through the Robotiq URCap's ASCII socket on the UR controller: ``SET VAR value ...``
    answers ``ack``, ``GET VAR`` answers ``VAR value``. Position is 0 open .. 1 closed; `speed` and `force` are
    fractions of the gripper's range. `socket_connect` makes the socket (`socket.create_connection`'s signature; the
    twin's fake replaces it)."""

    def __init__(
        self,
        host: str,
        port: int = ROBOTIQ_PORT,
        socket_connect=socket.create_connection,
        clock: Clock | None = None,
        speed: float = 1.0,
        force: float = 0.5,
        timeout_s: float = ROBOTIQ_TIMEOUT_S,
    ) -> None:
        self.host, self.port, self.timeout_s = host, int(port), float(timeout_s)
        self._socket_connect = socket_connect
        self.clock = clock or Clock()
        self.speed, self.force = float(np.clip(speed, 0, 1)), float(np.clip(force, 0, 1))
        self._sock = None

    def _ask(self, line: str) -> str:
        if self._sock is None:
            raise HardwareError("robotiq: not connected")
        self._sock.sendall(f"{line}\n".encode())
        return self._sock.recv(ROBOTIQ_REPLY_BYTES).decode(errors="replace").strip()  # one reply per request

    def _set(self, **values: int) -> None:
        line = "SET " + " ".join(f"{k} {int(v)}" for k, v in values.items())
        reply = self._ask(line)
        if reply != "ack":
            raise HardwareError(f"robotiq: '{line}' answered '{reply}'")

    def _get(self, var: str) -> int:
        reply = self._ask(f"GET {var}").split()
        if len(reply) != 2 or reply[0] != var:
            raise HardwareError(f"robotiq: 'GET {var}' answered '{' '.join(reply)}'")
        return int(reply[1])

    def connect(self) -> None:
        """Open the socket, and activate the gripper if it is not yet (it opens and closes once)."""
        try:
            self._sock = self._socket_connect((self.host, self.port), self.timeout_s)
        except OSError as e:
            raise HardwareError(
                f"robotiq: no URCap socket at {self.host}:{self.port} ({e}): is the Robotiq URCap "
                "installed and the gripper connected?"
            ) from e
        if self._get("STA") != ROBOTIQ_ACTIVE:
            self._set(ACT=1)
            deadline = self.clock.now() + ROBOTIQ_ACTIVATION_S
            while self._get("STA") != ROBOTIQ_ACTIVE:
                if self.clock.now() > deadline:
                    raise HardwareError(f"robotiq: not activated within {ROBOTIQ_ACTIVATION_S:.0f} s")
                self.clock.sleep_until(self.clock.now() + ROBOTIQ_POLL_S)
        self._set(SPE=round(self.speed * ROBOTIQ_MAX), FOR=round(self.force * ROBOTIQ_MAX))

    def move(self, closed: float) -> None:
        """Go to `closed` (0 open .. 1 closed) without waiting; on an object it stops and holds with `force`."""
        self._set(POS=round(float(np.clip(closed, 0, 1)) * ROBOTIQ_MAX), GTO=1)

    def position(self) -> float:
        return self._get("POS") / ROBOTIQ_MAX

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class URDriver(ArmDriver):
    """`twin=True` (or an `ArmTwin`): the same code against fake RTDE clients backed by the twin; `twin_kw` go to
    `ArmTwin`. `gripper`: "robotiq" or None. `rtde_modules` replaces the SDK (what the twin path does): a namespace
    with `rtde_control`, `rtde_receive`, `dashboard_client` and, optionally, `socket_connect` for the gripper."""

    robot = "ur"
    joint_names = UR5E_JOINTS
    effort_kind = "force_n"
    default_effort_limit = UR_FORCE_LIMIT_N
    sdk_module, sdk_extra = "rtde_control", "ur"
    network_port = 30004  # RTDE

    def __init__(
        self,
        host: str = "192.168.1.10",
        twin: bool | ArmTwin = False,
        clock: Clock | None = None,
        home: list[float] | None = None,
        servo_lookahead_s: float = 0.1,
        servo_gain: float = 300.0,
        control_hz: float = 10.0,
        gripper: str | None = "robotiq",
        tcp_m: float = 0.0,
        rtde_modules=None,
        **twin_kw,
    ) -> None:
        lo, hi = SERVO_LOOKAHEAD_RANGE_S
        if not lo <= servo_lookahead_s <= hi:
            raise ValueError(f"ur: servo_lookahead_s must be in [{lo}, {hi}] s, got {servo_lookahead_s}")
        lo, hi = SERVO_GAIN_RANGE
        if not lo <= servo_gain <= hi:
            raise ValueError(f"ur: servo_gain must be in [{lo:.0f}, {hi:.0f}], got {servo_gain}")
        if control_hz <= 0:
            raise ValueError(f"ur: control_hz must be positive, got {control_hz}")
        if gripper not in ("robotiq", None):
            raise ValueError(f"ur: gripper must be 'robotiq' or None, got {gripper!r}")
        self.twin, clock = resolve_twin("ur", twin, clock, lambda: ur5e_model(tcp_m), twin_kw)
        super().__init__(self.twin.arm if self.twin else ur5e_model(tcp_m), clock, home)
        if rtde_modules is None:
            if self.twin is not None:
                from hardware import fake_rtde

                rtde_modules = fake_rtde.modules_for(self.twin)
            else:
                sdk = ("rtde_control", "rtde_receive", "dashboard_client")
                rtde_modules = types.SimpleNamespace(**{m: import_sdk(m, self.sdk_extra, "UR") for m in sdk})
        self.sdk = rtde_modules
        self.host = host
        self.servo_lookahead_s, self.servo_gain = float(servo_lookahead_s), float(servo_gain)
        self.servo_time_s = 1.0 / float(control_hz)  # servoJ reaches each target as the next one arrives
        self.gripper_kind = gripper
        self._control = self._receive = None
        self._gripper: RobotiqGripper | None = None
        self._gripper_cmd: float | None = None
        self._refused: str | None = None

    def connect(self) -> None:
        try:
            self._control = self.sdk.rtde_control.RTDEControlInterface(self.host)
            self._receive = self.sdk.rtde_receive.RTDEReceiveInterface(self.host)
        except RuntimeError as e:  # ur_rtde raises RuntimeError when the controller is unreachable or not remote
            raise HardwareError(f"ur: cannot connect to {self.host}: {e} (is the arm in remote control?)") from e
        self._control.zeroFtSensor()  # the tool's weight and the sensor's drift are not contact
        if self.gripper_kind == "robotiq":
            socket_connect = getattr(self.sdk, "socket_connect", socket.create_connection)
            self._gripper = RobotiqGripper(self.host, socket_connect=socket_connect, clock=self.clock)
            self._gripper.connect()
        self._gripper_cmd = None
        self._refused = None
        super().connect()

    def close(self) -> None:
        with self.lock:
            if self._control is not None:
                try:
                    self._control.servoStop(SERVO_STOP_DECEL_M_S2)
                    self._control.stopScript()
                except RuntimeError:
                    pass  # a stopped or unreachable controller has nothing left to stop
                finally:
                    self._control.disconnect()
                    self._receive.disconnect()
            if self._gripper is not None:
                self._gripper.close()
            self._control = self._receive = self._gripper = None
            super().close()

    def read(self) -> ArmState:
        with self.lock:
            if self._receive is None:
                raise HardwareError("ur: not connected")
            q = np.asarray(self._receive.getActualQ(), float)
            dq = np.asarray(self._receive.getActualQd(), float)
            force = float(np.linalg.norm(np.asarray(self._receive.getActualTCPForce(), float)[:3]))
            mode = int(self._receive.getSafetyMode())
            fault = None if mode in SAFETY_OK else f"{SAFETY_MODES.get(mode, 'safety mode')} (safety mode {mode})"
            fault = fault or self._refused
            gripper = self._gripper.position() if self._gripper is not None else 0.0
            pos, quat = self.model.fk(q)
            return ArmState(self.clock.now(), q, dq, pos, quat, gripper, force, fault)

    def _send_joints(self, q: np.ndarray, gripper: float | None) -> None:
        try:
            ok = self._control.servoJ(
                q.tolist(), SERVOJ_UNUSED, SERVOJ_UNUSED, self.servo_time_s, self.servo_lookahead_s, self.servo_gain
            )
        except RuntimeError as e:
            ok, why = False, str(e)
        else:
            why = "the RTDE control script is not running"
        if not ok:
            self._refused = f"servoJ refused: {why}"
            return
        if gripper is not None and self._gripper is not None:
            if self._gripper_cmd is None or abs(gripper - self._gripper_cmd) >= GRIPPER_DEADBAND:
                self._gripper.move(gripper)
                self._gripper_cmd = gripper

    def hold(self) -> None:
        """A native stop: the controller leaves servo mode and decelerates; the next servoJ starts it again."""
        with self.lock:
            if self._control is None:
                return
            self._control.servoStop(SERVO_STOP_DECEL_M_S2)
            self.holds += 1

    def freedrive(self, on: bool) -> None:
        """Teach mode: a person moves the arm by hand (calibration) until it ends."""
        with self.lock:
            if self._control is None:
                raise HardwareError("ur: not connected")
            if (self._control.teachMode() if on else self._control.endTeachMode()) is False:
                raise HardwareError(
                    f"ur: the controller refused to {'enter' if on else 'leave'} teach mode (is the "
                    "arm in remote control?)"
                )
            self.last_command = None

    def recover(self) -> None:
        """Unlock a protective stop through the dashboard server and restart the RTDE control script. The controller
        refuses to unlock within 5 s of the stop; an emergency stop needs a human at the pendant."""
        with self.lock:
            if self._receive is None:
                raise HardwareError("ur: not connected")
            mode = int(self._receive.getSafetyMode())
            if mode not in SAFETY_OK and mode != SAFETY_PROTECTIVE_STOP:
                raise HardwareError(
                    f"ur: {SAFETY_MODES.get(mode, mode)} cannot be cleared remotely: release it at the pendant"
                )
            if mode == SAFETY_PROTECTIVE_STOP:
                dashboard = self.sdk.dashboard_client.DashboardClient(self.host)
                try:
                    dashboard.connect()
                    dashboard.closeSafetyPopup()
                    dashboard.unlockProtectiveStop()
                except RuntimeError as e:
                    raise HardwareError(
                        f"ur: unlocking the protective stop failed ({e}); the controller refuses within 5 s of the stop"
                    ) from e
                finally:
                    dashboard.disconnect()
            if not self._control.isProgramRunning() and not self._control.reuploadScript():
                raise HardwareError("ur: the RTDE control script did not restart (is the arm in remote control?)")
            self._refused = None
            self.last_command = None
