"""`ArmEnv`: a real arm (or its MuJoCo twin) and its cameras as a `RobotEnv`, the interface the simulator tasks have.

Action: ``[x, y, z, (roll, pitch, yaw,) gripper]`` in [-1, 1]: an end-effector step of up to `max_ee_step_m` per
axis (and `max_rot_step_rad` about each axis when `rotation=True`; otherwise the orientation held at reset is kept),
the gripper from -1 open to +1 closed (`gripper=discrete`: open / keep / close, as in the simulator's tasks). Each
step solves the IK with the arm's own kinematic model (the one its twin is built from), passes the joint target
through the safety layer's joint guard when one is installed, sends it, waits out the control period on the driver's
clock and reads the arm and the cameras. When the IK cannot reach the target,
the arm holds; after `ik_recovery_after` such steps in a row it steps back toward home in joint space.

Observation state: end-effector position (m), orientation (quaternion), gripper (0 open .. 1 closed), joints (rad),
and with a task (`reach`) its entries. Camera frames are the ones captured nearest the arm reading, and
`info["obs_age_ms"]` says how old each part of the observation is. Without a task the reward is 0 and success is
unknown (a reward model or a human's labels supply them on a real robot).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from hardware.arm import ArmDriver, ArmState, VirtualClock
from hardware.arm_resets import ArmResets
from hardware.cameras import CameraError
from hardware.kinematics import quat_mul, rotvec_to_quat
from robo_rl.envs import RobotEnv, gripper_target, make_observation_space
from robo_rl.envs.spec import EnvSpec

log = logging.getLogger(__name__)

REACH_SHAPING_PER_M = 10.0  # reach reward -tanh(k d): still has slope 20 cm away
GRIPPER_MODES = ("absolute", "discrete", "none")  # discrete: below -0.5 open, above 0.5 close, between keep
TWIN_CAMERA = "hardware.twin_camera.TwinCamera"  # what each camera of a dry run becomes


class ReachTask:
    """Move the tool to a target drawn in a box each episode: a first task that needs no object and no camera, the
    same on metal and on the twin. State adds the target minus the tool position (m)."""

    state_names = ("target_dx", "target_dy", "target_dz")

    def __init__(self, low: list[float], high: list[float], tolerance_m: float = 0.02) -> None:
        self.low, self.high = np.asarray(low, float), np.asarray(high, float)
        if self.low.shape != (3,) or self.high.shape != (3,) or np.any(self.high < self.low):
            raise ValueError(f"reach task: low {low} and high {high} must be 3 values each, low <= high")
        self.tolerance_m = float(tolerance_m)
        self.target = (self.low + self.high) / 2

    def reset(self, rng: np.random.Generator) -> None:
        self.target = rng.uniform(self.low, self.high)

    def state(self, arm: ArmState) -> np.ndarray:
        return self.target - arm.ee_pos

    def evaluate(self, arm: ArmState) -> tuple[float, bool]:
        distance = float(np.linalg.norm(self.target - arm.ee_pos))
        # never positive: ending the episode by reaching beats hovering near the target for more reward
        return -float(np.tanh(REACH_SHAPING_PER_M * distance)), distance < self.tolerance_m


class ArmEnv(ArmResets, RobotEnv):
    metadata = {"render_modes": ["rgb_array"]}
    drives_robot = True

    def __init__(
        self,
        driver: dict | ArmDriver,
        cameras: dict | None = None,
        control_hz: float = 10.0,
        max_episode_steps: int = 200,
        max_ee_step_m: float = 0.02,
        rotation: bool = False,
        max_rot_step_rad: float = 0.1,
        gripper: str = "absolute",
        reach: dict | None = None,
        dry_run: bool = False,
        twin_clock: str = "real",
        ik_recovery_after: int = 3,
        recovery_step_rad: float = 0.05,
        reset_timeout_s: float = 20.0,
        terminate_on_success: bool = True,
        reset_mode: str | None = "human",  # between episodes (hardware/arm_resets.py); None: it homes, unchecked
        reset_trajectory: str | None = None,
        reset_tolerance_rad: float = 0.05,
        reset_person: str = "devices",
        reset_wait_s: float | None = None,
        reset_check: str = "state",  # state: reset_problem | camera: reset_classifier on the cameras | both
        reset_classifier: str | None = None,
    ) -> None:
        super().__init__()
        self.reset_settings = self._reset_settings(
            reset_mode, reset_trajectory, reset_tolerance_rad, reset_person, reset_wait_s, reset_check, reset_classifier
        )
        self.driver = _make_driver(driver, dry_run, twin_clock)
        self.model = self.driver.model
        self.dry_run = bool(dry_run)
        self.control_hz = float(control_hz)
        self.max_episode_steps = int(max_episode_steps)
        self.max_ee_step_m, self.max_rot_step_rad = float(max_ee_step_m), float(max_rot_step_rad)
        if gripper not in GRIPPER_MODES:
            raise ValueError(f"env.gripper='{gripper}': one of {', '.join(GRIPPER_MODES)}")
        self.rotation, self.gripper_mode, self.has_gripper = bool(rotation), gripper, gripper != "none"
        self.ik_recovery_after, self.recovery_step_rad = int(ik_recovery_after), float(recovery_step_rad)
        self.reset_timeout_s = float(reset_timeout_s)
        self.terminate_on_success = bool(terminate_on_success)
        self.task = ReachTask(**reach) if reach else None
        self.action_names = _action_names(self.rotation, gripper)
        self.state_names = _state_names(self.model.joint_names, bool(reach))
        self.joint_guard = None  # the safety layer's: (q_target, ArmState, dt) -> (q_safe, notes)
        self.last_state: ArmState | None = None
        self._read_wall = 0.0
        self._tick = 0.0
        self._quat_ref = np.array([1.0, 0.0, 0.0, 0.0])
        self._gripper_cmd = 0.0
        self._ik_failures = 0
        self.counts = {"ik_failures": 0, "recoveries": 0}
        self.driver.connect()
        try:
            self.cameras = self._open_cameras(cameras or {})
        except BaseException:
            self.driver.close()
            raise
        self.camera_names = tuple(self.cameras)
        self.observation_space = make_observation_space(
            len(self.state_names), {n: (c.height, c.width) for n, c in self.cameras.items()}
        )
        import gymnasium as gym

        self.action_space = gym.spaces.Box(-1.0, 1.0, (len(self.action_names),), np.float32)

    @classmethod
    def spec_from_config(
        cls,
        driver: dict,
        cameras: dict | None = None,
        control_hz: float = 10.0,
        rotation: bool = False,
        gripper: str = "absolute",
        reach: dict | None = None,
        **_,
    ) -> EnvSpec:
        """The spaces this config gives, without opening the arm (the learner never does)."""
        from hydra.utils import get_class

        joints = get_class(driver["_target_"]).joint_names
        if not joints:
            raise ValueError(f"{driver['_target_']} names no joints (ArmDriver.joint_names)")
        names = _state_names(joints, bool(reach))
        sizes = {n: (int(c.get("height", 128)), int(c.get("width", 128))) for n, c in (cameras or {}).items()}
        actions = _action_names(bool(rotation), gripper)
        return EnvSpec(len(names), len(actions), sizes, names, actions, float(control_hz))

    def _open_cameras(self, specs: dict) -> dict:
        from hardware.cameras import make_camera

        cameras = {}
        try:
            for name, spec in specs.items():
                spec = dict(spec)
                if self.dry_run and self.driver_twin is not None:  # a dry run sees the twin, not the real scene
                    spec = _twin_view(spec)
                camera = make_camera(spec, name=name, twin=self.driver_twin)
                cameras[name] = camera
                camera.start()
        except BaseException:
            for camera in cameras.values():
                camera.close()
            raise
        return cameras

    @property
    def gripper_command(self) -> float:
        """The gripper's last command, 0 open .. 1 closed."""
        return self._gripper_cmd

    @property
    def driver_twin(self):
        return getattr(self.driver, "twin", None)

    # --- RobotEnv -----------------------------------------------------------------------------
    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        if not (options or {}).get("keep_scene"):  # else the reset protocol (robo_rl/envs/resets.py) moved the arm
            self.human_reset()
        if self.task is not None:
            self.task.reset(rng)
        state = self._read()
        self._quat_ref = state.ee_quat.copy()
        self._gripper_cmd, self._ik_failures = 0.0, 0
        self._tick = self.driver.clock.now()
        obs, info = self._observe(state)
        return obs, info

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        state = self.last_state
        notes: dict = {}
        delta = action[:3] * self.max_ee_step_m
        pos = state.ee_pos + delta
        quat = self._quat_ref
        if self.rotation:
            quat = quat_mul(rotvec_to_quat(action[3:6] * self.max_rot_step_rad), state.ee_quat)
            self._quat_ref = quat
        if self.has_gripper:  # the driver's command is 0 open .. 1 closed
            target = gripper_target(self.gripper_mode, float(action[-1]), 2.0 * self._gripper_cmd - 1.0)
            self._gripper_cmd = (target + 1.0) / 2.0
        q_now = state.joints
        result = self.model.ik(pos, quat, q_now if self.driver.last_command is None else self.driver.last_command)
        info: dict = {}
        if result.ok:
            self._ik_failures = 0
            q_target = result.q
        else:
            self._ik_failures += 1
            self.counts["ik_failures"] += 1
            info["ik_failed"] = f"target {np.round(pos, 3).tolist()} m off by {result.pos_err_m * 1e3:.0f} mm"
            q_target = q_now
            if self._ik_failures >= self.ik_recovery_after:  # stuck at the edge of reach: back toward home
                step = np.clip(self.driver.home_joints - q_now, -self.recovery_step_rad, self.recovery_step_rad)
                q_target = q_now + step
                self.counts["recoveries"] += 1
                info["recovery"] = "joint-space step toward home"
        if self.joint_guard is not None:
            q_target, guard_notes = self.joint_guard(q_target, state, 1.0 / self.control_hz)
            notes.update(guard_notes)
        self.driver.command_joints(q_target, self._gripper_cmd if self.has_gripper else None)
        self._tick = max(self._tick + 1.0 / self.control_hz, self.driver.clock.now() - 1.0 / self.control_hz)
        self.driver.clock.sleep_until(self._tick)
        new = self._read()
        try:
            obs, info_obs = self._observe(new)
        except CameraError:  # the policy cannot see: the arm holds before the error ends the run
            self.driver.hold()
            raise
        info.update(info_obs)
        info["action_executed"] = self._executed(action, state, q_target)
        if notes:
            info["safety"] = notes
        if new.fault:
            info["fault"] = new.fault
        reward, success = self.task.evaluate(new) if self.task is not None else (0.0, False)
        info["success"] = success
        return obs, reward, bool(success and self.terminate_on_success), info

    def _executed(self, action: np.ndarray, state: ArmState, q_target: np.ndarray) -> np.ndarray:
        """The action the arm was actually sent: the end-effector step of the joint target, in action units."""
        executed = np.asarray(action, np.float32).copy()
        pos, _ = self.model.fk(q_target)
        executed[:3] = np.clip((pos - state.ee_pos) / self.max_ee_step_m, -1.0, 1.0)
        return executed

    def _read(self) -> ArmState:
        state = self.driver.read()
        self._read_wall = time.monotonic()
        self.last_state = state
        return state

    def _observe(self, state: ArmState) -> tuple[dict, dict]:
        parts = [state.ee_pos, state.ee_quat, [state.gripper], state.joints]
        if self.task is not None:
            parts.append(self.task.state(state))
        images, ages = {}, {}
        now = time.monotonic()
        for name, camera in self.cameras.items():
            frame = camera.at(self._read_wall)  # raises CameraError on a stale, frozen or unplugged camera
            images[name] = frame.image
            ages[name] = (now - frame.t) * 1e3
        ages["state"] = (self.driver.clock.now() - state.t) * 1e3
        obs = {"state": np.concatenate([np.asarray(p, np.float32).ravel() for p in parts]), "images": images}
        return obs, {"obs_age_ms": ages}

    def render(self, size: int = 128) -> np.ndarray:
        """The twin's front view (what eval videos and the GUI's larger view show); a real arm has no such view."""
        if self.driver_twin is None:
            raise NotImplementedError("a real arm has no rendered view: the GUI shows its cameras")
        return self.driver_twin.render("front", size, size)

    def close(self) -> None:
        for camera in getattr(self, "cameras", {}).values():
            camera.close()
        self.driver.close()
        if self.driver_twin is not None:
            self.driver_twin.close()


