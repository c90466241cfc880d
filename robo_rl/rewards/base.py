"""What every learned reward model is: frames (or pairs of frames) and a task in, progress / progress delta /
success probability out. `RewardShaper` (shaper.py) is the only place these become RL rewards and dones.

A model is saved as a folder: `reward_model.json` (its class as a hydra-style `_target_`, its architecture's
settings, the cameras and instructions it was trained on) and `weights.pt` (a torch state dict, loaded with
`weights_only=True`). `load_model` reads any class back and names what is wrong with a folder that is not one
(missing, another class, another architecture). Folders saved before `_target_` name their class by a `kind`
(`LEGACY_KINDS`).
"""

from __future__ import annotations

import abc
import difflib
import importlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robo_rl.errors import UserError

log = logging.getLogger(__name__)

OUTPUTS = ("progress", "delta", "success_prob")
CONFIG_FILE, WEIGHTS_FILE = "reward_model.json", "weights.pt"


class RewardModelError(UserError, ValueError):
    """A reward model that cannot be loaded or used as asked; the text names the problem."""


@dataclass
class Task:
    """What the robot should do: an instruction, optionally goal images (camera → HxWx3 uint8)."""

    instruction: str = ""
    goal_images: dict[str, np.ndarray] | None = None


@dataclass
class Scores:
    """A model's answer for N frames (or N pairs): each output it supports as a float32 array of N, else None.
    progress: how far along the task, in [0, 1]; delta: signed progress from the first frame of a pair to the second,
    in [-1, 1]; success_prob: the chance the task is done in the frame, in [0, 1]."""

    progress: np.ndarray | None = None
    delta: np.ndarray | None = None
    success_prob: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        for value in (self.progress, self.delta, self.success_prob):
            if value is not None:
                return len(value)
        return 0


class RewardModel(abc.ABC):
    """Frames → scores. `frames` maps camera name → uint8 array (N, H, W, 3); the cameras must be the model's."""

    kind: str = "abstract"  # a short name for messages and reports; the class itself is named by its `_target_`
    provides: tuple[str, ...] = ()

    def __init__(self, cameras: tuple[str, ...], instructions: tuple[str, ...] = ()) -> None:
        self.cameras = tuple(cameras)
        self.instructions = tuple(instructions)  # those it was trained on (empty: any)
        self._warned: set[str] = set()

    @abc.abstractmethod
    def score(self, frames: dict[str, np.ndarray], task: Task, previous: dict[str, np.ndarray] | None = None) -> Scores:
        """Scores for N frames; with `previous` (the same cameras, N frames each), for the pairs previous → frames."""

    def score_episode(self, frames: dict[str, np.ndarray], task: Task) -> Scores:
        """Scores for the T frames of one episode, in order: per frame, and (pairwise models) the delta from each
        frame's predecessor (0 for the first)."""
        return self.score(frames, task)

    # --- checks every model makes ---------------------------------------------------------------------------
    def check_frames(self, frames: dict[str, np.ndarray]) -> int:
        missing = [c for c in self.cameras if c not in frames]
        if missing:
            raise RewardModelError(
                f"{self.kind} reward model needs cameras {list(self.cameras)}; missing {missing} "
                f"(given {sorted(frames)})"
            )
        sizes = {len(frames[c]) for c in self.cameras}
        if len(sizes) != 1:
            raise RewardModelError(f"cameras hold different numbers of frames: {sizes}")
        for c in self.cameras:
            f = frames[c]
            if f.dtype != np.uint8 or f.ndim != 4 or f.shape[-1] != 3:
                raise RewardModelError(f"camera {c}: frames must be uint8 (N, H, W, 3), got {f.dtype} {f.shape}")
        return sizes.pop()

    def check_instruction(self, instruction: str) -> None:
        """An instruction it was not trained on is scored anyway, with a warning naming the nearest trained one."""
        if not self.instructions or instruction in self.instructions or instruction in self._warned:
            return
        self._warned.add(instruction)
        near = difflib.get_close_matches(instruction, self.instructions, n=1, cutoff=0.0)
        log.warning(
            "reward model: instruction %r was not in its training data; the nearest trained one is %r",
            instruction,
            near[0] if near else None,
        )

    def expect_instruction(self, instruction: str) -> None:
        """Score `instruction` without that warning: a deliberate probe (`reward eval`'s wrong instruction)."""
        self._warned.add(instruction)

    # --- saving ---------------------------------------------------------------------------------------------
    def config(self) -> dict:
        """The settings that rebuild this model's architecture (subclasses add theirs)."""
        return {
            "_target_": class_path(type(self)),
            "cameras": list(self.cameras),
            "instructions": list(self.instructions),
        }

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027 - a model without weights has nothing to load
        pass

    def save(self, path: str | Path) -> Path:
        import torch

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), path / WEIGHTS_FILE)
        (path / CONFIG_FILE).write_text(json.dumps(self.config(), indent=1))
        return path

    @classmethod
    def from_config(cls, config: dict) -> RewardModel:
        raise NotImplementedError


