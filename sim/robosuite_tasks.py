"""robosuite's Lift and PickPlaceCan (Panda, OSC_POSE end-effector delta control) behind `RobotEnv`.

Action: ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` in [-1, 1], passed unchanged to robosuite's OSC_POSE
controller (delta input, robot-base frame, which here has the world's orientation); the controller scales the first
six to at most `max_ee_step_m` / `max_ee_rot_rad` per step (its ``output_max``), gripper -1 = open, +1 = closed.
The controller is robosuite's default Panda config (``controllers/config/robots/default_panda.json``) with only
those two scales set from our arguments (robosuite's own defaults, 5 cm and 0.5 rad, unless changed).

State (low-dim): the robosuite observation keys in `state_keys`, concatenated in that order. The default is the
robomimic low-dim set ``robot0_eef_pos, robot0_eef_quat, robot0_gripper_qpos, object`` ("object" is robosuite's
``object-state``: Lift ``cube_pos, cube_quat, gripper_to_cube_pos``; PickPlaceCan ``Can_to_robot0_eef_pos,
Can_to_robot0_eef_quat, Can_pos, Can_quat``), so ``import_robomimic(path, state_keys=list(env.state_keys))``
reads robomimic demos in this env's layout. Quaternions are (x, y, z, w), positions metres in the world frame.
Image mode: the state defaults to the three proprio keys (the object is seen, not given), plus `cameras` rendered
by MuJoCo's renderer on robosuite's model, upright, without shadows, reflections or anti-aliasing.

Reward: robosuite's, normalised to 1 on success ("sparse", the default as in robomimic/RLPD: 0/1;
`reward_type="dense"`: its staged shaping). Dense shaping pays up to about 0.55 per step for holding the cube
without lifting it, so with `terminate_on_success` (which ends that stream at one reward of 1) it teaches the agent
to hover: measured, 0.08 success after 50k steps of Lift. The env warns about that combination.
`reward_type="potential"`: the sparse reward plus potential-based shaping (Ng, Harada & Russell 1999),
``shaping_scale · (shaping_gamma · Φ(s') − Φ(s))`` with Φ robosuite's own staged progress before success, in [0, 1]
(Lift: reaching ``1 − tanh(10 d)`` and grasping 0.25, over 1.25; PickPlaceCan: the best of its reach / grasp / lift /
hover stages, over 0.7), and Φ = 0 once the episode ends (success or the time limit). An episode's discounted shaped
return is then its sparse return minus ``shaping_scale · Φ(s0)``, the same for every policy, so ranking policies by
success is unchanged, while each step says whether the gripper came closer or took hold (for a learner with few
episodes per update; it did not lift ReinFlow on Lift within 50k: BENCHMARKS.md). `shaping_gamma` must be the learner's
discount per env step (an experiment sets it to `${algo.gamma}`); the shaping is exact for a learner that does not
bootstrap a time-limit cut (`algo.bootstrap_truncated=false`).
Success is robosuite's ``_check_success()``; it terminates the episode (`terminate_on_success`); the horizon is
ours (``truncated``, ended_by "time_limit"; robosuite runs with ``ignore_done``).

Seeding: robosuite 1.5 draws object placement, robot start noise and object sizes from numpy's *global*
generator (its own `seed`/`rng` go unused), so each reset runs robosuite with the global generator seeded from the
episode's generator and then restores it: the same ``reset(seed=...)`` places the same object, and the caller's
global stream is left as it was. The model is built once (``hard_reset=False``), its random sizes from `model_seed`.

Randomisation (`randomize`, sim/randomize.py), applied to robosuite's compiled model at each reset: the object's
mass and friction (and the fingers'), its start shifted by `object_xy_offset_m`, the lights and the observed cameras
on both tasks; `object_size_scale` only for the Lift cube (a box: the can is a mesh, refused), which then starts at
the same gap above the table; success stays robosuite's (Lift: the cube's centre 4 cm above the table, whatever
its size). Image and action noise, action latency and control jitter (whole 2 ms substeps) on both.
"""

