"""What a policy server serves: a frozen base loaded by the existing loaders (policies/bc.py for our MLP, flow and
diffusion checkpoints; policies/lerobot_base.py for a LeRobot pretrained_model folder), with the observation its
checkpoint was made for (a server has no env to read one from), and the checks every `chunk` request passes before
the policy sees it: a state of another size, a missing or extra camera, noise of another shape or a malformed guide
is refused by name, and the server goes on serving.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from policies.base import action_range, state_statistics
from policies.chunking import Guide, chunk_agreeing
from robo_rl.envs.base import make_observation_space

KINDS = ("bc", "lerobot")
DIGEST_CHARS = 12


class RequestError(ValueError):
    """A request the served policy cannot answer; the text names what is wrong with it."""


@dataclass
class ServedPolicy:
    """A base and what it reads: `cameras` name -> (height, width); `state_dim` 0 for a policy that reads no state."""

    base: object
    name: str
    version: str
    state_dim: int
    cameras: dict[str, tuple[int, int]] = field(default_factory=dict)
    task: str | None = None  # the instruction its loader was given, for requests that carry none

    def __post_init__(self) -> None:
        if getattr(self.base, "closed_loop", False):
            raise ValueError(
                f"{self.name} runs closed-loop through its own observation history, which one server cannot keep "
                "for each of its clients: serve a policy that predicts chunks"
            )
        params = inspect.signature(self.base.predict_chunk).parameters
        self.noise_shape = getattr(self.base, "noise_shape", None) if "noise" in params else None
        self.guided = "guide" in params  # steered while it samples; the others' chunks are blended with the guide
        self.action_dim, self.chunk_size = int(self.base.action_dim), int(self.base.chunk_size)

    def info(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The `info` answer: meta and arrays (its training action range and state statistics, where it kept them)."""
        meta = {
            "policy": self.name,
            "version": self.version,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "chunk_size": self.chunk_size,
            "execute_steps": getattr(self.base, "execute_steps", None),
            "cameras": {name: list(hw) for name, hw in self.cameras.items()},
            "noise_shape": None if self.noise_shape is None else [int(n) for n in self.noise_shape],
            "guided": self.guided,
            "task": self.task,
        }
        arrays = {}
        for names, pair in (
            (("action_low", "action_high"), action_range(self.base)),
            (("state_mean", "state_std"), state_statistics(self.base)),
        ):
            if pair is not None:
                arrays.update(zip(names, pair, strict=True))
        return meta, arrays

    def chunk(self, meta: dict, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The chunk [C, A] for one checked request (its arrays copied out of the received frames, which are
        read-only: torch warns on those and a policy may write to its inputs)."""
        arrays = {name: np.array(a) for name, a in arrays.items()}
        obs = {"state": self._state(arrays), "images": self._images(arrays)}
        if meta.get("instruction"):
            obs["instruction"] = meta["instruction"]
        kwargs = {}
        if "noise" in arrays:
            kwargs["noise"] = self._noise(arrays["noise"])
        guide = self._guide(meta, arrays)
        return chunk_agreeing(self.base.predict_chunk, self.guided, obs, guide, self._check, **kwargs)

    def _check(self, chunk: np.ndarray) -> None:
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim or not len(chunk):
            raise RuntimeError(f"the policy returned actions of shape {chunk.shape}, not [chunk, {self.action_dim}]")

    def _state(self, arrays: dict) -> np.ndarray:
        state = arrays.get("state")
        if state is None:
            raise RequestError("the request carries no state")
        if self.state_dim and state.shape != (self.state_dim,):
            raise RequestError(f"the state has {state.shape[0]} entries, the policy reads {self.state_dim}")
        if not np.all(np.isfinite(state)):
            raise RequestError("the state is not finite")
        return state

    def _images(self, arrays: dict) -> dict[str, np.ndarray]:
        images = {name[len("image/") :]: a for name, a in arrays.items() if name.startswith("image/")}
        for name, (h, w) in self.cameras.items():
            if name not in images:
                raise RequestError(f"the policy reads camera '{name}', the request has none")
            if images[name].shape != (h, w, 3):
                raise RequestError(f"camera '{name}' is {list(images[name].shape)}, the policy reads [{h}, {w}, 3]")
        extra = sorted(set(images) - set(self.cameras))
        if extra:
            raise RequestError(f"the request carries camera '{extra[0]}', the policy reads {sorted(self.cameras)}")
        return images

    def _noise(self, noise: np.ndarray) -> np.ndarray:
        if self.noise_shape is None:
            raise RequestError(f"{self.name} takes no initial noise")
        if noise.shape != tuple(self.noise_shape):
            raise RequestError(f"the noise is {list(noise.shape)}, the policy takes {list(self.noise_shape)}")
        if not np.all(np.isfinite(noise)):
            raise RequestError("the noise is not finite")
        return noise

    def _guide(self, meta: dict, arrays: dict) -> Guide | None:
        actions, weights = arrays.get("guide/actions"), arrays.get("guide/weights")
        if actions is None and weights is None:
            return None
        if actions is None or weights is None or "guide_delay" not in meta:
            raise RequestError("a guide needs guide/actions, guide/weights and guide_delay together")
        if not len(actions) or actions.shape[1] != self.action_dim or weights.shape != (len(actions),):
            raise RequestError(
                f"the guide's actions are {list(actions.shape)} and weights {list(weights.shape)}; the policy needs "
                f"[L, {self.action_dim}] and [L] with L >= 1"
            )
        if not (np.all(np.isfinite(actions)) and np.all((weights >= 0) & (weights <= 1))):
            raise RequestError("the guide's actions must be finite and its weights in [0, 1]")
        if meta["guide_delay"] > len(actions):
            raise RequestError(f"the guide's delay {meta['guide_delay']} exceeds its {len(actions)} actions")
        return Guide(np.array(actions), np.array(weights), int(meta["guide_delay"]))


def load_served(kind: str, path: str, device: str = "cpu", task: str | None = None) -> ServedPolicy:
    """A checkpoint as a served policy: `bc` (a `robo-rl bc` MLP, flow or diffusion checkpoint or its run folder) or
    `lerobot` (a pretrained_model folder or a hub id in the local cache); the version is its weights' digest."""
    if kind == "bc":
        from policies.bc import load_bc_base
        from policies.checkpoint import read_bc_checkpoint

        payload = read_bc_checkpoint(path)
        config = payload["config"]
        cameras = {name: (int(h), int(w)) for name, (h, w) in config["cameras"].items()}
        space = make_observation_space(config["state_dim"], cameras)
        base = load_bc_base(path, space, config["action_dim"], device=device, task=task)
        name = f"{config.get('kind', 'mlp')}:{payload['path']}"
        return ServedPolicy(base, name, _digest(Path(payload["path"])), config["state_dim"], cameras, task)
    if kind == "lerobot":
        from policies.lerobot_base import WEIGHTS_FILE, LeRobotBase, resolve_pretrained

        folder = resolve_pretrained(path)
        state_dim, cameras, action_dim = _lerobot_features(folder)
        space = make_observation_space(state_dim, cameras)
        base = LeRobotBase.load(folder, space, action_dim, device=device, task=task)
        return ServedPolicy(base, base.name, _digest(folder / WEIGHTS_FILE), state_dim, cameras, task)
    raise ValueError(f"kind must be one of {', '.join(KINDS)}, got '{kind}'")


def _lerobot_features(folder: Path) -> tuple[int, dict[str, tuple[int, int]], int]:
    """(state size, cameras, action size) a LeRobot policy was made for, read from its config.json's features and
    named as policies/lerobot_base.py maps them onto our observation (observation.images.<camera>,
    observation.image); its loader checks them again against the policy it builds."""
    from policies.lerobot_base import ACTION, CONFIG_FILE, IMAGE_PREFIX, SINGLE_IMAGE, STATE_INPUTS

    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
        features = {**config.get("input_features", {}), ACTION: config["output_features"][ACTION]}
        shapes = {key: tuple(int(n) for n in feature["shape"]) for key, feature in features.items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{folder / CONFIG_FILE} does not name its features ({type(e).__name__}: {e})") from None
    if len(shapes[ACTION]) != 1:
        raise ValueError(f"{folder} predicts '{ACTION}' of shape {shapes[ACTION]}: one vector per step is served")
    state_dims = {shape[0] for key, shape in shapes.items() if key in STATE_INPUTS}
    cameras = {
        "image" if key == SINGLE_IMAGE else key[len(IMAGE_PREFIX) :]: shape[1:]
        for key, shape in shapes.items()
        if key.startswith(IMAGE_PREFIX) or key == SINGLE_IMAGE
    }
    if len(state_dims) > 1:
        raise ValueError(f"{folder}'s state inputs differ in size ({sorted(state_dims)}); our observation has one")
    return (state_dims.pop() if state_dims else 0), cameras, shapes[ACTION][0]


def _digest(path: Path) -> str:
    """The first characters of the file's SHA-256: which weights answered, for the client's records."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()[:DIGEST_CHARS]
