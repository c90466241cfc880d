"""Meta-World v3 (Yu et al. 2019; McLean et al. 2025, "Meta-World+"): its 50 Sawyer tasks behind `RobotEnv`, one task
or a group of them (MT10, MT50, lerobot's difficulty groups), each episode with its task's instruction.

Setup, as the multi-task benchmark evaluates: goals randomised and observed. Meta-World's MT10/MT50 build each task
with ``partially_observable=False`` (``metaworld._MT_OVERRIDE``: "Enables the inclusion of the goal position in the
observation") and draw the object and goal positions anew per episode from the task's ``_random_reset_space``
(``RandomTaskSelectWrapper`` over 50 variations drawn from that box); its evaluation (``metaworld.evaluation``) runs
50 episodes per task of at most ``max_path_length`` = 500 steps and counts one a success when ``info["success"]``
comes up, ending it there. We draw from the same box per episode, seeded, as lerobot's integration does
(``seeded_rand_vec``, the setup of the SmolVLA paper's Meta-World table), instead of MT's 50 pre-drawn variations:
building those costs 3 s per task here (50 resets), 2.5 min for MT50. A hidden goal (Meta-World's ML benchmarks,
``goal_observable=False``) zeroes the last three state entries, as Meta-World does; the camera still sees it where
the task shows it (a button, a drawer; reach's goal is not drawn).

State: Meta-World's own 39-d observation: hand xyz, gripper opening, two objects' position and quaternion (w, x, y,
z; zero-padded), the same 18 for the previous step, then the goal xyz. Action: Meta-World's 4-d ``[dx, dy, dz,
gripper]`` in [-1, 1] (the hand's mocap target moves 1 cm per unit per step; gripper +1 closes), 80 Hz (frame_skip
5 x 2.5 ms). Success: Meta-World's ``info["success"]``. Reward: ``sparse`` 1 on success (what a robot has) or
``dense`` Meta-World's own v2 shaping (0-10 per step).

Cameras: rendered by robo_rl's fast-render preset (robo_rl/envs/render.py) on the task's model at ``image_size``,
upright (Meta-World's corner cameras render upside down: turned 180 degrees, as lerobot does for corner2);
``corner2`` sits where lerobot moves it (lerobot/envs/metaworld.py), so frames resemble lerobot's Meta-World data.

Instructions and difficulty groups: lerobot's ``lerobot/envs/metaworld_config.json``, read where lerobot installed
it. That table gives push-v3 and push-back-v3 the same instruction ("Push the puck to a goal"; no other two of the 50
share one): a language-conditioned policy tells those two apart only by the state (the goal), and the run's task
table has one entry for both. Seeding: the episode's generator picks the task (in a group) and seeds Meta-World's own
generator, which draws the positions: the same ``reset(seed=...)`` gives the same episode.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import pickle
import sys
from functools import cache
from pathlib import Path

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless Linux has no GLFW window; EGL renders offscreen

import gymnasium as gym
import numpy as np

from robo_rl.envs import RobotEnv, make_observation_space
from robo_rl.envs.render import fast_renderer, render_cameras
from robo_rl.errors import UserError

MAX_PATH_LENGTH = 500  # Meta-World's max_path_length: its step refuses to go past it
GROUPS = ("mt10", "mt50", "easy", "medium", "hard", "very_hard")
UPSIDE_DOWN_CAMERAS = ("corner", "corner2", "corner3")
LEROBOT_CORNER2_POS = (0.75, 0.075, 0.7)  # lerobot/envs/metaworld.py moves corner2 here
_OBJECT = ("x", "y", "z", "qw", "qx", "qy", "qz")
_FRAME = ("hand_x", "hand_y", "hand_z", "gripper_opening", *(f"obj{k}_{a}" for k in range(2) for a in _OBJECT))
STATE_NAMES = (*_FRAME, *(f"prev_{n}" for n in _FRAME), "goal_x", "goal_y", "goal_z")


def _metaworld():
    try:
        import metaworld
    except ImportError:
        raise UserError("env=metaworld needs Meta-World: uv sync --extra metaworld") from None
    return metaworld


@cache
def lerobot_metaworld_config() -> dict:
    """lerobot's ``envs/metaworld_config.json`` (instructions, difficulty groups), read without importing lerobot."""
    spec = importlib.util.find_spec("lerobot")
    path = Path(next(iter(spec.submodule_search_locations))) / "envs" / "metaworld_config.json" if spec else None
    if path is None or not path.is_file():
        raise UserError("lerobot's envs/metaworld_config.json (Meta-World's instructions) is not installed")
    return json.loads(path.read_text())


