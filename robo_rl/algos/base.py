"""The interface every learner algorithm implements; the learner loop knows nothing else about it.

An algorithm is chosen by the `_target_` of `launch/conf/algo/<name>.yaml`: a builder called with the acting
policy, the observation space, the action dimension, the env's state names and the torch device, plus the
YAML's own keys. It owns its networks and optimisers, says what its batches need (`BatchSpec`), updates from
them, hands over the acting policy's *trainable* weights for actors (frozen parts are built by each actor from
the same config and never sent), and saves and restores its whole state.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from policies.augment import shift_images
from policies.encoders import PreparedImages, frozen_backbones

AUGMENTATIONS = (None, "none", "random_shift")
# predictions kept per algorithm (a residual's b' ~100 bytes, PA-RL's recorded candidates ~1 KB): a run's time-limit
# ends for hundreds of thousands of episodes
PREDICTIONS_KEPT_MAX = 200_000


def observation_key(obs: dict) -> str:
    """A digest of one contract observation (state, each camera's pixels, the instruction): equal observations,
    equal keys."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(obs["state"]).tobytes())
    for name in sorted(obs["images"]):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(obs["images"][name]).tobytes())
    digest.update(str(obs.get("instruction", "")).encode())
    return digest.hexdigest()


class KeptPredictions:
    """A frozen base's predictions at observations a learner asks about again and again (a time-limit end, whose
    next observation no decision followed and a replay row is sampled many times): each made once and kept, the
    oldest dropped past `limit`. Saved with the checkpoint, so a resumed run reads the same values as one never
    stopped (the base is frozen, so a kept prediction stays the base's)."""

    def __init__(self, limit: int = PREDICTIONS_KEPT_MAX) -> None:
        self.kept: dict[str, np.ndarray] = {}  # observation key -> the prediction
        self.limit = limit

    def __len__(self) -> int:
        return len(self.kept)

    def keys(self):
        return self.kept.keys()

    def get(self, obs: dict, predict: Callable[[dict], object]) -> np.ndarray:
        """The kept prediction at `obs` (one contract observation), `predict(obs)` made and kept the first time."""
        key = observation_key(obs)
        if key not in self.kept:
            if len(self.kept) >= self.limit:
                self.kept.pop(next(iter(self.kept)))  # the oldest
            self.kept[key] = np.asarray(predict(obs), np.float32).copy()
        return self.kept[key]

    def state_dict(self) -> dict:
        return {k: torch.from_numpy(v) for k, v in self.kept.items()}

    def load_state_dict(self, state: dict) -> None:
        self.kept = {k: v.numpy().astype(np.float32) for k, v in state.items()}


@dataclass(frozen=True)
class BatchSpec:
    """What one update asks of the replay."""

    batch_size: int
    batches: int = 1  # fresh batches per `update` call (e.g. several critic steps per actor step)
    n_step: int = 1  # n-step returns
    gamma: float = 0.99  # the replay discounts n-step returns with it
    chunk: int = 1  # action chunks of this length (an algorithm for chunked policies)
    extras: tuple[str, ...] = field(default=())  # policy extras gathered with obs and next_obs (`obs["extras"]`)
    where: str | None = None  # only transitions whose policy extra of this name is nonzero (a chunk's decisions)
    settled: bool = False  # none whose next decision is still to come (ReplayBuffer.pending): next_extras are known
    rollout_env_steps: int = 0  # > 0: on-policy, an update per this many env steps of one version; 0: off-policy
    group_size: int = 0  # > 0 (on-policy): whole episodes in groups of this many from one initial state (GRPO)
    group_outcome: str = "success"  # what compares a group's episodes: each one's success, or its return


class Algorithm(ABC):
    policy: nn.Module  # what actors run
    batch_spec: BatchSpec

    @abstractmethod
    def update(self, batches: list[dict]) -> dict:
        """One round of learning from `batch_spec.batches` batches (torch tensors on the algorithm's device);
        returns metrics (floats) for the log."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to resume exactly. `"policy"` holds the acting policy's full state dict (what
        `robo-rl eval` loads)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None: ...

    def relabel_prior(self, batch: dict) -> dict:
        """Prior data (demonstrations) before it enters the replay, e.g. with the policy extras recomputed that
        its recorder could not know. As it is, by default."""
        return batch

    def actor_weights(self) -> dict[str, torch.Tensor]:
        """The acting policy's weights that learning changes: its state dict without frozen backbones."""
        return trainable_state(self.policy)


def check_augmentation(name: str | None) -> None:
    if name not in AUGMENTATIONS:
        raise ValueError(f"algo.image_augmentation must be random_shift or null, got '{name}'")


def prepare_images(batch: dict, encoder, augmentation: str | None, pad: int) -> dict:
    """Crop/resize a batch's images once for every network reading them (`encoder.prepare`), then augment obs and
    next_obs independently. A batch without images passes through untouched (no RNG drawn)."""
    out = dict(batch)
    for key in ("obs", "next_obs"):
        obs = batch.get(key)
        if obs is None or not obs["images"]:
            continue
        images = encoder.prepare(obs["images"])
        if augmentation == "random_shift":
            images = PreparedImages(shift_images(images, pad))
        out[key] = {**obs, "images": images}
    return out


def frozen_prefixes(module: nn.Module) -> tuple[str, ...]:
    """State-dict prefixes of the frozen backbones inside `module` (built by the actor from its config)."""
    frozen = {id(m) for m in frozen_backbones(module)}
    return tuple(f"{name}." for name, m in module.named_modules() if id(m) in frozen and name)


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    prefixes = frozen_prefixes(module)
    return (
        {k: v for k, v in module.state_dict().items() if not k.startswith(prefixes)}
        if prefixes
        else (module.state_dict())
    )


def load_trainable_state(module: nn.Module, state: dict) -> None:
    """Load what `trainable_state` sent: every key but the frozen backbones' must be there, nothing unknown."""
    result = module.load_state_dict(state, strict=False)
    prefixes = frozen_prefixes(module)
    missing = [k for k in result.missing_keys if not k.startswith(prefixes)] if prefixes else result.missing_keys
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"weights do not fit this policy: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )


def resolve_device(name: str) -> torch.device:
    """`cpu`, `cuda[:i]` or `auto` (CUDA when there is one)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from robo_rl.config import ConfigError

    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name} is not a torch device: cpu | cuda | cuda:<i> | auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but torch sees no CUDA device here: use device=cpu or device=auto")
    return device
