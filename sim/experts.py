"""Scripted experts for the simulated tasks: they read only the observation's state vector (no simulator
access), so the demonstrations they record are ones a policy could in principle imitate. With
`state="proprio"` (a pixel task) the cube pose is not in the observation; the expert then reads the
env's full state vector, which a policy never sees."""

from __future__ import annotations

import numpy as np

from sim.pick_cube import POS_SCALE_M, PickCubeEnv

GRASP_HEIGHT_M = 0.01  # pinch point this far above the cube centre: pads cover most of the cube's side
ALIGN_TOLERANCE_M = 0.008  # horizontal pinch-to-cube error at which the gripper may close
HEIGHT_TOLERANCE_M = 0.01
DESCENT_SLOPE = 2.0  # while misaligned by h metres, stay h * slope above the grasp height (a descent cone)
CLOSE_STEPS = 2  # control steps to wait with the gripper closing before lifting
GRIP_LOST_M = 0.03  # the cube this far from the pinch point means the grasp failed: open and retry


class PickCubeExpert:
    """Approach above the cube, descend, close, lift (task="lift"); or move above the cube (task="reach").

    `noise_std` adds Gaussian noise to each action (clipped to [-1, 1]) for diverse demonstrations.
    """

    def __init__(self, env: PickCubeEnv, noise_std: float = 0.0, seed: int | None = None) -> None:
        env = getattr(env, "unwrapped", env)
        names = list(env.full_state_names)
        self._rel = [names.index(n) for n in ("cube_rel_x", "cube_rel_y", "cube_rel_z")]
        self._env = env if env.state_mode == "proprio" else None  # the cube pose is not in obs: read it from the env
        self._task = env.task
        self._step_m = env.max_ee_step_m
        self._reach_height_m = env.reach_height_m
        self.noise_std = float(noise_std)
        self._rng = np.random.default_rng(seed)
        self._closing_steps = 0

    def reset(self) -> None:
        self._closing_steps = 0

    def act(self, obs: dict) -> np.ndarray:
        state = obs["state"] if self._env is None else self._env.full_state
        rel = np.asarray(state, np.float64)[self._rel] * POS_SCALE_M  # cube centre minus pinch point, m
        if self._task == "reach":
            move, gripper = rel + [0.0, 0.0, self._reach_height_m], -1.0
        else:
            move, gripper = self._lift(rel)
        action = np.append(np.clip(move / self._step_m, -1.0, 1.0), gripper)
        if self.noise_std > 0:
            action = action + self._rng.normal(0.0, self.noise_std, action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _lift(self, rel: np.ndarray) -> tuple[np.ndarray, float]:
        horizontal = float(np.linalg.norm(rel[:2]))
        height_error = -rel[2] - GRASP_HEIGHT_M  # pinch height above where it should grasp
        if self._closing_steps > 0 and np.linalg.norm(rel) > GRIP_LOST_M:
            self._closing_steps = 0  # the cube slipped away or was never caught: open and approach again
        aligned = horizontal < ALIGN_TOLERANCE_M and abs(height_error) < HEIGHT_TOLERANCE_M
        if self._closing_steps > 0 or aligned:
            self._closing_steps += 1
            up = self._step_m if self._closing_steps > CLOSE_STEPS else 0.0
            return np.array([rel[0], rel[1], up]), 1.0
        above = GRASP_HEIGHT_M + DESCENT_SLOPE * horizontal  # approach inside a cone above the cube
        return np.array([rel[0], rel[1], rel[2] + above]), -1.0
