"""The actor's env wrappers (`human`, `reward` and its `reward.shaper`, `safety` and its `safety.workspace`): one typed
field per setting, with its default, range and meaning, the only place they are written. Each block is keyed by its
wrapper's `_target_` (a string: the core never imports `hardware`). The options in `launch/conf/{human,reward,safety}/`
hold their `_target_`, their devices and what they differ in; their `none` options stay empty (no wrapper). The
wrappers' keyword defaults are read from these dataclasses, for code that builds a wrapper in Python.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import ClassVar

from robo_rl.configs.typed import FIXED, block_problem, setting

INTERVENTION = "robo_rl.teleop.intervention.InterventionWrapper"
REWARD = "robo_rl.rewards.wrapper.RewardWrapper"
SAFETY = "hardware.safety.SafetyWrapper"
INTERVENTION_REWARD = "robo_rl.rewards.intervention.InterventionReward"

# a toggle or held button | device motion | either | pause, sync the leader, correct (robo_rl/teleop/dagger.py)
TAKEOVER = ("explicit", "implicit", "both", "dagger")
FALLBACKS = ("env", "zero")  # the env's own reward | none, while no fresh score exists
MANDATORY = "???"  # OmegaConf's mark of a value the run must give (a config that lacks it is refused)
EVEN_ODDS = 0.5  # the success threshold of a model that chose none


@dataclass
class InterventionConfig:
    """`human`: teleop devices arbitrated against the policy (robo_rl/teleop/intervention.py)."""

    blocks: ClassVar[tuple[str, ...]] = ("devices",)  # each device's spec (`_target_` and its own arguments)

    takeover: str = setting(
        "both",
        "how a device takes control: explicit (a toggle or a held button), implicit (device motion), both, or "
        "dagger (pause, a leader synced to the robot, then the correction)",
        choices=TAKEOVER,
    )
    implicit_threshold: float = setting(
        0.1, "device motion (max |axis|) above which implicit takeover happens", low=0, high=1
    )
    priority: tuple[str, ...] | None = setting(
        None, "device names, first wins when two claim control (null: the order of `devices`)"
    )
    handback_steps: int = setting(
        3, "steps over which the command ramps from the human's last action back to the policy's", low=0
    )
    success_reward: float | None = setting(1.0, "reward of a step the human labels a success (null: the env's reward)")
    dagger_commander: str | None = setting(
        None, "takeover=dagger: the device that drives corrections, a leader arm (null: the device that took over)"
    )
    dagger_sync_tolerance_rad: float = setting(
        0.05, "takeover=dagger: a leader's joints within this of the robot's end the sync, rad", above=0
    )
    dagger_sync_speed_rad_s: float = setting(
        1.0, "takeover=dagger: the fastest a leader is driven to the robot's pose, rad/s", above=0
    )
    dagger_sync_timeout_s: float = setting(
        10.0, "takeover=dagger: a leader not synced by then leaves the robot paused, seconds", above=0
    )


@dataclass
class RewardConfig:
    """`reward`: a saved reward model scores the cameras, the shaper turns its scores into rewards and dones
    (robo_rl/rewards/wrapper.py)."""

    blocks: ClassVar[tuple[str, ...]] = ("shaper",)  # reward.shaper: ShaperConfig

    model: str = setting(
        MANDATORY, "a saved reward model folder (robo-rl reward train), or tcp://host:port of a critic"
    )
    model_target: str | None = setting(
        None, "the reward model's class (a dotted path), checked against the saved folder's _target_ (null: unchecked)"
    )
    where: str = setting(
        "actor",
        "where the model scores: the actor (a wrapper: rewards and dones) or the learner (at ingest: rewards only)",
        choices=("actor", "learner"),
    )
    instruction: str | None = setting(None, "the task's instruction (null: the env's task_description)")
    every: int = setting(1, "score every this many steps", low=1)
    asynchronous: bool = setting(True, "score on a worker thread: the control loop never waits for the model")
    max_staleness_steps: int = setting(3, "a score older than this many steps is not used: the fallback is", low=0)
    fallback: str = setting("env", "the reward while no fresh score exists: the env's own, or zero", choices=FALLBACKS)
    env_terminates: bool = setting(False, "the env's own success check ends episodes (a simulator's ground truth)")
    cameras: tuple[str, ...] | None = setting(
        None, "a remote critic's cameras, to start while it is down (null: ask it)"
    )
    timeout_s: float = setting(0.5, "how long to wait for a remote critic's answer, seconds", above=0)
    curve_keys_dir: str | None = setting(None, "CURVE keys for a remote critic off loopback (null: none)")
    key_name: str = setting("actor-0", "this actor's CURVE key name")
    kind: str | None = setting(None, "a saved run's older spelling of model_target", choices=("classifier", "progress"))


@dataclass
class InterventionRewardConfig:
    """`reward=intervention` (RLIF): the only reward is a human's takeover (robo_rl/rewards/intervention.py)."""

    takeover_reward: float = setting(-1.0, "reward on the step a human takes over (a penalty)", below=0)
    step_cost: float = setting(0.0, "paid on every step as a reward of -step_cost (0: none)", low=0)
    end_on_takeover: bool = setting(
        False, "a takeover ends the episode (terminated, ended_by human_failure); false: the correction goes on in it"
    )
    penalize: str = setting(
        "rejected",
        "the action a takeover's penalty falls on: the policy's, which the person stepped in against (a transition "
        "that ends there, as RLIF labels it), or the executed one (the person's first correction)",
        choices=("rejected", "executed"),
    )


