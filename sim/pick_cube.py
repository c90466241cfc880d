"""PickCubeEnv: a Franka Panda with a Robotiq 2F-85 picks up a 4 cm cube (or, task="reach", moves above it).

The arm and gripper MJCF (with meshes) come from the installed `gym_hil` package; the scene around them
(table, cube, lights, cameras) and the fast physics settings are built with `MjSpec` in sim/pick_cube_scene.py.
Action: ``[dx, dy, dz, gripper]`` in [-1, 1]; the position part is scaled by `max_ee_step_m`, gripper -1 = open,
+1 = closed (`gripper="discrete"`: below -0.5 open, above 0.5 close, in between keep the last command, for a
discrete open/stay/close gripper policy). A damped-least-squares IK, run once per control step, turns the
end-effector target (top-down, fixed yaw) into joint position targets that the arm's position servos track
during the physics substeps. `randomize` (sim/randomize.py) varies the cube's size, mass and friction (and the
finger pads'), its start, the lights, both cameras, image and action noise, latency and the step's duration.
What the arm does between episodes and the check after it (`env.reset_mode`): sim/pick_cube_reset.py.
"""

from __future__ import annotations

import copy
import logging
import os
import sys

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless Linux has no GLFW window; EGL renders offscreen

import gymnasium as gym
import mujoco
import numpy as np

from robo_rl.envs import RobotEnv, gripper_target, make_observation_space
from robo_rl.envs.render import fast_renderer, render_cameras
from robo_rl.envs.spec import EnvSpec
from sim.pick_cube_reset import PickCubeResets
from sim.pick_cube_scene import REST_QPOS, build_pick_scene
from sim.randomize import DomainRandomizer, Randomization

log = logging.getLogger(__name__)

TOP_DOWN_QUAT = np.array([0.0, 1.0, 0.0, 0.0])  # pinch site: z down, fingers close along world y
# `mesh_detail`: the share of the arm's visual mesh faces drawn in the cameras' images (robo_rl/envs/render.py). The
# gym_hil Panda's meshes have 198k faces; on a CPU each image costs what its vertices cost (two 64x64 cameras: 53 ms
# a step at full detail, 16 ms at 0.3, with a mean pixel difference under 1/255: bench/render_detail.py)
MESH_DETAIL = 0.3
PROPRIO_DIM = 7  # end-effector position, gripper opening, end-effector velocity: what state="proprio" keeps
STATE_NAMES = (
    "ee_x",
    "ee_y",
    "ee_z",  # pinch point, workspace box mapped to [-1, 1]
    "gripper_pos",  # -1 open .. +1 fully closed (same convention as the action)
    "ee_vx",
    "ee_vy",
    "ee_vz",  # in units of the largest commanded speed
    "cube_x",
    "cube_y",
    "cube_z",  # workspace box mapped to [-1, 1]
    "cube_rel_x",
    "cube_rel_y",
    "cube_rel_z",  # cube minus pinch point, in POS_SCALE_M
    "cube_yaw_sin4",
    "cube_yaw_cos4",  # a cube looks the same every quarter turn
    "cube_lift",  # height above its resting height, in units of lift_height_m
)
ACTION_NAMES = ("x", "y", "z", "gripper")
GRIPPER_CTRL_MAX = 255.0  # the 2F-85 actuator's command range is [0, 255]
GRIPPER_DRIVER_CLOSED_RAD = 0.8  # driver joint angle when fully closed
IK_DAMPING = 0.02  # DLS damping; keeps joint steps bounded near singular poses
IK_NULLSPACE_GAIN = 0.1  # pull of the redundant DOF toward REST_QPOS per iteration
IK_ITERS_PER_STEP = 2  # warm-started from the previous target, two iterations reach < 1 mm
IK_ITERS_RESET = 60
IK_DAMPING_EYE = IK_DAMPING**2 * np.eye(6)
GRASP_MAX_OFFSET_M = 0.02  # cube centre within this of the fingertip pads' midpoint: between them, not under
LIFTED_CLEAR_M = 0.01  # a cube this far above its resting height, touching nothing but the gripper, is off the table
REACH_SHAPING_PER_M = 5.0  # reach reward 1 - tanh(k d): still has slope 30 cm away
REWARD_WEIGHTS = {"reach": 0.25, "grasp": 0.25, "lift": 0.5}  # staged progress, sums to 1
POS_SCALE_M = 0.1  # relative positions are reported in units of 10 cm
NEUTRAL_ACTION = np.array([0.0, 0.0, 0.0, -1.0], np.float32)  # no motion, gripper open (as at reset)


