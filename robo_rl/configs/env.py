"""Every env's settings, one typed field each with its default, range and meaning, keyed by the env's `_target_`
STRING: the core never imports `sim` or `hardware`. `launch/conf/env/<option>.yaml` names the class and holds what the
option differs in (its task, its driver, an interpolation such as `${hardware.dry_run}`); two options of one class
(so101 and so101_twin, robosuite lift and can) share its dataclass. The env classes keep the same keyword defaults
for Python users; `tests/test_configs_env.py` holds the two equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from robo_rl.configs.typed import FIXED, setting

CONTROL_HZ_MAX = 1000.0
IMAGE_SIZE_MAX = 1024
STEP = "per step at action 1"
TIME_LIMIT = "steps before the time limit"
RESET_MODES = ("human", "scripted", "taught", "learned")  # robo_rl/envs/resets.py
RESET_MODE = (
    "between episodes (robo_rl/envs/resets.py), then a check that calls a person only when it fails: human (a person "
    "resets; the run waits) | scripted (the robot puts the scene back itself, physics running) | taught (replays "
    "env.reset_trajectory, recorded once with a device) | learned (not built yet: refused)"
)
RESET_TRAJECTORY = "reset_mode=taught: the recorded reset trajectory file (robo_rl/teleop/reset_teaching.py)"
RESET_PERSON = (
    "who answers a failed reset check: devices (a terminal line; the run waits until the check passes, re-checked on "
    "a device's acknowledge) | sim (a simulated person puts the scene back)"
)
RESET_WAIT = "a failed reset check waits this long for a person before the actor stops, s (null: it waits)"
RESET_CHECKS = ("state", "camera", "both")  # robo_rl/envs/resets.py
RESET_CHECK = (
    "what decides that the scene is ready after a reset: state (the task's own check: a sim's true state, an arm's "
    "joints) | camera (a classifier on the cameras, env.reset_classifier: what a real scene has) | both"
)
RESET_CLASSIFIER = (
    "reset_check=camera or both: the reset classifier's model folder (robo-rl reset-check train writes one; "
    "robo_rl/envs/reset_check.py)"
)


@dataclass
class PickCubeConfig:
    """sim/pick_cube.py: a MuJoCo Franka Panda picks up a cube and lifts it, or moves just above it."""

    blocks: ClassVar[tuple[str, ...]] = ("randomize", "expert")

    task: str = setting("lift", "lift the cube, or reach (move just above it)", choices=("lift", "reach"))
    reward_type: str = setting(
        "sparse",
        "sparse: 1 on success, else 0 (what a robot has: a key, a classifier) | dense: staged progress - 1",
        choices=("dense", "sparse"),
    )
    max_episode_steps: int | None = setting(None, f"{TIME_LIMIT} (null: 50 for lift, 30 for reach)", low=1)
    terminate_on_success: bool = setting(True, "end the episode on success")
    control_hz: float = setting(10.0, "control rate, Hz", above=0, high=CONTROL_HZ_MAX)
    physics_dt_s: float = setting(
        0.004, "physics timestep, s; a control step is 1 / (control_hz * physics_dt_s) substeps", above=0, high=0.1
    )
    max_ee_step_m: float = setting(0.04, f"end-effector move {STEP}, m", above=0)
    workspace_low_m: tuple[float, float, float] = setting(
        (0.3, -0.25, 0.02), "lower corner of the box the commanded pinch point stays in, m"
    )
    workspace_high_m: tuple[float, float, float] = setting((0.7, 0.25, 0.3), "upper corner of that box, m")
    cube_center_xy_m: tuple[float, float] = setting((0.5, 0.0), "centre of the cube's spawn area, m")
    cube_xy_range_m: tuple[float, float] = setting(
        (0.1, 0.1), "half-widths of the cube's uniform spawn box around cube_center_xy_m, m", low=0, high=0.3
    )
    cube_yaw_range_rad: float = setting(
        math.pi / 4, "cube yaw uniform in [-r, r], rad; pi/4 covers every distinct pose", low=0, high=math.pi
    )
    cube_half_size_m: float = setting(
        0.02, "half the cube's edge, m (0.02: a 4 cm cube; the gripper opens 85 mm)", low=0.005, high=0.04
    )
    cube_mass_kg: float = setting(0.05, "cube mass, kg", above=0, high=2)
    ee_start_m: tuple[float, float, float] = setting((0.5, 0.0, 0.2), "gripper start position, m")
    ee_start_noise_m: float = setting(0.02, "half-width of the uniform gripper start noise, m", low=0, high=0.2)
    lift_height_m: float = setting(0.05, "success: the grasped cube this far above the table, m", above=0)
    reach_height_m: float = setting(0.05, "reach target: this far above the cube centre, m", low=0)
    reach_tolerance_m: float = setting(0.02, "reach success distance, m", above=0)
    cameras: tuple[str, ...] = setting((), "cameras in the observation: front, wrist")
    image_size: int = setting(128, "camera image height and width, pixels", low=1, high=IMAGE_SIZE_MAX)
    gripper: str = setting(
        "absolute",
        "absolute: action = opening | discrete: open / stay / close (policy=hybrid_gripper)",
        choices=("absolute", "discrete"),
    )
    state: str = setting("full", "full, or proprio (no cube pose: learn it from cameras)", choices=("full", "proprio"))
    reset_mode: str | None = setting(
        None,
        RESET_MODE + "; null: the simulator places the scene instantly, unchecked (as before)",
        choices=RESET_MODES,
    )
    reset_trajectory: str | None = setting(None, RESET_TRAJECTORY)
    reset_tolerance_m: float = setting(
        0.03, "reset check: the cube within this of its start region, the arm of its home pose, m", above=0
    )
    reset_person: str = setting("devices", RESET_PERSON, choices=("devices", "sim"))
    reset_wait_s: float | None = setting(None, RESET_WAIT, above=0)
    reset_check: str = setting("state", RESET_CHECK, choices=RESET_CHECKS)
    reset_classifier: str | None = setting(None, RESET_CLASSIFIER)
    mesh_detail: float = setting(
        0.3,
        "share of the arm's visual mesh faces drawn in the camera images (1: the full 198k faces; 0.3 renders 3x "
        "faster on a CPU, pixels within 1/255 on average; physics is the same)",
        above=0,
        high=1,
    )
    end_walls: bool = setting(
        False,
        "two low walls across the table at the near and far reach of the arm's top-down grasp: a cube squeezed out of "
        "the fingers stops where the scripted reset can fetch it, as a real cell keeps its objects in a bin",
    )


@dataclass
class PickColorConfig(PickCubeConfig):
    """sim/pick_color.py: pick_cube with a red and a blue cube; the instruction names the one to lift."""

    blocks: ClassVar[tuple[str, ...]] = ("expert",)  # no randomize: it varies pick_cube's one cube only

    target: str = setting(
        "either", "the cube the instruction names (either: drawn per episode)", choices=("red", "blue", "either")
    )


@dataclass
class RobosuiteConfig:
    """sim/robosuite_tasks.py: a robosuite task on a Panda (OSC_POSE end-effector deltas)."""

    blocks: ClassVar[tuple[str, ...]] = ("randomize", "expert")

    task: str = setting("Lift", "robosuite's task", choices=("Lift", "PickPlaceCan"))
    observation: str = setting(
        "low_dim", "low_dim: the state | image: the cameras at image_size too", choices=("low_dim", "image")
    )
    reward_type: str | None = setting(
        None,
        "sparse: 0/1 on success | dense: robosuite's shaping (teaches hovering) | potential: sparse + γΦ(s') − Φ(s) "
        "of robosuite's staged progress (null: the task's)",
        choices=("sparse", "dense", "potential"),
    )
    shaping_gamma: float = setting(0.99, "reward_type=potential: the learner's discount per env step", above=0, high=1)
    shaping_scale: float = setting(
        1.0, "reward_type=potential: the shaping term's weight (success pays 1)", low=0, high=1
    )
    max_episode_steps: int | None = setting(None, f"{TIME_LIMIT} (null: the task's, Lift 100, PickPlaceCan 250)", low=1)
    terminate_on_success: bool = setting(True, "end the episode on success")
    control_hz: float = setting(20.0, "control rate, Hz", above=0, high=CONTROL_HZ_MAX)
    max_ee_step_m: float = setting(0.05, f"end-effector move {STEP}, m", above=0)
    max_ee_rot_rad: float = setting(0.5, f"end-effector rotation {STEP}, rad", above=0)
    state_keys: tuple[str, ...] | None = setting(None, "robosuite observation keys in the state (null: the task's)")
    cameras: tuple[str, ...] = setting(
        ("agentview", "robot0_eye_in_hand"), "cameras in the observation (observation=image)"
    )
    image_size: int = setting(84, "camera image height and width, pixels", low=1, high=IMAGE_SIZE_MAX)
    model_seed: int = setting(0, "seeds what robosuite draws once, at build time (the Lift cube's size)", low=0)


@dataclass
class GymHilPickCubeConfig:
    """sim/gym_hil_task.py: gym-hil's Panda pick-cube (LeRobot's HIL-SERL sim task)."""

    blocks: ClassVar[tuple[str, ...]] = ("expert",)

    image_obs: bool = setting(False, "front and wrist cameras instead of the block position in the state")
    image_size: int = setting(128, "camera image height and width, pixels", low=1, high=IMAGE_SIZE_MAX)
    reward_type: str = setting(
        "sparse", "gym-hil's: sparse (1 when lifted 10 cm) | dense (closeness + lift)", choices=("dense", "sparse")
    )
    random_block_position: bool = setting(True, "a random block position at reset (gym-hil's own: fixed at 0.5, 0)")
    max_episode_steps: int = setting(100, f"{TIME_LIMIT} (gym-hil registers 100 at 10 Hz)", low=1)
    control_hz: float = setting(10.0, "control rate, Hz", above=0, high=CONTROL_HZ_MAX)
    ee_step_m: float = setting(0.025, f"end-effector move {STEP}, m", above=0)
    fast_render: bool = setting(True, "cameras without shadows, reflections, skybox or anti-aliasing")
    scale_state: bool = setting(True, "every state entry to about [-1, 1]")
    terminate_on_success: bool = setting(True, "end the episode on success (false: a block pushed out still ends it)")
    gripper: str = setting(
        "absolute",
        "absolute: action = command | discrete: open / stay / close (policy=hybrid_gripper)",
        choices=("absolute", "discrete"),
    )


@dataclass
class MetaWorldConfig:
    """sim/metaworld_tasks.py: Meta-World v3's Sawyer tasks (one, or a group sampled per episode) with instructions."""

    blocks: ClassVar[tuple[str, ...]] = ("expert",)

    task: str = setting(
        "reach-v3", "a Meta-World task (reach-v3), a group (mt10, mt50, easy, medium, hard, very_hard) or a list a,b"
    )
    reward_type: str = setting(
        "sparse", "sparse: 1 on success | dense: Meta-World's own shaping, 0-10 per step", choices=("dense", "sparse")
    )
    max_episode_steps: int = setting(500, f"{TIME_LIMIT} (Meta-World's own limit: 500)", low=1, high=500)
    terminate_on_success: bool = setting(True, "end the episode on success (as Meta-World's evaluation does)")
    goal_observable: bool = setting(True, "the goal's xyz in the state (Meta-World's MT setup; false: zeros, as ML)")
    cameras: tuple[str, ...] = setting((), "cameras in the observation: corner2 (lerobot's view), corner, topview, ...")
    image_size: int = setting(96, "camera image height and width, pixels", low=1, high=IMAGE_SIZE_MAX)


