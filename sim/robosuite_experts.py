"""Scripted experts for robosuite's Lift and PickPlaceCan (`sim.robosuite_tasks.RobosuiteEnv`).

Unlike `sim.experts.PickCubeExpert`, these read the simulator's ground truth through
`RobosuiteEnv.task_state()` (end-effector pose, finger joints, object pose and size, the target), so they also
demonstrate in image mode, where the observation's state holds no object pose. Each is a phase machine:
approach above the object, descend, close, lift (Lift ends there), then carry over the target compartment,
lower, open and withdraw (PickPlaceCan). A grasp that slips sends the machine back to the approach.
The hand is held top-down by a proportional rotation command; for the Lift cube its yaw follows the cube's
(modulo a quarter turn), the can is round and needs none.
"""

from __future__ import annotations

import mujoco
import numpy as np

from sim.robosuite_tasks import RobosuiteEnv

POS_GAIN = 2.0  # commanded step = gain x position error (OSC covers about a quarter of a command per step)
ROT_GAIN = 1.5
TOP_DOWN = np.diag([1.0, -1.0, -1.0])  # the Panda hand pointing down, yaw 0 (robosuite's start pose)
OPEN_FINGER_M = 0.035  # finger joint above this: the gripper is (nearly) open
CLOSE_STEPS = 6  # control steps with the gripper closing before the lift starts
OPEN_STEPS = 6


def _mat_from_xyzw(q: np.ndarray) -> np.ndarray:
    m = np.empty(9)
    mujoco.mju_quat2Mat(m, np.array([q[3], q[0], q[1], q[2]], float))
    return m.reshape(3, 3)


def _rotvec(rot: np.ndarray) -> np.ndarray:
    """Axis-angle vector of a rotation matrix."""
    q, v = np.empty(4), np.empty(3)
    mujoco.mju_mat2Quat(q, rot.ravel())
    mujoco.mju_quat2Vel(v, q, 1.0)
    return v


def _yaw(rot: np.ndarray) -> float:
    return float(np.arctan2(rot[1, 0], rot[0, 0]))