def group_tasks() -> dict[str, tuple[str, ...]]:
    """Each group's task names: Meta-World's MT10 and MT50, and lerobot's difficulty groups."""
    from metaworld.env_dict import MT10_V3, MT50_V3

    groups = {"mt10": tuple(MT10_V3), "mt50": tuple(MT50_V3)}
    groups |= {g: tuple(t) for g, t in lerobot_metaworld_config()["DIFFICULTY_TO_TASKS"].items()}
    return groups


def resolve_tasks(task: str) -> tuple[str, ...]:
    """The Meta-World tasks `task` names: one task (``reach-v3`` or ``reach``), a group, or a comma-separated list;
    an unknown name is refused with the closest ones."""
    _metaworld()
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    groups, names = group_tasks(), []
    for part in (p.strip() for p in str(task).split(",")):
        if part in groups:
            names += groups[part]
        elif part in ALL_V3_ENVIRONMENTS or f"{part}-v3" in ALL_V3_ENVIRONMENTS:
            names.append(part if part in ALL_V3_ENVIRONMENTS else f"{part}-v3")
        else:
            known = {**{n: n for n in ALL_V3_ENVIRONMENTS}, **{n.removesuffix("-v3"): n for n in ALL_V3_ENVIRONMENTS}}
            known |= {g: g for g in groups}
            close = dict.fromkeys(known[c] for c in difflib.get_close_matches(part, known, n=6, cutoff=0.6))
            close = list(close)[:3]
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UserError(
                f"unknown Meta-World task {part!r}{hint} (a task such as 'reach-v3', a group: {', '.join(GROUPS)}, "
                "or a comma-separated list)"
            )
    return tuple(dict.fromkeys(names))  # each task once, in the order named