# Reward-model folders saved before `_target_` named the class carry a `kind`: this reads them (and a run config's old
# `reward.kind`), so no trained model is lost.
LEGACY_KINDS: dict[str, str] = {
    "classifier": "robo_rl.rewards.classifier.SuccessClassifier",
    "progress": "robo_rl.rewards.progress.ProgressCritic",
}


def class_path(cls: type) -> str:
    """A class's `_target_`: its dotted import path."""
    return f"{cls.__module__}.{cls.__qualname__}"


def shaper_settings(shaper: dict | None, model: RewardModel) -> dict:
    """The shaper's settings with `success_threshold: null` resolved: the model's own threshold where it chose one
    (a classifier's, for its false-positive target), else 0.5."""
    settings = dict(shaper or {})
    if settings.get("success_threshold") is None and getattr(model, "threshold", None) is not None:
        settings["success_threshold"] = float(model.threshold)  # else null: ShaperConfig resolves it
    return settings


def model_class(target: str) -> type[RewardModel]:
    """The `RewardModel` subclass a `_target_` (a dotted class path) names, imported (an old folder's `kind` is read
    through `LEGACY_KINDS`); an unknown one is a RewardModelError naming the nearest known class."""
    path = LEGACY_KINDS.get(target, target)
    module_name, _, name = path.rpartition(".")
    found = None
    if module_name:
        try:
            found = getattr(importlib.import_module(module_name), name, None)
        except ModuleNotFoundError as e:
            if e.name is None or not (module_name == e.name or module_name.startswith(e.name + ".")):
                raise  # the module exists but needs a package that is not installed: that is the error to see
    if isinstance(found, type) and issubclass(found, RewardModel):
        return found
    if found is not None:
        raise RewardModelError(f"'{target}' is not a reward model (a RewardModel subclass)")
    known = _known_targets()
    near = difflib.get_close_matches(target, known, n=1)
    hint = f"; did you mean '{known[near[0]]}'" if near else ""
    raise RewardModelError(
        f"unknown reward model class '{target}'{hint} (a `_target_` names a RewardModel subclass by its dotted path, "
        f"such as {', '.join(LEGACY_KINDS.values())})"
    )


def _known_targets() -> dict[str, str]:
    """Names a user may have meant (class paths, an old folder's kinds, bare class names) → the class path."""
    classes, todo = [], list(RewardModel.__subclasses__())
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo += cls.__subclasses__()
    paths = {*LEGACY_KINDS.values(), *(class_path(c) for c in classes)}
    return {
        **{p.rpartition(".")[2]: p for p in paths},
        **LEGACY_KINDS,
        **{p: p for p in paths},
    }


def load_model(path: str | Path, target: str | None = None) -> RewardModel:
    """A saved reward model; `target` (a class path, when given) must be its class or a base of it. Errors name the
    folder and the problem."""
    import torch

    path = Path(path)
    if not path.exists():
        raise RewardModelError(f"reward model {path} does not exist")
    if not (path / CONFIG_FILE).is_file():
        raise RewardModelError(f"{path} is not a robo_rl reward model (no {CONFIG_FILE})")
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except json.JSONDecodeError as e:
        raise RewardModelError(f"{path / CONFIG_FILE} is not valid JSON ({e.msg})") from None
    named = config.get("_target_", config.get("kind")) if isinstance(config, dict) else None
    if not isinstance(named, str):
        raise RewardModelError(f"{path / CONFIG_FILE} does not name its reward model class (no `_target_`)")
    try:
        cls = model_class(named)
        wanted = model_class(target) if target is not None else RewardModel
    except RewardModelError as e:
        raise RewardModelError(f"{path}: {e}") from None
    if not issubclass(cls, wanted):
        raise RewardModelError(f"{path} holds a '{class_path(cls)}' reward model, not a '{class_path(wanted)}' one")
    model = cls.from_config({k: v for k, v in config.items() if k not in ("_target_", "kind")})
    try:
        state = torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise RewardModelError(f"{path} has no {WEIGHTS_FILE}") from None
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: say which
        raise RewardModelError(f"{path / WEIGHTS_FILE} cannot be read ({type(e).__name__}: {e})") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # another architecture's weights
        first = str(e).strip().splitlines()[0]
        raise RewardModelError(
            f"{path} holds weights of another architecture than its {CONFIG_FILE} says ({first})"
        ) from None
    return model