def _rot_z(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class _PhaseExpert:
    """Shared machinery: pose servoing, noise, the phase counter. Subclasses implement `_plan`."""

    task = ""
    yaw_period = 0.0  # > 0: follow the object's yaw modulo this period; 0: leave the hand's yaw free

    def __init__(self, env: RobosuiteEnv, noise_std: float = 0.0, seed: int | None = None) -> None:
        env = getattr(env, "unwrapped", env)
        if getattr(env, "task", None) != self.task:
            raise ValueError(f"{type(self).__name__} drives robosuite's {self.task}, not {getattr(env, 'task', env)}")
        self.env = env
        self.noise_std = float(noise_std)
        self._rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        self.phase, self._phase_steps = "approach", 0

    def _goto(self, phase: str) -> None:
        self.phase, self._phase_steps = phase, 0

    def act(self, obs: dict) -> np.ndarray:
        s = self.env.task_state()
        target, gripper = self._plan(s)
        self._phase_steps += 1
        move = POS_GAIN * (target - s["eef_pos"]) / self.env.max_ee_step_m
        turn = ROT_GAIN * self._rotation_error(s) / self.env.max_ee_rot_rad
        action = np.concatenate([np.clip(move, -1, 1), np.clip(turn, -1, 1), [gripper]])
        if self.noise_std > 0:
            action = action + self._rng.normal(0.0, self.noise_std, action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _rotation_error(self, s: dict) -> np.ndarray:
        cur = _mat_from_xyzw(s["eef_quat"])
        yaw = hand_yaw = _yaw(cur)
        if self.yaw_period > 0:
            obj_yaw, p = _yaw(_mat_from_xyzw(s["object_quat"])), self.yaw_period
            yaw = hand_yaw + (obj_yaw - hand_yaw + p / 2) % p - p / 2  # the equivalent object yaw nearest the hand's
        return _rotvec(_rot_z(yaw) @ TOP_DOWN @ cur.T)

    def _plan(self, s: dict) -> tuple[np.ndarray, float]:
        raise NotImplementedError

    # --- the pick, shared by both tasks ------------------------------------------------------
    def _pick(self, s: dict, grasp_z: float, hover_m: float, lift_z: float) -> tuple[np.ndarray, float, bool]:
        """Phases approach → descend → close → lift; returns (target, gripper, lifted)."""
        eef, obj = s["eef_pos"], s["object_pos"]
        above = np.array([obj[0], obj[1], grasp_z + hover_m])
        grasp = np.array([obj[0], obj[1], grasp_z])
        xy_err = np.linalg.norm(eef[:2] - obj[:2])
        if self.phase == "approach":
            if xy_err < 0.01 and s["gripper_qpos"][0] > OPEN_FINGER_M:
                self._goto("descend")
            # descend inside a cone above the object: lower as the hand comes over it
            return np.array([obj[0], obj[1], grasp_z + min(hover_m, 0.02 + 2.0 * xy_err)]), -1.0, False
        if self.phase == "descend":
            if xy_err > 0.02:
                self._goto("approach")
            elif abs(eef[2] - grasp_z) < 0.008 or self._phase_steps > 30:
                self._goto("close")
            return grasp, -1.0, False
        if self.phase == "close":
            if self._phase_steps >= CLOSE_STEPS:
                self._goto("lift")
            return grasp, 1.0, False
        # lift: the object must come along, else the grasp failed
        if np.linalg.norm(obj - eef) > 0.05:
            self._goto("approach")
            return above, -1.0, False
        return np.array([eef[0], eef[1], lift_z]), 1.0, eef[2] > lift_z - 0.02


class LiftExpert(_PhaseExpert):
    """robosuite Lift: grasp the cube at its centre, yaw aligned with its faces, and raise it 10 cm."""

    task = "Lift"
    yaw_period = np.pi / 2

    def _plan(self, s: dict) -> tuple[np.ndarray, float]:
        grasp_z = s["object_pos"][2]
        target, gripper, _ = self._pick(s, grasp_z, hover_m=0.08, lift_z=s["table_z"] + 0.15)
        return target, gripper


class PickPlaceCanExpert(_PhaseExpert):
    """robosuite PickPlaceCan: grasp the can from above, carry it over its compartment, lower, open, withdraw."""

    task = "PickPlaceCan"
    carry_z_above_table_m = 0.23  # hand height while carrying: the can's bottom clears the bin walls (10 cm high)
    # The compartment's centre is at the edge of the Panda's reach (the arm fully stretched, it sags under the can):
    # place the can this far from the centre, toward the robot, still 5 cm from the compartment's walls.
    place_offset_m = (-0.04, -0.06)

    def _plan(self, s: dict) -> tuple[np.ndarray, float]:
        eef, obj, goal = s["eef_pos"], s["object_pos"], s["target_pos"] + [*self.place_offset_m, 0.0]
        carry_z = s["table_z"] + self.carry_z_above_table_m
        if self.phase in ("approach", "descend", "close", "lift"):
            grasp_z = obj[2] + 0.02  # a little above the can's centre
            target, gripper, lifted = self._pick(s, grasp_z, hover_m=0.1, lift_z=carry_z)
            if lifted:
                self._goto("carry")
            return target, gripper
        held = np.linalg.norm(obj - eef) < 0.06
        if self.phase in ("carry", "lower") and not held:
            self._goto("approach")  # dropped on the way: pick it up again
            return eef, -1.0
        release_z = goal[2] + s["object_size"][2] + 0.04  # can bottom a few centimetres above the bin floor
        if self.phase == "carry":
            if np.linalg.norm(eef[:2] - goal[:2]) < 0.02:
                self._goto("lower")
            return np.array([goal[0], goal[1], carry_z]), 1.0
        if self.phase == "lower":
            if eef[2] < release_z + 0.01:
                self._goto("release")
            return np.array([goal[0], goal[1], release_z]), 1.0
        if self.phase == "release":
            if self._phase_steps >= OPEN_STEPS:
                self._goto("withdraw")
            return eef, -1.0
        return np.array([eef[0], eef[1], carry_z]), -1.0  # withdraw: straight up, open
