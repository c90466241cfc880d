"""gym-hil's Panda pick-cube task (``gym_hil/PandaPickCubeBase-v0``, the LeRobot HIL-SERL sim task) as a `RobotEnv`.

The gym-hil env itself steps the physics (its opspace controller tracking a mocap target, its scene with
noslip iterations); this adapter only translates:

- Action ``[dx, dy, dz, gripper]`` in [-1, 1]: the mocap target moves by ``ee_step_m`` x the first three (as
  gym-hil's own `EEActionWrapper` does, default 2.5 cm); gripper is absolute, -1 open .. +1 closed, turned into
  gym-hil's incremental gripper command. gym-hil ignores rotation, so the action has none.
  `gripper="discrete"` (HIL-SERL's and LeRobot's choice on this task, for a discrete gripper critic): below -0.5
  open, above 0.5 close, in between keep the present command, as our pick task's option does.
- State: gym-hil's ``agent_pos`` (joint positions 7, joint velocities 7, gripper command, pinch-point position 3),
  then in state mode ``environment_state`` (block position 3) and the block relative to the pinch point.
  `scale_state=True` (default) brings every entry to about [-1, 1] (gripper command -1 open .. +1 closed,
  velocities / 2 rad/s, positions about the workspace centre / 0.3 m, relative position / 0.1 m), as our
  other tasks do; LeRobot normalises the same raw values with dataset statistics instead.
  `scale_state=False` gives gym-hil's raw values (as LeRobot records them).
  Image mode (`image_obs=True`): ``agent_pos`` only, plus gym-hil's ``front`` and ``wrist`` cameras.
- ``success`` is gym-hil's ``info["succeed"]``; gym-hil's ``terminated`` (success, or the block pushed out of its
  sampling area) stays ``terminated`` (ended_by "env"); the time limit is ours (``truncated``, "time_limit").
  `terminate_on_success=False` goes on past a success (the block held up: a success classifier's positives), as
  our pick task's option does; a block pushed out still ends the episode.
- Seeding: gym-hil draws the block position from numpy's *global* generator; each reset runs with it seeded
  from the episode's generator and restored afterwards, so the same seed places the same block.

`GymHilPickCubeExpert` is a scripted expert for it (gym-hil has none): above the block, down, close, up.
"""

from __future__ import annotations

import os
import sys

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # gym-hil builds an OpenGL renderer even for state-only envs

import gymnasium as gym
import numpy as np

from robo_rl.envs import RobotEnv, gripper_target, make_observation_space
from robo_rl.envs.render import fast_renderer
from robo_rl.seeding import global_numpy_seed

GYM_HIL_ENV_ID = "gym_hil/PandaPickCubeBase-v0"
GRIPPER_CTRL_MAX = 255.0
AGENT_NAMES = (
    *(f"joint_pos_{i}" for i in range(1, 8)),
    *(f"joint_vel_{i}" for i in range(1, 8)),
    "gripper_cmd",  # gym-hil's gripper actuator command: 0 open .. 255 closed (scaled: -1 .. +1)
    "tcp_x",
    "tcp_y",
    "tcp_z",  # the pinch point, metres, world frame
)
BLOCK_NAMES = ("block_x", "block_y", "block_z", "block_rel_x", "block_rel_y", "block_rel_z")
WORKSPACE_CENTRE_M = np.array([0.5, 0.0, 0.0])
POS_SCALE_M, REL_SCALE_M, VEL_SCALE = 0.3, 0.1, 2.0


