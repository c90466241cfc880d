"""SO-100/SO-101 follower arms through lerobot's `SOFollower` (Feetech STS3215 bus), and their MuJoCo twin.

The driver speaks the `ArmDriver` interface in radians of `so101_model()`, whose zero pose is lerobot's 0 degrees
(the middle of every calibrated range), and leaves connect, configure, normalisation and the bus to lerobot. It
connects without lerobot's interactive calibration: an uncalibrated arm is a HardwareError naming the command that
calibrates it. With `twin=True` the same lerobot robot runs over `FakeFeetechBus`, its motors backed by an `ArmTwin`
of the same model, so everything above the serial port is tested without the arm or the Feetech SDK.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from hardware.arm import ArmDriver, ArmState, Clock, HardwareError, import_sdk
from hardware.kinematics import ArmModel
from hardware.twin import ArmTwin

ASSET = Path(__file__).parent / "assets" / "so101.xml"
ARM_MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")  # = the MJCF's joints
GRIPPER_MOTOR = "gripper"
MOTOR_IDS = {"shoulder_pan": 1, "shoulder_lift": 2, "elbow_flex": 3, "wrist_flex": 4, "wrist_roll": 5, "gripper": 6}
HOME_RAD = (0.0, -0.4, 0.4, 1.3, 0.0)  # folded, wrist bent down: tool 15 cm in front of the base, 10 cm up
EE_SITE = "ee"
ROBOT_TYPES = ("so101_follower", "so100_follower")  # lerobot's names; both are its SOFollower

# lerobot degrees -> model radians: q = sign * (deg - zero_deg). Identity for this model, whose zero pose is the
# calibration's mid-range pose; a model with another zero (a vendor URDF) sets these.
JOINT_SIGNS = np.ones(len(ARM_MOTORS))
JOINT_ZERO_DEG = np.zeros(len(ARM_MOTORS))
# lerobot's gripper.pos is 0..100 over the calibrated range, whose low end is the jaw closed on the fixed jaw
GRIPPER_POS_OPEN = 100.0
GRIPPER_POS_CLOSED = 0.0
# Present_Current units (6.5 mA each) at a motor's limit: lerobot's configure writes 250 to the gripper's
# Protection_Current as "50% of max current"
CURRENT_LIMIT_RAW = 500
STEPS_PER_TURN = 4095  # lerobot's degrees scale: the STS3215's 4096-step resolution less one
STEPS_PER_RAD = STEPS_PER_TURN / (2 * np.pi)
MID_STEP = 2047  # Present_Position at a joint's mid-range after lerobot's half-turn homing

# What the twin's motors hold in EEPROM, as after `lerobot-calibrate` on a real arm (offsets as a real arm's, far
# from 0 so a wrong sign or a skipped offset shows in the tests)
TWIN_HOMING_OFFSETS = {
    "shoulder_pan": -512,
    "shoulder_lift": 683,
    "elbow_flex": -790,
    "wrist_flex": 415,
    "wrist_roll": -120,
    "gripper": -1012,
}  # steps
TWIN_RANGE_MARGIN_STEPS = 40  # recorded ranges reach a little past the model's joint limits
TWIN_GRIPPER_RANGE = (2030, 3450)  # steps: closed .. fully open
WRIST_ROLL_RANGE = (0, STEPS_PER_TURN)  # lerobot-calibrate records the roll as a full turn
TWIN_CAMERAS = {"front": ((0.45, 0.3, 0.3), (0.12, 0.0, 0.1))}  # name: (position m, looks at m): the arm fills it


def so101_model(home: list[float] | np.ndarray | None = None) -> ArmModel:
    """The SO-101's kinematic model (the five arm joints to the tool site between the jaws)."""
    return ArmModel(ASSET, list(ARM_MOTORS), EE_SITE, HOME_RAD if home is None else home, name="so101")


def degrees_to_rad(deg: np.ndarray) -> np.ndarray:
    return JOINT_SIGNS * np.deg2rad(np.asarray(deg, float) - JOINT_ZERO_DEG)


def rad_to_degrees(q: np.ndarray) -> np.ndarray:
    return JOINT_SIGNS * np.rad2deg(np.asarray(q, float)) + JOINT_ZERO_DEG