@dataclass
class PointReachConfig:
    """sim/point_reach.py: a point moves to a goal in the plane, no physics."""

    blocks: ClassVar[tuple[str, ...]] = ("expert",)

    max_episode_steps: int = setting(20, TIME_LIMIT, low=1)
    step_size: float = setting(0.2, f"how far the point moves {STEP} (the plane is [-1, 1]^2)", above=0)
    camera: bool = setting(False, "an 8x8 top-view camera image in the observation")
    control_hz: float = setting(10.0, "control rate, Hz", above=0, high=CONTROL_HZ_MAX)


@dataclass
class ArmEnvConfig:
    """hardware/env.py: a real arm (or its MuJoCo twin) behind its driver (`driver`, a plugin spec), its cameras
    (`cameras`: name -> a camera spec) and an optional reach task (`reach`)."""

    blocks: ClassVar[tuple[str, ...]] = ("driver", "cameras", "reach", "expert")

    dry_run: bool = setting(False, "the commands go to the arm's MuJoCo twin (the options: ${hardware.dry_run})")
    twin_clock: str = setting(
        "real",
        "a twin's time: real | virtual (faster than real time, for tests and quick checks)",
        choices=("real", "virtual"),
    )
    control_hz: float = setting(10.0, "control rate, Hz", above=0, high=CONTROL_HZ_MAX)
    max_episode_steps: int = setting(200, TIME_LIMIT, low=1)
    max_ee_step_m: float = setting(0.02, f"end-effector move {STEP}, m", above=0)
    rotation: bool = setting(False, "orientation actions (roll, pitch, yaw); false: the orientation at reset is held")
    max_rot_step_rad: float = setting(0.1, f"end-effector rotation {STEP}, rad", above=0)
    gripper: str = setting(
        "absolute",
        "absolute: action = closing | discrete: open / keep / close | none",
        choices=("absolute", "discrete", "none"),
    )
    ik_recovery_after: int = setting(
        3, "IK failures in a row before the arm steps back toward home in joint space", low=1
    )
    recovery_step_rad: float = setting(0.05, "that joint-space step's size per joint, rad", above=0)
    reset_timeout_s: float = setting(20.0, "the move home must finish within this, s", above=0)
    terminate_on_success: bool = setting(True, "a reach task's success ends the episode")
    reset_mode: str | None = setting(
        "human", RESET_MODE + "; null: the arm homes itself, unchecked", choices=RESET_MODES
    )
    reset_trajectory: str | None = setting(None, RESET_TRAJECTORY)
    reset_tolerance_rad: float = setting(0.05, "reset check: every joint within this of its home pose, rad", above=0)
    reset_person: str = setting("devices", RESET_PERSON, choices=("devices", "sim"))
    reset_wait_s: float | None = setting(None, RESET_WAIT, above=0)
    reset_check: str = setting("state", RESET_CHECK, choices=RESET_CHECKS)
    reset_classifier: str | None = setting(None, RESET_CLASSIFIER)


