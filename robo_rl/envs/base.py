"""`RobotEnv`: the one Gymnasium interface that every simulated task and every robot driver implements.

Observation: ``{"state": float32[D], "images": {camera_name: uint8[H, W, 3]}}`` (``images`` may be empty).
A task with an instruction adds ``"instruction"``: one ``str`` for the whole episode (also ``env.instruction``).
Action: float32 in ``[-1, 1]^A``; the env scales it to physical units.
``terminated`` (a true end, bootstrapping stops) and ``truncated`` (time limit, human abort) stay apart.
Every ``info`` returned by ``step`` carries the keys in ``INFO_KEYS``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# What ended an episode; `None` while it runs. New reasons go at the end: records carry 1 + the index.
ENDED_BY = (
    "env",
    "time_limit",
    "human_success",
    "human_failure",
    "estop",
    "safety",
    "human_rerecord",
    "human_abort",
    "reward_success",
    "reward_stalled",
    "sim_fault",  # the simulator blew up and reset its state (a MuJoCo warning): the step after it is no episode's
)  # new reasons go at the end: the codes are stored

INFO_KEYS = (
    "action_executed",  # the action actually applied, after intervention and safety clipping
    "action_policy",  # what the policy proposed
    "action_base",  # the base policy's action (residual mode), else None
    "intervention",  # bool: this step's action came from the human
    "success",  # ground-truth success where known; eval uses it, never the reward unless configured
    "ended_by",  # one of ENDED_BY, or None while the episode runs
    "safety",  # what the safety layer clipped or refused this step (dict, empty when nothing)
)


class SafetyStop(RuntimeError):
    """The safety layer will not let the robot move on (it stopped and nobody acknowledged, or an e-stop came while
    it waited): the actor ends its run with this reason."""


class RobotEnv(gym.Env):
    """Base class: subclasses set `observation_space`, `action_space`, `control_hz`, `state_names`
    and implement `_reset` and `_step`; this class validates actions and fills the info contract."""

    metadata = {"render_modes": []}
    control_hz: float = 10.0
    state_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()  # per action dimension: x y z roll pitch yaw gripper (teleop maps onto these)
    camera_names: tuple[str, ...] = ()
    max_episode_steps: int = 100
    # steps a robot through its driver (the arm, or its digital twin standing in for it) rather than simulating a
    # task: a robot is one env, run by one actor
    drives_robot: bool = False

    def __init__(self) -> None:
        self._elapsed_steps = 0

    # --- to implement -------------------------------------------------------------------------
    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        raise NotImplementedError

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        """Apply a validated action; return (obs, reward, terminated, info with at least `success`)."""
        raise NotImplementedError

    # --- gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._elapsed_steps = 0
        obs, info = self._reset(self.np_random, options)
        info.setdefault("success", False)
        return obs, info

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        action = check_action(action, self.action_space)
        obs, reward, terminated, info = self._step(action)
        self._elapsed_steps += 1
        at_limit = self._elapsed_steps >= self.max_episode_steps
        truncated = (not terminated) and at_limit
        # a wrapper that overrules `terminated` (a learned reward ignores the simulator's success) ends the episode here
        info["time_limit_reached"] = at_limit
        info.setdefault("action_executed", action)
        info.setdefault("action_policy", action)
        info.setdefault("action_base", None)
        info.setdefault("intervention", False)
        info.setdefault("success", False)
        info.setdefault("safety", {})
        if terminated:
            info.setdefault("ended_by", "env")
        elif truncated:
            info.setdefault("ended_by", "time_limit")
        else:
            info.setdefault("ended_by", None)
        return obs, float(reward), bool(terminated), bool(truncated), info


class RobotWrapper(gym.Wrapper):
    """A wrapper in the actor's chain (robo_rl/envs/wrappers.py): it reads as the env it wraps, so the
    `RobotEnv` attributes (control_hz, state_names, action_names, camera_names, ...) pass through."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.env, name)


ACTION_TOLERANCE = 1e-6  # a normalised action this far past ±1 (float rounding) is clipped, not refused


def check_action(action: Any, space: gym.spaces.Box) -> np.ndarray:
    """Return `action` as float32 of the space's shape, or raise ValueError naming what is wrong."""
    a = np.asarray(action, dtype=np.float32)
    if a.shape != space.shape:
        raise ValueError(f"action has shape {a.shape}, this env expects {space.shape}")
    # one pass for the common case (every step of every env): a NaN makes min and max NaN, which fails the test
    if a.size and not (-1.0 - ACTION_TOLERANCE <= a.min() and a.max() <= 1.0 + ACTION_TOLERANCE):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action contains NaN or inf: {a.tolist()}")
        raise ValueError(f"action out of the normalised range [-1, 1]: {a.tolist()}")
    clipped = np.maximum(a, -1.0)  # a copy: the caller's array is never written
    return np.minimum(clipped, 1.0, out=clipped)


def check_observation(obs: Any, space: gym.spaces.Dict) -> None:
    """Raise ValueError if `obs` breaks the observation contract of `space`."""
    if not isinstance(obs, dict) or "state" not in obs or "images" not in obs:
        raise ValueError("observation must be a dict with keys 'state' and 'images'")
    if not isinstance(obs.get("instruction", ""), str):  # the task's instruction, where it has one
        raise ValueError(f"obs['instruction'] must be a str, got {type(obs['instruction']).__name__}")
    state = obs["state"]
    if not isinstance(state, np.ndarray) or state.dtype != np.float32 or state.shape != space["state"].shape:
        raise ValueError(f"obs['state'] must be float32{list(space['state'].shape)}")
    for name, img_space in space["images"].spaces.items():
        img = obs["images"].get(name)
        if img is None:
            raise ValueError(f"camera '{name}' is missing from obs['images']")
        if img.dtype != np.uint8 or img.shape != img_space.shape:
            raise ValueError(f"image '{name}' must be uint8{list(img_space.shape)}, got {img.dtype}{list(img.shape)}")


def make_observation_space(state_dim: int, cameras: dict[str, tuple[int, int]]) -> gym.spaces.Dict:
    """The observation space of the contract: a state vector and zero or more uint8 RGB cameras."""
    images = {name: gym.spaces.Box(0, 255, (h, w, 3), np.uint8) for name, (h, w) in cameras.items()}
    return gym.spaces.Dict(
        {
            "state": gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32),
            "images": gym.spaces.Dict(images),
        }
    )


DISCRETE_GRIPPER_DEADBAND = 0.5  # a discrete gripper action: below -0.5 open, above 0.5 close, between keep


def gripper_target(mode: str, command: float, present: float) -> float:
    """The absolute gripper command (-1 open .. +1 closed) a gripper action amounts to, for an env whose gripper
    mode is `absolute` (the action itself) or `discrete` (open / close, and between the thresholds `present`, the
    command the gripper holds), as every env with a discrete gripper option reads it."""
    if mode == "discrete":
        return float(np.sign(command)) if abs(command) > DISCRETE_GRIPPER_DEADBAND else float(present)
    return float(command)