def twin_calibration(model: ArmModel):
    """The calibration the twin's motors agree with: mid-range at the model's zero, ranges just past its limits."""
    from lerobot.motors import MotorCalibration

    calibration = {}
    for i, motor in enumerate(ARM_MOTORS):
        half = int(np.ceil(max(abs(model.lower[i]), abs(model.upper[i])) * STEPS_PER_RAD)) + TWIN_RANGE_MARGIN_STEPS
        lo, hi = WRIST_ROLL_RANGE if motor == "wrist_roll" else (MID_STEP - half, MID_STEP + half)
        calibration[motor] = MotorCalibration(MOTOR_IDS[motor], 0, TWIN_HOMING_OFFSETS[motor], lo, hi)
    calibration[GRIPPER_MOTOR] = MotorCalibration(
        MOTOR_IDS[GRIPPER_MOTOR], 0, TWIN_HOMING_OFFSETS[GRIPPER_MOTOR], *TWIN_GRIPPER_RANGE
    )
    return calibration


def twin_servos(model: ArmModel):
    """The six motors of a twin arm: how each encoder, read through lerobot's normalisation, sees the twin."""
    from hardware.fake_feetech import TwinServo

    servos = []
    for motor, cal in twin_calibration(model).items():
        mid = (cal.range_min + cal.range_max) / 2
        if motor == GRIPPER_MOTOR:  # twin gripper 0 (open) .. 1 (closed) over the calibrated 0..100
            span = cal.range_max - cal.range_min
            zero = cal.range_min + GRIPPER_POS_OPEN / 100 * span + cal.homing_offset
            per_unit = (GRIPPER_POS_CLOSED - GRIPPER_POS_OPEN) / 100 * span
            servos.append(TwinServo(cal.id, None, zero, per_unit, cal))
        else:
            i = ARM_MOTORS.index(motor)
            zero = mid + cal.homing_offset + JOINT_ZERO_DEG[i] * STEPS_PER_TURN / 360
            servos.append(TwinServo(cal.id, i, zero, JOINT_SIGNS[i] * STEPS_PER_RAD, cal))
    return servos