def _action_names(rotation: bool, gripper: str) -> tuple[str, ...]:
    rotations = ("roll", "pitch", "yaw") if rotation else ()
    return ("x", "y", "z") + rotations + (("gripper",) if gripper != "none" else ())


def _state_names(joints, reach: bool) -> tuple[str, ...]:
    return (
        ("ee_x", "ee_y", "ee_z", "ee_qw", "ee_qx", "ee_qy", "ee_qz", "gripper_pos")
        + tuple(f"q_{j}" for j in joints)
        + (ReachTask.state_names if reach else ())
    )


def _twin_view(spec: dict) -> dict:
    """A real camera's spec as the twin's camera of the same size and rate (its `view`, or the front one)."""
    kept = {key: spec[key] for key in ("name", "width", "height", "fps", "view") if key in spec}
    return {"_target_": TWIN_CAMERA, **kept}


def _make_driver(spec: dict | ArmDriver, dry_run: bool, twin_clock: str) -> ArmDriver:
    """The driver from its config; a dry run builds the same driver against its twin."""
    if isinstance(spec, ArmDriver):
        if dry_run and getattr(spec, "twin", None) is None:
            raise ValueError("hardware.dry_run=true needs the driver built from its config (it is given built)")
        return spec
    from hydra.utils import get_class

    spec = dict(spec)
    if "_target_" not in spec:
        raise ValueError(f"env.driver needs a _target_ (hardware.so101.SO101Driver, ...), got {sorted(spec)}")
    if dry_run:
        spec["twin"] = True
    if spec.get("twin"):
        if twin_clock not in ("real", "virtual"):
            raise ValueError(f"twin_clock='{twin_clock}': real or virtual")
        if twin_clock == "virtual":
            spec["clock"] = VirtualClock()
    return get_class(spec.pop("_target_"))(**spec)