class PickCubeEnv(PickCubeResets, RobotEnv):
    """Pick up a randomly placed cube with a Panda (`task="lift"`), or move above it (`task="reach"`)."""

    task_description = "pick up the cube and lift it"
    metadata = {"render_modes": ["rgb_array"]}
    extra_cubes: tuple = ()  # (name, rgba) of more cubes like "cube" in the scene, for a variant (sim/pick_color.py)
    full_state_names: tuple[str, ...] = STATE_NAMES  # state="full"'s names; a variant with more cubes names its own

    @classmethod
    def instructions_for(cls, **config) -> tuple[str, ...]:
        """Every instruction an env of this config can give, in its fixed order: none, the task is the goal."""
        return ()

    @classmethod
    def spec_from_config(
        cls, state: str = "full", cameras=(), image_size: int = 128, control_hz: float = 10.0, **config
    ) -> EnvSpec:
        """The spaces this config gives, without building the simulator (the learner's view)."""
        names = cls.full_state_names if state == "full" else cls.full_state_names[:PROPRIO_DIM]
        return EnvSpec(
            len(names),
            len(ACTION_NAMES),
            {c: (int(image_size), int(image_size)) for c in cameras},
            names,
            ACTION_NAMES,
            float(control_hz),
            instructions=cls.instructions_for(**config),
        )

    def __init__(
        self,
        task: str = "lift",
        reward_type: str = "sparse",
        max_episode_steps: int | None = None,  # default: 50 for lift, 30 for reach
        terminate_on_success: bool = True,
        control_hz: float = 10.0,
        physics_dt_s: float = 0.004,
        max_ee_step_m: float = 0.04,
        workspace_low_m: tuple = (0.3, -0.25, 0.02),  # bounds of the commanded pinch point
        workspace_high_m: tuple = (0.7, 0.25, 0.3),
        cube_center_xy_m: tuple = (0.5, 0.0),
        cube_xy_range_m: tuple = (0.1, 0.1),  # half-widths of the uniform cube position box
        cube_yaw_range_rad: float = np.pi / 4,  # cube yaw uniform in [-r, r]; pi/4 covers every distinct pose
        cube_half_size_m: float = 0.02,  # a 4 cm cube; the 2F-85 opens 85 mm
        cube_mass_kg: float = 0.05,
        ee_start_m: tuple = (0.5, 0.0, 0.2),
        ee_start_noise_m: float = 0.02,  # half-width of the uniform start-position noise
        lift_height_m: float = 0.05,
        reach_height_m: float = 0.05,  # reach target: this far above the cube centre
        reach_tolerance_m: float = 0.02,
        cameras: list[str] | tuple[str, ...] = (),
        image_size: int = 128,
        gripper: str = "absolute",
        state: str = "full",
        randomize: dict | None = None,  # domain randomisation, see sim/randomize.py; None: nominal
        reset_mode: str | None = None,  # between episodes (sim/pick_cube_reset.py); None: the instant placement
        reset_trajectory: str | None = None,
        reset_tolerance_m: float = 0.03,
        reset_person: str = "devices",
        reset_wait_s: float | None = None,
        reset_check: str = "state",  # state: reset_problem | camera: reset_classifier on the cameras | both
        reset_classifier: str | None = None,
        end_walls: bool = False,  # two low walls across the table at the grasp's near and far reach (pick_cube_scene)
        mesh_detail: float = MESH_DETAIL,  # share of the arm's visual mesh faces in the camera images
    ) -> None:
        super().__init__()
        self.end_walls = bool(end_walls)
        if not 0.0 < mesh_detail <= 1.0:
            raise ValueError(f"mesh_detail must be a share of the mesh faces in (0, 1], got {mesh_detail}")
        self.mesh_detail = float(mesh_detail)
        self.reset_settings = self._reset_settings(
            reset_mode, reset_trajectory, reset_tolerance_m, reset_person, reset_wait_s, reset_check, reset_classifier
        )
        self.randomization = Randomization.from_config(randomize)
        if state not in ("full", "proprio"):
            raise ValueError(f"state must be 'full' or 'proprio' (no cube pose: learn it from cameras), got {state!r}")
        self.state_mode = state
        if gripper not in ("absolute", "discrete"):
            raise ValueError(f"gripper must be 'absolute' or 'discrete', got {gripper!r}")
        self.gripper_mode = gripper
        self._gripper_cmd = -1.0
        if task not in ("lift", "reach"):
            raise ValueError(f"task must be 'lift' or 'reach', got {task!r}")
        if reward_type not in ("dense", "sparse"):
            raise ValueError(f"reward_type must be 'dense' or 'sparse', got {reward_type!r}")
        unknown = set(cameras) - {"front", "wrist"}
        if unknown:
            raise ValueError(f"unknown cameras {sorted(unknown)}; this env has 'front' and 'wrist'")
        if image_size < 1:
            raise ValueError(f"image_size must be a positive number of pixels, got {image_size}")
        if not 0.0 < cube_half_size_m <= 0.04 or cube_mass_kg <= 0.0:
            raise ValueError(
                f"cube_half_size_m must be in (0, 0.04] (the gripper opens 85 mm) and cube_mass_kg "
                f"positive, got {cube_half_size_m} and {cube_mass_kg}"
            )
        self.task, self.reward_type, self.terminate_on_success = task, reward_type, terminate_on_success
        self.max_episode_steps = int(max_episode_steps or (50 if task == "lift" else 30))
        self.control_hz = float(control_hz)
        self.max_ee_step_m = float(max_ee_step_m)
        self.workspace_low_m = np.array(workspace_low_m, float)
        self.workspace_high_m = np.array(workspace_high_m, float)
        self.cube_center_xy_m = np.array(cube_center_xy_m, float)
        self.cube_xy_range_m = np.array(cube_xy_range_m, float)
        self.cube_yaw_range_rad = float(cube_yaw_range_rad)
        self.cube_half_size_m, self.cube_mass_kg = float(cube_half_size_m), float(cube_mass_kg)
        self._cube_half_m = self.cube_half_size_m  # this episode's (randomize.object_size_scale)
        self.ee_start_m = np.array(ee_start_m, float)
        self.ee_start_noise_m = float(ee_start_noise_m)
        self.lift_height_m, self.reach_height_m = float(lift_height_m), float(reach_height_m)
        self.reach_tolerance_m = float(reach_tolerance_m)
        if task == "reach":
            self.task_description = "move the gripper just above the cube"

        self.model = copy.copy(
            build_pick_scene(
                float(physics_dt_s),
                int(image_size),
                self.cube_half_size_m,
                self.cube_mass_kg,
                self.extra_cubes,
                self.end_walls,
                self.mesh_detail if cameras else 1.0,  # no cameras: renders only for a video, at full detail
            )
        )
        self.data = mujoco.MjData(self.model)
        self._ik_data = mujoco.MjData(self.model)  # scratch kinematics, never stepped
        self._n_substeps = max(1, round(1.0 / (self.control_hz * self.model.opt.timestep)))
        m = self.model
        self._pinch = m.site("pinch").id
        self._cube_body = m.body("cube").id
        self._cube_qpos = m.jnt_qposadr[m.joint("cube").id]
        self._driver_qpos = m.jnt_qposadr[m.joint("right_driver_joint").id]
        self._cube_geom = m.geom("cube").id
        self._left_pads = [m.geom(n).id for n in ("left_pad1", "left_pad2")]
        self._right_pads = [m.geom(n).id for n in ("right_pad1", "right_pad2")]
        free_bodies = {int(m.jnt_bodyid[j]) for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE}
        self._supports = {  # what a cube can rest on: the table, the floor, another cube
            g for g in range(m.ngeom) if m.geom_bodyid[g] == 0 or m.geom_bodyid[g] in free_bodies - {self._cube_body}
        }
        self._jac_pos, self._jac_rot = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        # the IK's scratch arrays and joint limits, allocated once (it runs every step)
        self._ik_err, self._ik_cur, self._ik_dquat, self._ik_y = np.empty(6), np.empty(4), np.empty(4), np.empty(6)
        self._ik_jac = np.empty((6, 7))
        self._q_low, self._q_high = m.jnt_range[:7, 0].copy(), m.jnt_range[:7, 1].copy()
        self._pad_sets = (frozenset(self._left_pads), frozenset(self._right_pads))

        self.state_names = self.full_state_names
        if state == "proprio":
            self.state_names = self.state_names[:PROPRIO_DIM]
        self.camera_names = tuple(cameras)
        self.image_size = int(image_size)
        self._renderers: dict[int, mujoco.Renderer] = {}  # by side: the cameras' image_size, the GUI's view (`render`)
        self.observation_space = make_observation_space(
            len(self.state_names), {c: (self.image_size, self.image_size) for c in self.camera_names}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_names = ACTION_NAMES
        self._ee_target = np.zeros(3)
        self._q_target = REST_QPOS.copy()
        self._randomizer = None
        if not self.randomization.is_nominal:
            d = self._ik_data  # scratch: forwarded at the ready pose, where each camera's aim point is found
            d.qpos[:7] = REST_QPOS
            mujoco.mj_forward(m, d)
            self._randomizer = DomainRandomizer(
                self.randomization,
                m,
                d,
                object_body=self._cube_body,
                finger_geoms=self._left_pads + self._right_pads,
                cameras=("front", "wrist"),
                surface_z_m=0.0,
                neutral_action=NEUTRAL_ACTION,
            )

    # --- control ------------------------------------------------------------------------------
    def _solve_ik(self, q: np.ndarray, pos: np.ndarray, iters: int) -> np.ndarray:
        """Joint targets putting the pinch site at `pos`, top-down, from warm start `q` (damped least squares)."""
        m, d = self.model, self._ik_data
        err, cur, dquat, jac, y = self._ik_err, self._ik_cur, self._ik_dquat, self._ik_jac, self._ik_y
        low, high = self._q_low, self._q_high
        for it in range(iters):
            d.qpos[:7] = q
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, self._jac_pos, self._jac_rot, self._pinch)
            err[:3] = pos - d.site_xpos[self._pinch]
            mujoco.mju_mat2Quat(cur, d.site_xmat[self._pinch])
            mujoco.mju_negQuat(cur, cur)
            mujoco.mju_mulQuat(dquat, TOP_DOWN_QUAT, cur)
            mujoco.mju_quat2Vel(err[3:], dquat, 1.0)
            jac[:3], jac[3:] = self._jac_pos[:, :7], self._jac_rot[:, :7]
            # dq = J⁺ err + (I − J⁺J) pull with J⁺ = Jᵀ(JJᵀ + λ²I)⁻¹, i.e. pull + J⁺(err − J pull): one Cholesky
            # solve of the 6x6 system, no inverse; the last iteration is pure task-space, so the null-space pull
            # leaves no residual
            pull = IK_NULLSPACE_GAIN * (REST_QPOS - q) if it < iters - 1 else None
            system = jac @ jac.T
            system += IK_DAMPING_EYE
            mujoco.mju_cholFactor(system, 0.0)
            mujoco.mju_cholSolve(y, system, err if pull is None else err - jac @ pull)
            dq = jac.T @ y
            if pull is not None:
                dq += pull
            q = np.minimum(np.maximum(q + dq, low), high)
        return q

    # --- RobotEnv -----------------------------------------------------------------------------
    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        options = options or {}
        m, d = self.model, self.data
        # Draw every random number even when options override it, so the rest of the episode's stream is unchanged.
        cube_xy = self.cube_center_xy_m + rng.uniform(-1, 1, 2) * self.cube_xy_range_m
        yaw = rng.uniform(-1, 1) * self.cube_yaw_range_rad
        ee = self.ee_start_m + rng.uniform(-1, 1, 3) * self.ee_start_noise_m
        info = {"success": False}
        if self._randomizer is not None:  # drawn after the pose: a seed places the cube as in the nominal env
            info["randomization"] = self._randomizer.reset(rng)
            cube_xy = cube_xy + self._randomizer.object_xy_offset
            self._cube_half_m = self.cube_half_size_m * self._randomizer.object_scale
        if options.get("keep_scene"):  # the scene a reset left (robo_rl/envs/resets.py): from where things are
            return self._keep_scene(info)
        mujoco.mj_resetData(m, d)
        self._blow_ups_seen = self._blow_up_counts()
        cube_xy = np.asarray(options.get("cube_xy", cube_xy), float)
        yaw = float(options.get("cube_yaw", yaw))
        self._ee_target = np.clip(ee, self.workspace_low_m, self.workspace_high_m)
        self._gripper_cmd = -1.0  # open
        self._q_target = self._solve_ik(REST_QPOS.copy(), self._ee_target, IK_ITERS_RESET)
        d.qpos[:7] = self._q_target
        d.ctrl[:7] = self._q_target
        d.act[:7] = self._q_target  # the arm servos' filtered targets (their activations) start there too
        cube_quat = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        d.qpos[self._cube_qpos : self._cube_qpos + 7] = [*cube_xy, self._cube_half_m, *cube_quat]
        mujoco.mj_forward(m, d)
        return self._observation(), info

    def absolute_gripper(self, command: float) -> float:
        """The absolute gripper command (-1 open .. +1 closed) a gripper action amounts to now: itself, or with
        `gripper="discrete"` open / close / (between the thresholds) the last command."""
        return gripper_target(self.gripper_mode, command, self._gripper_cmd)

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        m, d = self.model, self.data
        n_substeps = self._n_substeps
        if self._randomizer is not None:
            action, n_substeps = self._randomizer.action(action), self._randomizer.substeps(n_substeps)
        pinch = d.site_xpos[self._pinch]
        # Accumulate on the previous target, but never more than one step ahead of the arm (no wind-up on contact).
        base = pinch + np.clip(self._ee_target - pinch, -self.max_ee_step_m, self.max_ee_step_m)
        self._ee_target = np.clip(base + action[:3] * self.max_ee_step_m, self.workspace_low_m, self.workspace_high_m)
        self._q_target = self._solve_ik(self._q_target, self._ee_target, IK_ITERS_PER_STEP)
        d.ctrl[:7] = self._q_target
        self._gripper_cmd = self.absolute_gripper(float(action[3]))
        d.ctrl[7] = (self._gripper_cmd + 1.0) * 0.5 * GRIPPER_CTRL_MAX
        mujoco.mj_step(m, d, nstep=n_substeps)
        mujoco.mj_forward(m, d)  # positions, velocities and contacts of the final state, not the last substep's
        blown_up = self._new_blow_up()
        if blown_up is not None:  # MuJoCo put the scene back to its zero state: the episode cannot go on from there
            fault = f"the simulation blew up ({blown_up}) and MuJoCo reset its state"
            log.warning("%s: the episode ends here (ended_by=sim_fault)", fault)
            info = {"success": False, "progress": 0.0, "fault": fault, "ended_by": "sim_fault"}
            return self._observation(), -1.0 if self.reward_type == "dense" else 0.0, True, info
        grasped = self.task == "lift" and self._is_grasped()
        progress, success = self._progress(grasped)
        if self.reward_type == "dense":
            reward = progress - 1.0
        else:
            reward = float(success)
        terminated = bool(success and self.terminate_on_success)
        info = {"success": success, "progress": progress}
        if self.task == "lift":  # what an evaluation's failure modes read (never grasped, dropped)
            info["grasped"] = grasped
        if self._randomizer is not None:
            self._randomizer.add_first_step_info(info)
        return self._observation(), reward, terminated, info

    # --- task ---------------------------------------------------------------------------------
    def _is_grasped(self) -> bool:
        """Both finger pads touch the cube and are held apart by it, with the cube centred between the pads (a
        closed gripper pressed onto the cube touches it with both pads too, but from above), or lifted clear of the
        table touching nothing else: a cube closed on near its top edge, or slid along the pads as it came up fast,
        hangs 2-3 cm off their midpoint and is held all the same (a trained policy's grasps often are; not counting
        them left its episodes carrying the cube to the top of the box and dropping it out of the reset's reach)."""
        d = self.data
        cube, touching = self._cube_geom, set()
        for g1, g2 in zip(d.contact.geom1[: d.ncon].tolist(), d.contact.geom2[: d.ncon].tolist(), strict=True):
            if g1 == cube:
                touching.add(g2)
            elif g2 == cube:
                touching.add(g1)
        left_pads, right_pads = self._pad_sets
        if touching.isdisjoint(left_pads) or touching.isdisjoint(right_pads):
            return False
        left, right = d.geom_xpos[self._left_pads[0]], d.geom_xpos[self._right_pads[0]]  # the fingertip pads
        if np.linalg.norm(right - left) <= self._cube_half_m:  # not held apart by it
            return False
        centred = np.linalg.norm(d.xpos[self._cube_body] - 0.5 * (left + right)) < GRASP_MAX_OFFSET_M
        lifted = d.xpos[self._cube_body][2] - self._cube_half_m > LIFTED_CLEAR_M and touching.isdisjoint(self._supports)
        return bool(centred or lifted)

    def _progress(self, grasped: bool) -> tuple[float, bool]:
        """Task progress in [0, 1] (exactly 1 on success) and ground-truth success; `grasped`: `_is_grasped()` now."""
        d = self.data
        cube, pinch = d.xpos[self._cube_body], d.site_xpos[self._pinch]
        if self.task == "reach":
            dist = np.linalg.norm(cube + [0.0, 0.0, self.reach_height_m] - pinch)
            success = bool(dist < self.reach_tolerance_m)
            return float(1.0 - np.tanh(REACH_SHAPING_PER_M * max(dist - self.reach_tolerance_m, 0.0))), success
        lift = (cube[2] - self._cube_half_m) / self.lift_height_m  # placed resting on the table
        if grasped:
            success = bool(lift >= 1.0)
            w = REWARD_WEIGHTS
            return w["reach"] + w["grasp"] + w["lift"] * float(np.clip(lift, 0.0, 1.0)), success
        reach = 1.0 - np.tanh(REACH_SHAPING_PER_M * np.linalg.norm(cube - pinch))
        return REWARD_WEIGHTS["reach"] * float(reach), False

    # --- observation --------------------------------------------------------------------------
    def _observation(self) -> dict:
        m, d = self.model, self.data
        lo, hi = self.workspace_low_m, self.workspace_high_m
        pinch, cube = d.site_xpos[self._pinch], d.xpos[self._cube_body]
        vel = np.empty(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, self._pinch, vel, 0)
        rot = d.xmat[self._cube_body]
        yaw = np.arctan2(rot[3], rot[0])  # rotation about world z, from the cube's x-axis
        gripper = d.qpos[self._driver_qpos] / GRIPPER_DRIVER_CLOSED_RAD
        state = np.concatenate(
            [
                2.0 * (pinch - lo) / (hi - lo) - 1.0,
                [2.0 * gripper - 1.0],
                vel[3:] / (self.max_ee_step_m * self.control_hz),
                2.0 * (cube - lo) / (hi - lo) - 1.0,
                (cube - pinch) / POS_SCALE_M,
                [np.sin(4.0 * yaw), np.cos(4.0 * yaw)],
                [(cube[2] - self._cube_half_m) / self.lift_height_m],
            ]
        ).astype(np.float32)
        self.full_state = state  # with state="proprio", what scripted experts read (the cube pose too)
        images = self._render() if self._randomizer is None else self._randomizer.images(self._render())
        return {"state": state[: len(self.state_names)], "images": images}

    def _render(self) -> dict[str, np.ndarray]:
        if not self.camera_names:
            return {}
        return render_cameras(self._renderer(self.image_size), self.data, self.camera_names)

    def render(self, size: int | None = None) -> np.ndarray:
        """The front camera, uint8 HxWx3 of `image_size` (Gymnasium's rgb_array): what eval videos show; or `size`
        square (the GUI's larger view)."""
        return render_cameras(self._renderer(self.image_size if size is None else size), self.data, ("front",))["front"]

    def _renderer(self, size: int) -> mujoco.Renderer:
        if size not in self._renderers:  # created lazily: state-only envs never touch OpenGL
            self._renderers[size] = fast_renderer(self.model, size, size)
        return self._renderers[size]

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