class MetaWorldEnv(RobotEnv):
    """Meta-World `task` (one, a group, or a list: one sampled per episode) as a `RobotEnv` (module docstring).

    `tasks` and `instructions` list what it can draw, in order; `task_name` and `instruction` are this episode's;
    ``reset(options={"task": name})`` picks one of `tasks` (per-task evaluation), and reset's info names it."""

    def __init__(
        self,
        task: str = "reach-v3",
        reward_type: str = "sparse",
        max_episode_steps: int = MAX_PATH_LENGTH,
        terminate_on_success: bool = True,
        goal_observable: bool = True,
        cameras: list[str] | tuple[str, ...] = (),
        image_size: int = 96,
    ) -> None:
        super().__init__()
        if reward_type not in ("sparse", "dense"):
            raise UserError(f"reward_type must be 'sparse' or 'dense', got {reward_type!r}")
        if not 1 <= max_episode_steps <= MAX_PATH_LENGTH:
            raise UserError(
                f"max_episode_steps must be in [1, {MAX_PATH_LENGTH}] (Meta-World's limit), got {max_episode_steps}"
            )
        if image_size < 1:
            raise UserError(f"image_size must be a positive number of pixels, got {image_size}")
        self.tasks = resolve_tasks(task)
        self.task = task
        descriptions = lerobot_metaworld_config()["TASK_DESCRIPTIONS"]
        self.instructions = tuple(descriptions[t] for t in self.tasks)  # per task of `tasks`, in that order
        self.reward_type, self.terminate_on_success = reward_type, bool(terminate_on_success)
        self.goal_observable = bool(goal_observable)
        self.max_episode_steps = int(max_episode_steps)
        self._envs: dict = {}  # Meta-World env per task, built when first drawn
        self._renderers: dict = {}
        first = self._benchmark_env(self.tasks[0])
        known = [first.model.camera(i).name for i in range(first.model.ncam)]
        if set(cameras) - set(known):
            raise UserError(f"unknown cameras {sorted(set(cameras) - set(known))}; Meta-World's are {known}")
        self.camera_names, self.image_size = tuple(cameras), int(image_size)
        self.control_hz = 1.0 / (first.model.opt.timestep * first.frame_skip)
        self.state_names = STATE_NAMES
        self.action_names = ("x", "y", "z", "gripper")
        self.observation_space = make_observation_space(
            len(STATE_NAMES), {c: (self.image_size, self.image_size) for c in self.camera_names}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.task_name: str | None = None  # this episode's task, after reset
        self.instruction: str | None = None
        self.benchmark_observation: np.ndarray | None = None  # Meta-World's own 39-d, goal always in (experts read it)

    def _benchmark_env(self, name: str):
        """Meta-World's env for task `name`, its positions drawn per reset from Meta-World's own seeded generator."""
        if name not in self._envs:
            metaworld = _metaworld()
            cls = metaworld.env_dict.ALL_V3_ENVIRONMENTS[name]
            env = cls()
            # the task's first goal (never used: drawn anew each reset below); the goal always in Meta-World's obs
            space = env._random_reset_space
            data = {"rand_vec": (space.low + space.high) / 2, "env_cls": cls, "partially_observable": False}
            env.set_task(metaworld.types.Task(env_name=name, data=pickle.dumps(data)))  # in-process, never sent
            env._freeze_rand_vec, env.seeded_rand_vec = False, True  # as lerobot: reset draws from env.np_random
            camera = env.model.camera("corner2").id
            env.model.cam_pos[camera] = LEROBOT_CORNER2_POS
            self._envs[name] = env
        return self._envs[name]

    # --- RobotEnv -----------------------------------------------------------------------------
    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        name = (options or {}).get("task")
        if name is None:
            name = self.tasks[int(rng.integers(len(self.tasks)))]
        elif name not in self.tasks:
            raise UserError(f"reset(options={{'task': {name!r}}}): this env's tasks are {list(self.tasks)}")
        env = self._benchmark_env(name)
        env.seed(int(rng.integers(2**31)))
        raw, _ = env.reset()
        self.task_name, self.instruction = name, self.instructions[self.tasks.index(name)]
        return self._observation(raw), {"success": False, "task": name}

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        raw, reward, _, _, info = self._envs[self.task_name].step(action)
        success = bool(info["success"])
        reward = float(success) if self.reward_type == "sparse" else float(reward)
        return self._observation(raw), reward, success and self.terminate_on_success, {"success": success}

    def _observation(self, raw: np.ndarray) -> dict:
        self.benchmark_observation = np.array(raw, np.float64)
        state = raw.astype(np.float32)
        if not self.goal_observable:
            state[-3:] = 0.0  # as Meta-World's partially observable tasks write it
        return {"state": state, "images": self._render(), "instruction": self.instruction}

    def _render(self) -> dict[str, np.ndarray]:
        if not self.camera_names:
            return {}
        env = self._envs[self.task_name]
        if self.task_name not in self._renderers:  # one per task: a renderer holds its model's meshes and textures
            self._renderers[self.task_name] = fast_renderer(env.model, self.image_size, self.image_size)
        images = render_cameras(self._renderers[self.task_name], env.data, self.camera_names)
        return {c: np.ascontiguousarray(im[::-1, ::-1]) if c in UPSIDE_DOWN_CAMERAS else im for c, im in images.items()}

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
        for env in self._envs.values():
            env.close()
        self._envs.clear()