class SO101Driver(ArmDriver):
    """An SO-100/SO-101 follower through lerobot's `SOFollower` (`use_degrees=True`).

    `twin`: True (or an `ArmTwin` of `so101_model()`) runs lerobot's robot over a fake Feetech bus backed by the twin
    (`self.twin`); the twin's calibration goes to `calibration_dir` (a temporary one by default), never lerobot's
    cache. `max_relative_target` (degrees) is lerobot's own per-command step limit. `twin_kw` go to `ArmTwin`.
    """

    robot = "so101"
    joint_names = ARM_MOTORS
    effort_kind = "current"
    sdk_module, sdk_extra = "scservo_sdk", "so101"

    def __init__(
        self,
        port: str = "/dev/ttyACM0",
        id: str = "so101",
        robot_type: str = "so101_follower",  # noqa: A002
        twin: bool | ArmTwin = False,
        clock: Clock | None = None,
        home: list[float] | None = None,
        calibration_dir: str | None = None,
        max_relative_target: float | None = None,
        **twin_kw,
    ) -> None:
        if robot_type not in ROBOT_TYPES:
            raise ValueError(f"so101: robot_type must be one of {ROBOT_TYPES}, got '{robot_type}'")
        if twin_kw and (twin is False or isinstance(twin, ArmTwin)):
            raise ValueError(f"so101: {sorted(twin_kw)} are options of a twin the driver builds (twin=True)")
        if twin is False:
            for module in (self.sdk_module, "serial", "deepdiff"):  # what lerobot's FeetechMotorsBus imports
                import_sdk(module, self.sdk_extra, "SO-101")
        if isinstance(twin, ArmTwin):
            model, clock = twin.arm, clock or twin.clock
        else:
            model = so101_model(home)
        super().__init__(model, clock, home)
        self.port, self.id, self.robot_type = port, id, robot_type
        self.twin: ArmTwin | None = None
        self._tmp_calibration: tempfile.TemporaryDirectory | None = None
        self._last: tuple[float, np.ndarray, np.ndarray] | None = None  # (t, joints, joint_vel) of the last read

        from lerobot.robots.so_follower import SOFollower, SOFollowerRobotConfig

        if twin is not False and calibration_dir is None:
            self._tmp_calibration = tempfile.TemporaryDirectory(prefix="so101_twin_calibration_")
            calibration_dir = self._tmp_calibration.name
        config = SOFollowerRobotConfig(
            port=port,
            id=id,
            use_degrees=True,
            max_relative_target=max_relative_target,
            calibration_dir=Path(calibration_dir) if calibration_dir else None,
        )
        if twin is False:
            self.lerobot = SOFollower(config)
            return
        from hardware.fake_feetech import FakeFeetechServos, robot_on_fake_bus

        self.twin = (
            twin if isinstance(twin, ArmTwin) else ArmTwin(model, self.clock, **{"cameras": TWIN_CAMERAS, **twin_kw})
        )
        servos = FakeFeetechServos(self.twin, twin_servos(model), CURRENT_LIMIT_RAW)
        self.lerobot = robot_on_fake_bus(SOFollower, config, servos)
        if not self.lerobot.calibration:  # first run in this directory: the file `lerobot-calibrate` would write
            self.lerobot.calibration = twin_calibration(model)
            self.lerobot.bus.calibration = self.lerobot.calibration
            self.lerobot._save_calibration()

    def calibrate_command(self) -> str:
        cmd = f"lerobot-calibrate --robot.type={self.robot_type} --robot.port={self.port} --robot.id={self.id}"
        if self.lerobot.calibration_dir != _default_calibration_dir():
            cmd += f" --robot.calibration_dir={self.lerobot.calibration_dir}"
        return cmd

    def connect(self) -> None:
        with self.lock:
            if self.connected:
                return
            try:
                self.lerobot.connect(calibrate=False)  # lerobot's calibration asks on stdin: never from a driver
            except (ConnectionError, OSError) as e:
                reason = " ".join(str(e).split())  # lerobot's message spans lines
                raise HardwareError(f"so101: cannot open the Feetech bus on {self.port}: {reason}") from e
            if not self.lerobot.is_calibrated:
                self.lerobot.disconnect()
                raise HardwareError(
                    f"so101: the motors do not match the calibration "
                    f"{self.lerobot.calibration_fpath} (or there is none): run "
                    f"`{self.calibrate_command()}`"
                )
            self._last = None
            self.connected = True

    def close(self) -> None:
        with self.lock:
            if self.lerobot.is_connected:
                self.lerobot.disconnect()  # lerobot's torque policy: off on disconnect unless configured otherwise
            self.connected = False
            if self._tmp_calibration is not None:
                self._tmp_calibration.cleanup()
                self._tmp_calibration = None

    def read(self) -> ArmState:
        with self.lock:
            if not self.connected:
                raise HardwareError("so101: not connected")
            obs = self.lerobot.get_observation()
            current = self.lerobot.bus.sync_read(
                "Present_Current", list(ARM_MOTORS), num_retry=self.lerobot.config.num_read_retries
            )
            t = self.clock.now()
            q = degrees_to_rad([obs[f"{m}.pos"] for m in ARM_MOTORS])
            vel = np.zeros_like(q)
            if self._last is not None:
                t0, q0, vel0 = self._last
                vel = (q - q0) / (t - t0) if t > t0 else vel0  # two reads at one clock time: keep the last estimate
            self._last = (t, q, vel)
            pos, quat = self.model.fk(q)
        gripper = (obs[f"{GRIPPER_MOTOR}.pos"] - GRIPPER_POS_OPEN) / (GRIPPER_POS_CLOSED - GRIPPER_POS_OPEN)
        effort = max(current[m] for m in ARM_MOTORS) / CURRENT_LIMIT_RAW  # not the gripper's: a grasp draws current
        return ArmState(
            t=t,
            joints=q,
            joint_vel=vel,
            ee_pos=pos,
            ee_quat=quat,
            gripper=float(np.clip(gripper, 0.0, 1.0)),
            effort=float(effort),
        )

    def freedrive(self, on: bool) -> None:
        """Torque off on the arm's motors so a person can move it by hand; back on, it holds where it was left (the
        goal is set to the present position first: a servo given torque would jump to its old goal)."""
        with self.lock:
            if not self.connected:
                raise HardwareError("so101: not connected")
            bus = self.lerobot.bus
            if on:
                bus.disable_torque(list(ARM_MOTORS))
            else:
                bus.sync_write("Goal_Position", bus.sync_read("Present_Position", list(ARM_MOTORS)))
                bus.enable_torque(list(ARM_MOTORS))
                self.last_command = None

    def _send_joints(self, q: np.ndarray, gripper: float | None) -> None:
        # within the model's range, as the motors' position limits would hold them anyway
        deg = rad_to_degrees(self.model.clip(q))
        action = {f"{m}.pos": float(d) for m, d in zip(ARM_MOTORS, deg, strict=True)}
        if gripper is not None:
            action[f"{GRIPPER_MOTOR}.pos"] = GRIPPER_POS_OPEN + gripper * (GRIPPER_POS_CLOSED - GRIPPER_POS_OPEN)
        self.lerobot.send_action(action)


def _default_calibration_dir() -> Path:
    from lerobot.robots.so_follower import SOFollower
    from lerobot.utils.constants import HF_LEROBOT_CALIBRATION, ROBOTS

    return HF_LEROBOT_CALIBRATION / ROBOTS / SOFollower.name