from __future__ import annotations

import copy
import os
import sys
import warnings

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless Linux has no GLFW window; EGL renders offscreen

import gymnasium as gym
import mujoco
import numpy as np

from robo_rl.envs import RobotEnv, make_observation_space
from robo_rl.envs.render import fast_renderer, render_cameras
from robo_rl.seeding import global_numpy_seed
from sim.randomize import DomainRandomizer, Randomization

PROPRIO_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")
OBJECT_KEYS = {  # the order of robosuite's object-state (robomimic's "object")
    "Lift": (("cube_pos", 3), ("cube_quat", 4), ("gripper_to_cube_pos", 3)),
    "PickPlaceCan": (("Can_to_robot0_eef_pos", 3), ("Can_to_robot0_eef_quat", 4), ("Can_pos", 3), ("Can_quat", 4)),
}
REWARD_TYPES = ("sparse", "dense", "potential")
TASK_DEFAULTS = {  # horizon in control steps (20 Hz: Lift 5 s, PickPlaceCan 12.5 s), reward type
    "Lift": {"max_episode_steps": 100, "reward_type": "sparse", "object": "cube"},
    "PickPlaceCan": {"max_episode_steps": 250, "reward_type": "sparse", "object": "Can"},
}
TASK_DESCRIPTIONS = {
    "Lift": "pick up the red cube and lift it",
    "PickPlaceCan": "pick up the can and place it in its compartment of the other bin",
}
KEY_ALIASES = {"object": "object-state"}  # robomimic's name → robosuite's
AXES = {3: ("x", "y", "z"), 4: ("qx", "qy", "qz", "qw"), 2: ("left", "right")}
NEUTRAL_ACTION = np.array([0.0] * 6 + [-1.0], np.float32)  # no motion, gripper open (as at reset)
HALF_SUBSTEP = 0.5  # robosuite runs int(control_timestep / model_timestep) substeps: aim between two counts


def controller_config(max_ee_step_m: float = 0.05, max_ee_rot_rad: float = 0.5) -> dict:
    """Robosuite's default Panda composite controller (BASIC: OSC_POSE arm, delta input, base frame, kp 150,
    critically damped, GRIP gripper) with the per-step output scales set."""
    from robosuite import load_composite_controller_config

    cfg = copy.deepcopy(load_composite_controller_config(robot="Panda"))
    arm = cfg["body_parts"]["right"]
    if arm["type"] != "OSC_POSE" or arm["input_type"] != "delta":
        raise RuntimeError(f"robosuite's default Panda controller changed: {arm['type']}/{arm['input_type']}")
    scale = [max_ee_step_m] * 3 + [max_ee_rot_rad] * 3
    arm["output_max"], arm["output_min"] = scale, [-s for s in scale]
    return cfg