@dataclass
class ShaperConfig:
    """`reward.shaper`: potential-based shaping, debounced success and early ends (robo_rl/rewards/shaper.py)."""

    gamma: float = setting(0.99, "the RL discount in the shaping term gamma * Φ' - Φ", above=0, high=1)
    shaping_scale: float = setting(0.5, "weight of the shaping term (0: the bonus only)", low=0)
    success_bonus: float = setting(
        1.0, "reward on the step success is declared, once; must exceed shaping_scale * (1 + gamma)", low=0
    )
    success_threshold: float | None = setting(
        None, "success_prob at or above this counts as a positive step (null: the model's own, else 0.5)", low=0, high=1
    )
    debounce_k: int = setting(3, "consecutive positive steps that declare success (on the k-th)", low=1)
    stagnation_steps: int = setting(
        0, "steps without Φ improving by more than stagnation_eps that end an episode (0: never)", low=0
    )
    stagnation_eps: float = setting(0.01, "the improvement in Φ that resets the stagnation count", low=0)
    regression_drop: float = setting(0.0, "Φ falling this far below its best ends an episode (0: never)", low=0)
    clip: float = setting(1.0, "bound of one step's shaping term, before the bonus is added", above=0)
    terminate_on_success: bool = setting(True, "a model's or simulator's success ends the episode (a human's always)")
    use_sim_success: bool = setting(False, "the env's ground-truth success decides, not the model")

    def __post_init__(self) -> None:
        text = block_problem("reward.shaper", type(self), dataclasses.asdict(self))
        if text:
            raise ValueError(text)
        bound = self.shaping_scale * (1 + self.gamma)
        if not self.success_bonus > bound:
            raise ValueError(
                f"success_bonus {self.success_bonus} must exceed shaping_scale * (1 + gamma) = {bound:g} "
                f"(shaping_scale {self.shaping_scale}, gamma {self.gamma}), or shaping can pay more than success"
            )
        if self.success_threshold is None:
            self.success_threshold = EVEN_ODDS

    @classmethod
    def from_dict(cls, values: dict) -> ShaperConfig:
        """Built from a config block; a key it has no field for is refused by name."""
        names = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in names:
                near = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {near[0]!r}" if near else ""
                raise ValueError(f"unknown reward.shaper setting '{key}'{hint}")
        return cls(**values)


@dataclass
class SafetyConfig:
    """`safety`: the layer between every command and an arm's driver, the same on a twin and on metal
    (hardware/safety.py)."""

    blocks: ClassVar[tuple[str, ...]] = ("workspace",)  # safety.workspace: WorkspaceBox, or null (no box)

    max_step_m: float | None = setting(
        None, "end-effector translation per step, m (null: the speed limit alone)", above=0
    )
    max_ee_speed_m_s: float | None = setting(
        0.25, "end-effector speed limit, m/s: max_ee_speed_m_s / env.control_hz per step (null: none)", above=0
    )
    max_rot_step_rad: float | None = setting(
        None, "end-effector rotation per step, rad (envs with rotation actions; null: none)", above=0
    )
    joint_margin_rad: float = setting(0.05, "joint targets stay this far inside the model's joint limits, rad", low=0)
    max_joint_speed_rad_s: float | None = setting(
        1.5, "joint speed limit, rad/s (scaled as a whole: the path keeps its direction; null: none)", above=0
    )
    effort_limit: float | None = setting(
        None,
        "external force (N) or motor load (fraction) that stops the arm (null: the driver's, 20 N on Franka/UR, "
        "0.8 of the motor limit on SO-101)",
        above=0,
    )
    watchdog_s: float | None = setting(
        0.5,
        "no command for this long (a stalled actor): the arm holds its position, seconds (null: no watchdog)",
        above=0,
    )
    ack_timeout_s: float | None = setting(
        None, "after a stop, the actor ends if nobody acknowledges within this, seconds (null: it waits)", above=0
    )


@dataclass
class WorkspaceBox:
    """`safety.workspace`: the box the tool stays in, in the arm's base frame (robo-rl calibrate records one)."""

    low: tuple[float, float, float] = setting(MANDATORY, "the workspace box's low corner [x, y, z], m")
    high: tuple[float, float, float] = setting(MANDATORY, "the workspace box's high corner [x, y, z], m")


BLOCKS: dict[str, dict[str | None, type]] = {
    "human": {INTERVENTION: InterventionConfig},
    "reward": {REWARD: RewardConfig, INTERVENTION_REWARD: InterventionRewardConfig},
    "reward.shaper": {FIXED: ShaperConfig},
    "safety": {SAFETY: SafetyConfig},
    "safety.workspace": {FIXED: WorkspaceBox},
}
