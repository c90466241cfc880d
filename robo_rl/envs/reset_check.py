"""The camera reset check (`env.reset_check=camera|both`, robo_rl/envs/resets.py) and the labelled frames it learns
from.

On a robot nothing but the cameras sees where the cube lies, so "is the scene as an episode should start?" becomes a
question for a frame classifier: a small CNN per camera trained from a few labelled frames
(robo_rl/rewards/reset_classifier.py, the success classifier with "ready" as its positive class). Its threshold is
set so that a scene that is not ready is seldom called ready: that error starts an episode from a wrong scene, while
the other one, a ready scene called not ready, only calls a person for nothing.

This room sits below the rewards room (pyproject.toml's layers), so the check finds its classifier the way every
plugin is found: by the `_target_` its model folder's reward_model.json names. A class says it can be a reset check
by providing `open_reset_check(folder)`, which returns an object with `cameras`, `threshold` and
`ready_prob(images) -> float` (camera → uint8 [H, W, 3], the task's frames now).

Labelled frames (`ResetFrames`) are saved as one .npz, read without pickle: `image/<camera>` uint8 [N, H, W, 3],
`ready` bool [N], `scene` int [N] (the frames of one scene look alike, so the classifier's held-out split keeps a
scene on one side), `problem` (what the task's own check found; empty when ready) and `version`.
`label_reset_frames` makes them in a simulator, labelled by the task's own check: per scene, the env's own placement
(as a person resetting by hand leaves it), the scene as an episode or a failed reset leaves it (the task's
`disturb_scene(rng)` where it has one, else random actions), then the same scene after the task's `scripted_reset()`.
On a robot a person labels them (`label_by_person`): they set the scene and press success (ready) or failure (not
ready) on a device, and the cameras' frames at each press are kept.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

FRAMES_VERSION = 1  # the labelled-frames file's schema version
MODEL_FILE = "reward_model.json"  # what a model folder names its class in (robo_rl/rewards/base.py)
TASK_METHODS = ("scripted_reset", "reset_problem", "camera_frames")  # what auto-labelling asks of a task
PERSON_POLL_S = 0.05  # how often a labelling person's device is read
LABELLED_BY_PERSON = "a person labelled the scene not ready"  # the problem a not-ready press records


@dataclasses.dataclass
class ResetFrames:
    """Frames of scenes, each labelled ready or not: `images` camera → uint8 [N, H, W, 3], `ready` bool [N], `scene`
    int [N] (which scene each frame shows), `problem` [N] (the check's words, "" when ready)."""

    images: dict[str, np.ndarray]
    ready: np.ndarray
    scene: np.ndarray
    problem: np.ndarray

    def __post_init__(self) -> None:
        self.ready = np.asarray(self.ready, bool).reshape(-1)
        n = len(self.ready)
        self.scene = np.asarray(self.scene, np.int64).reshape(-1)
        self.problem = np.asarray(self.problem, str).reshape(-1)
        self.images = {c: np.asarray(v) for c, v in self.images.items()}
        if not self.images:
            raise ValueError("labelled reset frames need at least one camera")
        for cam, frames in self.images.items():
            if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) != n:
                raise ValueError(
                    f"camera {cam}: {n} uint8 frames (N, H, W, 3) wanted, got {frames.dtype} {frames.shape}"
                )
        if len(self.scene) != n or len(self.problem) != n:
            raise ValueError(f"{n} labels, but {len(self.scene)} scene ids and {len(self.problem)} problems")

    def __len__(self) -> int:
        return len(self.ready)

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self.images)

    def take(self, index) -> ResetFrames:
        """The frames at `index` (a boolean mask or integer indices)."""
        images = {c: v[index] for c, v in self.images.items()}
        return ResetFrames(images, self.ready[index], self.scene[index], self.problem[index])

    @staticmethod
    def concat(parts: list[ResetFrames]) -> ResetFrames:
        """Several sets as one; each set's scene ids are shifted past the previous ones (two files' scene 0 differ)."""
        cameras = parts[0].cameras
        for i, part in enumerate(parts[1:], 1):
            if part.cameras != cameras:
                raise ValueError(f"labelled frames set {i} has cameras {list(part.cameras)}, set 0 {list(cameras)}")
        offsets = np.cumsum([0] + [int(p.scene.max(initial=-1)) + 1 for p in parts[:-1]])
        return ResetFrames(
            {c: np.concatenate([p.images[c] for p in parts]) for c in cameras},
            np.concatenate([p.ready for p in parts]),
            np.concatenate([p.scene + o for p, o in zip(parts, offsets, strict=True)]),
            np.concatenate([p.problem for p in parts]),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f"image/{c}": v for c, v in self.images.items()}
        with path.open("wb") as f:  # a file object: np.savez would add .npz to a name without it
            labels = {"ready": self.ready, "scene": self.scene, "problem": self.problem}
            np.savez_compressed(f, version=FRAMES_VERSION, **labels, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> ResetFrames:
        """A labelled-frames file, refused in one line if it is missing or is not one."""
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file (robo-rl reset-check label writes one)") from None
        except (OSError, ValueError) as e:
            raise ValueError(f"{path} is not a labelled-frames file ({e})") from None
        if int(data.get("version", -1)) != FRAMES_VERSION or "ready" not in data:
            raise ValueError(f"{path}: not a version-{FRAMES_VERSION} labelled-frames file (robo-rl reset-check label)")
        images = {k[6:]: v for k, v in data.items() if k.startswith("image/")}
        try:
            return cls(images, data["ready"], data["scene"], data["problem"])
        except (KeyError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None


# --- the check ------------------------------------------------------------------------------------


class CameraCheck:
    """The classifier's answer as the reset check's: None (ready), or a problem naming the classifier and its
    P(ready); `last_prob` keeps the newest answer (the reset's info carries it)."""

    def __init__(self, folder: str, classifier) -> None:
        self.folder, self.classifier = str(folder), classifier
        self.last_prob: float | None = None

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self.classifier.cameras)

    def problem(self, images: dict[str, np.ndarray]) -> str | None:
        prob = float(self.classifier.ready_prob(images))
        self.last_prob = round(prob, 4)
        threshold = float(self.classifier.threshold)
        if prob > threshold:
            return None
        return f"the reset classifier {self.folder} sees a scene not ready (P(ready) {prob:.2f} ≤ {threshold:.2f})"


def load_camera_check(folder: str | Path, task) -> CameraCheck:
    """The check `folder`'s classifier makes on `task`'s cameras; refused in one line when the folder is not a reset
    classifier or the task lacks a camera it needs."""
    where = f"env.reset_classifier={folder}"
    try:
        target = json.loads((Path(folder) / MODEL_FILE).read_text())["_target_"]
    except FileNotFoundError:
        raise ValueError(f"{where}: no model folder there (robo-rl reset-check train writes one)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}: its {MODEL_FILE} does not name a class ({type(e).__name__}: {e})") from None
    from hydra.utils import get_class

    try:
        cls = get_class(str(target))
    except Exception as e:  # noqa: BLE001 - hydra raises its own kinds for a module or a name that is not there
        raise ValueError(f"{where}: its class {target} cannot be imported ({e})") from None
    if not callable(getattr(cls, "open_reset_check", None)):
        raise ValueError(
            f"{where} holds a {cls.__name__}, not a reset classifier (robo-rl reset-check train writes one)"
        )
    if not callable(getattr(task, "camera_frames", None)):
        raise ValueError(f"env.reset_check: {type(task).__name__} has no camera_frames() (a task adds its own)")
    classifier = cls.open_reset_check(folder)
    have = tuple(getattr(task, "camera_names", ()))
    missing = [c for c in classifier.cameras if c not in have]
    if missing:
        raise ValueError(
            f"{where} needs cameras {list(classifier.cameras)}; this env has {list(have)}, not {missing} (env.cameras)"
        )
    return CameraCheck(str(folder), classifier)


# --- frames labelled by a simulator's own check -------------------------------------------------


def label_reset_frames(env, scenes: int, seed: int = 0, random_steps: int = 20, progress: bool = False) -> ResetFrames:
    """3 × `scenes` frames of `env`'s cameras, each labelled by the task's own check: per scene the env's placement
    (seed `seed + i`: a ready scene wherever in its region the env puts the cube, not only where the scripted reset
    does), the scene disturbed (`disturb_scene(rng)`, else 1..`random_steps` random actions), then after
    `scripted_reset()`. For a simulator, where the task's check sees the true state."""
    task = env.unwrapped
    missing = [m for m in TASK_METHODS if not callable(getattr(task, m, None))]
    if missing:
        raise ValueError(f"{type(task).__name__} cannot label reset frames: it has no {', '.join(missing)}()")
    if not task.camera_names:
        raise ValueError(f"{type(task).__name__} has no cameras to label (env.cameras)")
    if scenes < 1:
        raise ValueError(f"scenes={scenes}: label at least one scene")
    settings = getattr(task, "reset_settings", None)
    tolerance = settings.tolerance if settings is not None else 0.03
    rng, rows = np.random.default_rng(seed), []
    from tqdm import tqdm

    for i in tqdm(range(scenes), desc="scenes", unit="scene", disable=not progress):
        task.reset(seed=seed + i)
        rows.append((task.camera_frames(), task.reset_problem(tolerance), i))
        if callable(getattr(task, "disturb_scene", None)):
            task.disturb_scene(rng)
        else:
            for _ in range(int(rng.integers(1, random_steps + 1))):
                _, _, terminated, truncated, _ = task.step(
                    rng.uniform(-1, 1, task.action_space.shape).astype(np.float32)
                )
                if terminated or truncated:
                    break
        rows.append((task.camera_frames(), task.reset_problem(tolerance), i))
        task.scripted_reset()
        rows.append((task.camera_frames(), task.reset_problem(tolerance), i))
    return ResetFrames(
        {c: np.stack([images[c] for images, _, _ in rows]) for c in task.camera_names},
        [problem is None for _, problem, _ in rows],
        [i for _, _, i in rows],
        [problem or "" for _, problem, _ in rows],
    )


def label_by_person(task, read_events: Callable[[], set], frames: int, say=print) -> ResetFrames:
    """Up to `frames` frames of `task`'s cameras labelled by a person at the robot: they set the scene (ready as an
    episode should start, or not, as episodes and failed resets leave it) and press `success` for ready or `failure`
    for not ready; each press keeps the frames of that moment as a scene of its own (so change the scene between two
    presses). `terminate_episode` (abort) ends early with what was kept. `read_events()` returns the device's events."""
    if not task.camera_names or not callable(getattr(task, "camera_frames", None)):
        raise ValueError(f"{type(task).__name__} has no cameras to label (env.cameras)")
    say(f"labelling up to {frames} scenes: set the scene, press success if it is ready, failure if not; abort ends")
    rows = []
    while len(rows) < frames:
        events = set(read_events())
        if "terminate_episode" in events:
            break
        if not events & {"success", "failure"}:
            time.sleep(PERSON_POLL_S)
            continue
        ready = "success" in events
        rows.append((task.camera_frames(), ready))
        say(f"{len(rows)}/{frames}: {'ready' if ready else 'not ready'} ({sum(r for _, r in rows)} ready so far)")
    if not rows:
        raise ValueError("no scene was labelled (success: ready, failure: not ready)")
    return ResetFrames(
        {c: np.stack([images[c] for images, _ in rows]) for c in task.camera_names},
        [ready for _, ready in rows],
        np.arange(len(rows)),
        ["" if ready else LABELLED_BY_PERSON for _, ready in rows],
    )