class RobosuiteEnv(RobotEnv):
    """robosuite `task` ("Lift" or "PickPlaceCan") with a Panda, as a `RobotEnv` (see the module docstring)."""

    def __init__(
        self,
        task: str = "Lift",
        observation: str = "low_dim",  # "low_dim" | "image"
        reward_type: str | None = None,  # "sparse" | "dense" (robosuite's) | "potential" (see above); None: default
        shaping_gamma: float = 0.99,  # reward_type="potential": the learner's discount per env step
        shaping_scale: float = 1.0,  # reward_type="potential": the weight of the shaping term (success pays 1)
        max_episode_steps: int | None = None,  # None: the task default (Lift 100, PickPlaceCan 250)
        terminate_on_success: bool = True,
        control_hz: float = 20.0,
        max_ee_step_m: float = 0.05,
        max_ee_rot_rad: float = 0.5,
        state_keys: list[str] | tuple[str, ...] | None = None,
        cameras: list[str] | tuple[str, ...] = ("agentview", "robot0_eye_in_hand"),
        image_size: int = 84,
        model_seed: int = 0,  # seeds what robosuite draws once, at build time (the Lift cube's size)
        randomize: dict | None = None,  # domain randomisation, see sim/randomize.py; None: nominal
    ) -> None:
        super().__init__()
        self.randomization = Randomization.from_config(randomize)
        if task not in TASK_DEFAULTS:
            raise ValueError(f"task must be one of {sorted(TASK_DEFAULTS)}, got {task!r}")
        if observation not in ("low_dim", "image"):
            raise ValueError(f"observation must be 'low_dim' or 'image', got {observation!r}")
        defaults = TASK_DEFAULTS[task]
        reward_type = reward_type or defaults["reward_type"]
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type must be one of {', '.join(REWARD_TYPES)}, got {reward_type!r}")
        if not 0 < shaping_gamma <= 1 or not 0 <= shaping_scale <= 1:
            raise ValueError(
                f"shaping_gamma must be in (0, 1] and shaping_scale in [0, 1] (success pays 1), got "
                f"{shaping_gamma} and {shaping_scale}"
            )
        cameras = tuple(cameras) if observation == "image" else ()
        if image_size < 1:
            raise ValueError(f"image_size must be a positive number of pixels, got {image_size}")
        if control_hz <= 0:
            raise ValueError(f"control_hz must be positive, got {control_hz}")
        self.task, self.observation, self.reward_type = task, observation, reward_type
        self.shaping_gamma, self.shaping_scale = float(shaping_gamma), float(shaping_scale)
        self._potential = 0.0  # Φ of the current state (reward_type="potential")
        self.terminate_on_success = bool(terminate_on_success)
        if reward_type == "dense" and self.terminate_on_success:
            warnings.warn(
                f"{task}: dense reward shaping with terminate_on_success pays more for holding the "
                "object than for finishing the task; use reward_type=sparse or terminate_on_success=false",
                stacklevel=2,
            )
        self.max_episode_steps = int(max_episode_steps or defaults["max_episode_steps"])
        self.control_hz = float(control_hz)
        self.max_ee_step_m, self.max_ee_rot_rad = float(max_ee_step_m), float(max_ee_rot_rad)
        self.task_description = TASK_DESCRIPTIONS[task]
        self.controller_config = controller_config(self.max_ee_step_m, self.max_ee_rot_rad)

        import robosuite

        with global_numpy_seed(model_seed):
            self._env = robosuite.make(
                task,
                robots="Panda",
                controller_configs=self.controller_config,
                reward_shaping=reward_type == "dense",
                control_freq=self.control_hz,
                horizon=self.max_episode_steps,
                ignore_done=True,  # the time limit is ours (truncated), never robosuite's
                hard_reset=False,  # reset the sim in place instead of rebuilding the model every episode
                has_renderer=False,
                has_offscreen_renderer=False,  # images come from our own cheap renderer (see _render)
                use_camera_obs=False,
                use_object_obs=True,
            )
        self._model, self._data = self._env.sim.model._model, self._env.sim.data._data  # raw MjModel / MjData
        known = [self._model.camera(i).name for i in range(self._model.ncam)]
        if set(cameras) - set(known):
            self._env.close()
            raise ValueError(f"unknown cameras {sorted(set(cameras) - set(known))}; robosuite's {task} has {known}")
        obj = self._env.cube if task == "Lift" else self._env.objects[self._env.object_to_id["can"]]
        self._object_size = np.asarray(obj.get_bounding_box_half_size(), float)
        self._object_scale = 1.0  # this episode's size factor (randomize.object_size_scale)
        self._object_qpos = self._model.jnt_qposadr[self._model.joint(obj.joints[0]).id]
        self._randomizer = None
        if not self.randomization.is_nominal:
            gripper = self._env.robots[0].gripper
            gripper = next(iter(gripper.values())) if isinstance(gripper, dict) else gripper  # one per arm
            fingers = [
                self._model.geom(n).id
                for part in ("left_finger", "right_finger")
                for n in gripper.important_geoms[part]
            ]
            self._env.sim.forward()  # the start pose, where each camera's aim point is found
            try:
                self._randomizer = DomainRandomizer(
                    self.randomization,
                    self._model,
                    self._data,
                    object_body=self._model.body(obj.root_body).id,
                    finger_geoms=fingers,
                    cameras=cameras,
                    surface_z_m=self._surface_z(),
                    neutral_action=NEUTRAL_ACTION,
                )
            except ValueError:
                self._env.close()
                raise

        default_keys = PROPRIO_KEYS if observation == "image" else (*PROPRIO_KEYS, "object")
        self.state_keys = tuple(state_keys or default_keys)
        raw = self._raw = self._env.observation_spec()  # the current observation dict
        names = []
        for key in self.state_keys:
            value = raw.get(KEY_ALIASES.get(key, key))
            if value is None:
                self._env.close()
                available = sorted(k for k in raw if not k.endswith("image")) + list(KEY_ALIASES)
                raise ValueError(f"unknown state key {key!r}; robosuite's {task} has {available}")
            names += self._names(key, np.size(value))
        self.state_names = tuple(names)
        self.camera_names = cameras
        self.image_size = int(image_size)
        self._renderer = None
        self.observation_space = make_observation_space(
            len(self.state_names), {c: (self.image_size, self.image_size) for c in cameras}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
        self.action_names = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")

    def _names(self, key: str, size: int) -> list[str]:
        if key == "object":
            return [n for sub, dim in OBJECT_KEYS[self.task] for n in self._names(sub, dim)]
        axes = AXES.get(size, tuple(str(i) for i in range(size)))
        return [f"{key}_{a}" for a in axes]

    # --- RobotEnv -----------------------------------------------------------------------------
    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        seed, info = int(rng.integers(2**32)), {"success": False}
        r = self._randomizer
        if r is not None:  # drawn after robosuite's seed: a seed places the object as in the nominal env
            info["randomization"] = r.reset(rng)
        with global_numpy_seed(seed):
            raw = self._env.reset()
        if r is not None:  # robosuite placed the nominal object: shift it, and lift a scaled one onto the table
            self._object_scale = r.object_scale
            lift = (r.object_scale - 1.0) * self._object_size[2]
            self._data.qpos[self._object_qpos : self._object_qpos + 3] += [*r.object_xy_offset, lift]
            self._env.sim.forward()
            raw = self._observe_now()
        self._potential = self.progress() if self.reward_type == "potential" else 0.0
        return self._observation(raw), info

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        r, info = self._randomizer, {}
        if r is None:
            raw, reward, _, _ = self._env.step(action.astype(np.float64))
        else:
            env, info = self._env, r.add_first_step_info(info)
            nominal_s = env.control_timestep
            substeps = r.substeps(round(nominal_s / env.model_timestep))
            env.control_timestep = (substeps + HALF_SUBSTEP) * env.model_timestep
            try:
                raw, reward, _, _ = env.step(r.action(action).astype(np.float64))
            finally:
                env.control_timestep = nominal_s
            env.cur_time -= HALF_SUBSTEP * env.model_timestep  # robosuite's clock: the time really simulated
            raw = self._observe_now()  # a jittered step ends off robosuite's observation sampling grid
        success = bool(self._env._check_success())
        terminated = success and self.terminate_on_success
        return self._observation(raw), float(reward), terminated, {**info, "success": success}

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.reward_type == "potential":  # here, where the time limit's cut is known: Φ = 0 after any end
            reward += self._shaping(ends=terminated or truncated)
        return obs, reward, terminated, truncated, info

    def progress(self) -> float:
        """Φ: robosuite's staged progress towards success in the current state, in [0, 1] (module docstring)."""
        env = self._env
        if self.task == "Lift":
            dist = env._gripper_to_target(
                gripper=env.robots[0].gripper, target=env.cube.root_body, target_type="body", return_distance=True
            )
            grasp = env._check_grasp(gripper=env.robots[0].gripper, object_geoms=env.cube)
            return float((1.0 - np.tanh(10.0 * dist) + 0.25 * grasp) / 1.25)
        return float(max(env.staged_rewards()) / 0.7)

    def _shaping(self, ends: bool) -> float:
        """This step's shaping term, γ·Φ(s') − Φ(s), Φ = 0 after the episode's end; Φ(s') becomes the current Φ."""
        before, self._potential = self._potential, 0.0 if ends else self.progress()
        return self.shaping_scale * (self.shaping_gamma * self._potential - before)

    def _observe_now(self) -> dict:
        """robosuite's observation of the current sim state, its observables' sampling clocks left as they are."""
        env = self._env
        env._obs_cache = {}
        for observable in env._observables.values():
            observable.update(timestep=0.0, obs_cache=env._obs_cache, force=True)
        return env._get_observations()

    def _observation(self, raw: dict) -> dict:
        self._raw = raw
        parts = [np.ravel(raw[KEY_ALIASES.get(k, k)]) for k in self.state_keys]
        images = self._render() if self._randomizer is None else self._randomizer.images(self._render())
        return {"state": np.concatenate(parts).astype(np.float32), "images": images}

    # --- ground truth for scripted experts ----------------------------------------------------
    def task_state(self) -> dict:
        """Simulator ground truth of the current step, for scripted experts (read-only copies; world frame):
        ``eef_pos`` (3,), ``eef_quat`` (x, y, z, w), ``gripper_qpos`` (2,) finger joints (open ≈ ±0.04),
        ``object_pos`` (3,), ``object_quat`` (x, y, z, w), ``object_size`` (3,) half-extents of the object's
        bounding box, ``table_z`` (the surface the object starts on) and ``target_pos`` (3,): where the object
        must go (PickPlaceCan: its bin compartment's centre at the bin floor; Lift: the object's x, y at the height
        its centre must pass for success)."""
        raw, obj = self._raw, TASK_DEFAULTS[self.task]["object"]
        table_z = self._surface_z()
        if self.task == "Lift":
            target = np.array([*raw["cube_pos"][:2], table_z + 0.04])  # robosuite's Lift success height
        else:
            target = np.array(self._env.target_bin_placements[self._env.object_to_id["can"]], float)
        return {
            "eef_pos": np.array(raw["robot0_eef_pos"], float),
            "eef_quat": np.array(raw["robot0_eef_quat"], float),
            "gripper_qpos": np.array(raw["robot0_gripper_qpos"], float),
            "object_pos": np.array(raw[f"{obj}_pos"], float),
            "object_quat": np.array(raw[f"{obj}_quat"], float),
            "object_size": self._object_size * self._object_scale,
            "table_z": table_z,
            "target_pos": target,
        }

    def _surface_z(self) -> float:
        """Height of the surface the object starts on (Lift: the table; PickPlaceCan: the first bin's floor)."""
        if self.task == "Lift":
            return float(self._env.model.mujoco_arena.table_offset[2])
        return float(self._env.bin1_pos[2])

    # --- images -------------------------------------------------------------------------------
    def _render(self) -> dict[str, np.ndarray]:
        """Cameras rendered by MuJoCo's own renderer on robosuite's model: upright (no OpenGL flip to undo),
        visual geoms only, no shadows, reflections, skybox or anti-aliasing."""
        if not self.camera_names:
            return {}
        if self._renderer is None:  # created lazily: low-dim envs never touch OpenGL
            self._renderer = fast_renderer(self._model, self.image_size, self.image_size)
            self._scene_option = mujoco.MjvOption()
            self._scene_option.geomgroup[0] = 0  # robosuite's collision geoms: hidden, as in its own renderer
        return render_cameras(self._renderer, self._data, self.camera_names, self._scene_option)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._env.close()