@dataclass
class ReachConfig:
    """`env.reach` (hardware/env.py's ReachTask): reach a target drawn in a box each episode. The box has no default
    (null is refused): it depends on the arm."""

    low: tuple[float, float, float] = setting(None, "the target box's low corner, m (the arm's base frame)")
    high: tuple[float, float, float] = setting(None, "the target box's high corner, m")
    tolerance_m: float = setting(0.02, "the target counts as reached within this, m", above=0)


@dataclass
class RandomizeConfig:
    """`env.randomize` (sim/randomize.py): [lo, hi] drawn once per episode; a single number is a std or a
    half-width; null or 0 leaves that part nominal."""

    object_size_scale: tuple[float, float] | None = setting(
        None, "the object's size factor [lo, hi] (primitive geoms only: not robosuite's can)", above=0, high=2
    )
    object_mass_scale: tuple[float, float] | None = setting(
        None, "the object's mass factor [lo, hi]", above=0, high=100
    )
    friction_scale: tuple[float, float] | None = setting(
        None, "the object's and fingers' friction factor [lo, hi]", above=0, high=10
    )
    object_xy_offset_m: tuple[float, float] | None = setting(
        None, "half-widths [dx, dy] of an extra shift of the object's start, m", low=0, high=0.3
    )
    light_scale: tuple[float, float] | None = setting(None, "the lights' intensity factor [lo, hi]", above=0, high=10)
    camera_pos_noise_m: float = setting(0.0, "half-width of each camera's position noise, m", low=0, high=0.5)
    camera_fovy_deg: tuple[float, float] | None = setting(
        None, "each camera's vertical field of view [lo, hi], degrees (or camera_fovy_scale)", above=0, high=179
    )
    camera_fovy_scale: tuple[float, float] | None = setting(
        None, "each camera's field-of-view factor [lo, hi] (or camera_fovy_deg)", above=0, high=3
    )
    image_noise_std: float = setting(0.0, "std of the pixel noise, uint8 units", low=0, high=255)
    action_latency_steps: tuple[int, int] | None = setting(
        None, "steps [lo, hi] a command waits before it is applied", low=0
    )
    action_noise_std: float = setting(0.0, "std of the noise on the normalised action", low=0, high=2)
    control_jitter: float = setting(
        0.0, "half-width of a step's relative duration change (share of the step)", low=0, high=0.9
    )


# The first class of a key shows its range where an env has no dataclass (a test's own env); PickCube's allows most.
BLOCKS: dict[str, dict[str | None, type]] = {
    "env": {
        "sim.pick_cube.PickCubeEnv": PickCubeConfig,
        "sim.pick_color.PickColorEnv": PickColorConfig,
        "sim.robosuite_tasks.RobosuiteEnv": RobosuiteConfig,
        "sim.gym_hil_task.GymHilPickCubeEnv": GymHilPickCubeConfig,
        "sim.point_reach.PointReachEnv": PointReachConfig,
        "sim.metaworld_tasks.MetaWorldEnv": MetaWorldConfig,
        "hardware.env.ArmEnv": ArmEnvConfig,
    },
    "env.randomize": {FIXED: RandomizeConfig},
    "env.reach": {FIXED: ReachConfig},
}