class GymHilPickCubeEnv(RobotEnv):
    """gym-hil's Panda picks up a 4 cm block and lifts it 10 cm (see the module docstring)."""

    task_description = "pick up the cube and lift it"

    def __init__(
        self,
        image_obs: bool = False,
        image_size: int = 128,
        reward_type: str = "sparse",  # gym-hil's: "sparse" (1 when lifted 10 cm) | "dense" (closeness + lift)
        random_block_position: bool = True,  # gym-hil's default is a fixed block at (0.5, 0)
        max_episode_steps: int = 100,  # gym-hil registers 100 steps at 10 Hz
        control_hz: float = 10.0,
        ee_step_m: float = 0.025,
        fast_render: bool = True,  # no shadows, reflections, skybox or anti-aliasing in the cameras
        scale_state: bool = True,  # every state entry to about [-1, 1] (see the module docstring)
        terminate_on_success: bool = True,  # False: a success does not end the episode
        gripper: str = "absolute",  # "discrete": open / stay / close (see the module docstring)
    ) -> None:
        super().__init__()
        if gripper not in ("absolute", "discrete"):
            raise ValueError(f"gripper must be 'absolute' or 'discrete', got {gripper!r}")
        self.gripper = gripper
        if reward_type not in ("dense", "sparse"):
            raise ValueError(f"reward_type must be 'dense' or 'sparse', got {reward_type!r}")
        if image_size < 1 or control_hz <= 0 or ee_step_m <= 0:
            raise ValueError("image_size, control_hz and ee_step_m must be positive")
        import gym_hil  # noqa: F401  (registers the gym_hil/* ids)
        from gym_hil.mujoco_gym_env import GymRenderingSpec

        self.control_hz, self.max_episode_steps = float(control_hz), int(max_episode_steps)
        self.image_obs, self.image_size, self.ee_step_m = bool(image_obs), int(image_size), float(ee_step_m)
        self.reward_type, self.scale_state = reward_type, bool(scale_state)
        self.terminate_on_success = bool(terminate_on_success)
        self._env = gym.make(
            GYM_HIL_ENV_ID,
            control_dt=1.0 / self.control_hz,
            image_obs=self.image_obs,
            reward_type=reward_type,
            random_block_position=random_block_position,
            render_spec=GymRenderingSpec(height=self.image_size, width=self.image_size),
        ).unwrapped  # gym-hil's own env: our base class keeps the time limit and checks actions
        if fast_render and self.image_obs:  # a state-only env never renders: a second renderer would be waste
            self._make_fast_renderer()
        self.state_names = AGENT_NAMES if self.image_obs else (*AGENT_NAMES, *BLOCK_NAMES)
        self.camera_names = ("front", "wrist") if self.image_obs else ()
        self.observation_space = make_observation_space(
            len(self.state_names), {c: (self.image_size, self.image_size) for c in self.camera_names}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_names = ("x", "y", "z", "gripper")

    def _make_fast_renderer(self) -> None:
        """Rebuild gym-hil's renderer without multisampling and with the costly scene effects off."""
        env = self._env
        env.close()  # frees the renderer gym-hil built in its constructor
        env._viewer = fast_renderer(env.model, self.image_size, self.image_size)

    # --- RobotEnv -----------------------------------------------------------------------------
    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        seed = int(rng.integers(2**31))
        with global_numpy_seed(seed):
            raw, _ = self._env.reset(seed=seed)
        return self._observation(raw), {"success": False}

    def absolute_gripper(self, command: float) -> float:
        """The absolute gripper command (-1 open .. +1 closed) a gripper action amounts to now: itself, or with
        `gripper="discrete"` open / close / (between the thresholds) the present command."""
        present = 2.0 * float(self._env.data.ctrl[self._env._gripper_ctrl_id]) / GRIPPER_CTRL_MAX - 1.0
        return gripper_target(self.gripper, command, present)

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        gripper_now = self._env.data.ctrl[self._env._gripper_ctrl_id] / GRIPPER_CTRL_MAX
        target = self.absolute_gripper(float(action[3]))
        gripper_cmd = (target + 1.0) / 2.0 - gripper_now  # gym-hil adds this to its command in [0, 1]
        hil_action = np.concatenate([action[:3] * self.ee_step_m, np.zeros(3), [gripper_cmd]])
        raw, reward, terminated, _, info = self._env.step(hil_action)
        success = bool(info["succeed"])
        terminated = bool(terminated) and (self.terminate_on_success or not success)
        return self._observation(raw), float(reward), terminated, {"success": success}

    def _observation(self, raw: dict) -> dict:
        agent = np.asarray(raw["agent_pos"], np.float64)
        parts = [agent]
        if not self.image_obs:
            block = np.asarray(raw["environment_state"], np.float64)
            parts += [block, block - agent[15:18]]
        if self.scale_state:
            agent = np.concatenate(
                [
                    agent[:7],
                    agent[7:14] / VEL_SCALE,
                    [2.0 * agent[14] / GRIPPER_CTRL_MAX - 1.0],
                    (agent[15:18] - WORKSPACE_CENTRE_M) / POS_SCALE_M,
                ]
            )
            parts[0] = agent
            if not self.image_obs:
                parts[1], parts[2] = (parts[1] - WORKSPACE_CENTRE_M) / POS_SCALE_M, parts[2] / REL_SCALE_M
        images = {name: np.ascontiguousarray(raw["pixels"][name]) for name in self.camera_names}
        return {"state": np.concatenate(parts).astype(np.float32), "images": images}

    def task_state(self) -> dict:
        """Simulator ground truth for scripted experts (world frame, metres): ``tcp_pos`` (the pinch point),
        ``tcp_target_pos`` (the mocap target the controller tracks), ``block_pos``, ``block_half_size``,
        ``gripper`` (the gripper command in [0, 1], 1 closed)."""
        env = self._env
        return {
            "tcp_pos": env.data.sensor("2f85/pinch_pos").data.copy(),
            "tcp_target_pos": env.data.mocap_pos[0].copy(),
            "block_pos": env.data.sensor("block_pos").data.copy(),
            "block_half_size": float(env.model.geom("block").size[2]),
            "gripper": float(env.data.ctrl[env._gripper_ctrl_id] / GRIPPER_CTRL_MAX),
        }

    def close(self) -> None:
        self._env.close()


class GymHilPickCubeExpert:
    """Above the block, straight down, close, lift: moves the mocap target with a proportional command."""

    HOVER_M = 0.06
    CLOSE_STEPS = 3  # 10 Hz steps with the gripper closing before lifting
    LIFT_M = 0.15  # gym-hil counts a lift of 10 cm

    def __init__(self, env: GymHilPickCubeEnv, noise_std: float = 0.0, seed: int | None = None) -> None:
        self.env = getattr(env, "unwrapped", env)
        self.noise_std = float(noise_std)
        self._rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        self.phase, self._closing = "approach", 0

    def act(self, obs: dict) -> np.ndarray:
        s = self.env.task_state()
        tcp, block, target = s["tcp_pos"], s["block_pos"], s["tcp_target_pos"]
        xy_err = float(np.linalg.norm(block[:2] - tcp[:2]))
        gripper = -1.0
        if self.phase == "approach":
            goal = block + [0.0, 0.0, min(self.HOVER_M, 2.0 * xy_err)]  # down inside a cone above the block
            if xy_err < 0.008 and abs(tcp[2] - block[2]) < 0.01:
                self.phase = "close"
        if self.phase == "close":
            goal, gripper = block, 1.0
            self._closing += 1
            if self._closing > self.CLOSE_STEPS:
                self.phase = "lift"
        if self.phase == "lift":
            goal, gripper = np.array([tcp[0], tcp[1], s["block_half_size"] + self.LIFT_M]), 1.0
            if np.linalg.norm(block - tcp) > 0.04:  # the block stayed behind: open and try again
                self.phase, self._closing, gripper = "approach", 0, -1.0
        action = np.append(np.clip((goal - target) / self.env.ee_step_m, -1.0, 1.0), gripper)
        if self.noise_std > 0:
            action = action + self._rng.normal(0.0, self.noise_std, action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)
