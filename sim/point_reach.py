"""PointReach: move a point to a goal in the plane. No physics, microseconds a step: for fast tests of the
core, control-loop benchmarks and dry runs of the actor/learner machinery."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robo_rl.envs import RobotEnv, make_observation_space
from robo_rl.envs.spec import EnvSpec


class PointReachEnv(RobotEnv):
    metadata = {"render_modes": ["rgb_array"]}
    control_hz = 10.0
    state_names = ("x", "y", "goal_x", "goal_y")
    action_names = ("x", "y")

    @classmethod
    def spec_from_config(cls, camera: bool = False, control_hz: float = 10.0, **_) -> EnvSpec:
        """The spaces this config gives, without building the env (the learner's view)."""
        return EnvSpec(4, 2, {"top": (8, 8)} if camera else {}, cls.state_names, cls.action_names, float(control_hz))

    def __init__(
        self, max_episode_steps: int = 20, step_size: float = 0.2, camera: bool = False, control_hz: float = 10.0
    ) -> None:
        super().__init__()
        self.control_hz = float(control_hz)
        self.max_episode_steps = max_episode_steps
        self.step_size = step_size
        self.camera_names = ("top",) if camera else ()
        self.observation_space = make_observation_space(4, {"top": (8, 8)} if camera else {})
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.task_description = "move the point to the goal"

    def _obs(self) -> dict:
        images = {}
        if self.camera_names:
            img = np.zeros((8, 8, 3), np.uint8)
            img[int((self.pos[1] + 1) * 3.5), int((self.pos[0] + 1) * 3.5)] = 255
            images["top"] = img
        return {"state": np.concatenate([self.pos, self.goal]).astype(np.float32), "images": images}

    def _reset(self, rng, options):
        self.pos = rng.uniform(-1, 1, 2)
        self.goal = rng.uniform(-1, 1, 2)
        return self._obs(), {}

    def _step(self, action):
        self.pos = np.clip(self.pos + self.step_size * action, -1, 1)
        dist = float(np.linalg.norm(self.pos - self.goal))
        success = dist < 0.1
        return self._obs(), -dist, success, {"success": success}

    def render(self, size: int = 64) -> np.ndarray:
        """The plane seen from above (Gymnasium's rgb_array): the point white, the goal green; for eval videos."""
        img = np.zeros((size, size, 3), np.uint8)
        for (x, y), colour in ((self.goal, (0, 200, 0)), (self.pos, (255, 255, 255))):
            c, r = (np.array([y, x]) + 1) / 2 * (size - 4) + 2
            img[max(0, int(c) - 2) : int(c) + 2, max(0, int(r) - 2) : int(r) + 2] = colour
        return img


class PointReachExpert:
    def __init__(self, env, noise_std: float = 0.0, seed: int | None = None) -> None:
        self.env, self.noise_std = env, noise_std
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        s = obs["state"]
        a = np.clip((s[2:] - s[:2]) / self.env.step_size, -1, 1)
        a = a + self.noise_std * self.rng.standard_normal(2)
        return np.clip(a, -1, 1).astype(np.float32)
