"""Success classifier: camera frames → the chance the task is done (kind "classifier", output `success_prob`).

A small CNN per camera (`policies.encoders.ConvEncoder`; frames first resized to one size, so any camera resolution
works, unless `resize` is None), the features concatenated, an MLP head to one logit.

`train_classifier` (robo_rl/rewards/classifier_fit.py) learns it from episodes
(`label_frames`: the frames a successful episode's records flag as a
success are positives, every other frame a negative, a margin just before the first success left out; so record
successes held for a few frames, not ended at the first one). It
splits by episode - neighbouring frames are near copies, so a split by frame would leak - samples the classes
evenly, and shifts images at random. The decision `threshold` is then chosen on the held-out episodes to keep the
per-frame false-positive rate at most `max_fpr` (0.5 if that is higher). `evaluate_classifier` reports frame AUROC,
frame FPR/TPR at the threshold and the per-episode false-positive rate with a `debounce_k`-frame debounce: a false
success ends an episode early, so that is the figure to watch.

The novelty gate: a classifier trained only on demonstrations and an untrained policy's failures has seen nothing
between the two, and an RL policy finds frames it scores high that are no success (a cube lifted in a fingertip
pinch, a cube tossed into the air). `train_classifier` therefore keeps the features of the training success frames
(the bank) and a distance, `gate`, within which `gate_quantile` of the held-out success frames lie; a frame whose
nearest success in the bank (per-feature standardised Euclidean distance) is farther than that keeps only
(gate / distance)^8 of its probability (half at 1.09 × the gate, 1% at 1.78 ×; smooth, so frames still rank): a
success has to look like some success the classifier was shown. Scores carry the distance as `extra["novelty"]`.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from policies.encoders import ConvEncoder, _resize
from robo_rl.rewards.base import RewardModel, RewardModelError, Scores, Task

log = logging.getLogger(__name__)

ARCH = {
    "channels": 32,
    "features": 64,
    "hidden": 256,
    "resize": [128, 128],
    "image_sizes": None,
    "kernels": [3, 3, 3, 3],
    "strides": [2, 2, 2, 1],
    "bank_size": 0,
}
BANK_MAX = 4096  # success frames kept for the novelty gate (a random subset beyond that)
GATE_POWER = 8  # beyond the gate a frame keeps (gate / distance)^8 of its probability: half at 1.09 × the gate


class _Bank(nn.Module):
    """The training success frames' features, standardised once by their per-feature mean and std (all three saved
    with the weights), so that scoring a frame standardises only the frame."""

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("standardised", torch.zeros(rows, dim))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def distance(self, feats: torch.Tensor) -> torch.Tensor:
        """[B] standardised Euclidean distance of each row of `feats` to its nearest bank row."""
        return torch.cdist((feats - self.mean) / self.std, self.standardised).min(dim=1).values


class SuccessClassifier(RewardModel):
    """Frames → success_prob; frames score as a success above `threshold` (`previous` frames are ignored)."""

    kind = "classifier"
    provides = ("success_prob",)

    def __init__(self, cameras, instructions=(), threshold: float = 0.5, gate: float | None = None, **arch) -> None:
        super().__init__(cameras, instructions)
        unknown = sorted(set(arch) - set(ARCH))
        if unknown:
            raise RewardModelError(f"classifier reward model: unknown settings {unknown} (known: {sorted(ARCH)})")
        self.arch = {**ARCH, **arch}
        self.threshold = float(threshold)
        self.gate = None if gate is None else float(gate)  # the novelty gate's distance (None: no gate)
        resize, sizes = self.arch["resize"], self.arch["image_sizes"] or {}
        if resize is None and any(c not in sizes for c in self.cameras):
            raise RewardModelError(f"classifier with resize=None needs image_sizes for cameras {list(self.cameras)}")
        encoders = {}
        for cam in self.cameras:
            hw = tuple(resize) if resize is not None else tuple(sizes[cam])
            try:
                encoders[cam] = ConvEncoder(
                    hw,
                    self.arch["channels"],
                    self.arch["features"],
                    tuple(self.arch["kernels"]),
                    tuple(self.arch["strides"]),
                )
            except ValueError:
                raise RewardModelError(
                    f"camera {cam}: the classifier's convolutions shrink {hw[0]}×{hw[1]} images to "
                    "nothing; resize to a larger size or use fewer kernels"
                ) from None
        features, hidden = self.arch["features"] * len(self.cameras), self.arch["hidden"]
        head = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.net = nn.ModuleDict({"encoders": nn.ModuleDict(encoders), "head": head})
        if self.arch["bank_size"]:
            self.net["bank"] = _Bank(int(self.arch["bank_size"]), features)

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def to(self, device) -> SuccessClassifier:
        self.net.to(device)
        return self

    def prepare(self, images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """uint8 [B, H, W, 3] per camera, resized to the model's input size (uint8 still)."""
        size = self.arch["resize"]
        out = {}
        for cam in self.cameras:
            image = images[cam]
            if size is not None and tuple(image.shape[1:3]) != tuple(size):
                image = _resize(image, tuple(size))
            elif size is None and list(image.shape[1:3]) != list(self.arch["image_sizes"][cam]):
                raise RewardModelError(
                    f"camera {cam}: frames are {tuple(image.shape[1:3])}, the classifier was built "
                    f"for {tuple(self.arch['image_sizes'][cam])} (resize=None)"
                )
            out[cam] = image
        return out

    def features(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, features × cameras]: what the head reads (and the novelty gate compares)."""
        images = self.prepare(images)
        return torch.cat([self.net["encoders"][cam](images[cam]) for cam in self.cameras], dim=-1)

    def logits(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net["head"](self.features(images)).squeeze(-1)

    def set_bank(self, feats: torch.Tensor) -> None:
        """Keep `feats` [N, F] (the training success frames' features) for the novelty gate."""
        feats = feats.detach().float().cpu()
        bank = _Bank(len(feats), feats.shape[1])
        std = feats.std(0, unbiased=False)
        bank.mean.copy_(feats.mean(0))
        bank.std.copy_(std.clamp_min(0.1 * float(std.mean()) + 1e-6))  # a near-constant feature does not dominate
        bank.standardised.copy_((feats - bank.mean) / bank.std)
        self.net["bank"] = bank.to(self.device)
        self.arch["bank_size"] = len(feats)

    def novelty(self, feats: torch.Tensor) -> torch.Tensor | None:
        """Each frame's distance to the nearest training success (None without a bank)."""
        return self.net["bank"].distance(feats) if "bank" in self.net else None

    def score(self, frames: dict[str, np.ndarray], task: Task, previous=None, batch: int = 256) -> Scores:
        n = self.check_frames(frames)
        self.check_instruction(task.instruction)
        out, far, was_training = [], [], self.net.training
        self.net.eval()
        with torch.no_grad():
            for i in range(0, n, batch):
                chunk = {
                    c: torch.from_numpy(np.ascontiguousarray(frames[c][i : i + batch])).to(self.device)
                    for c in self.cameras
                }
                feats = self.features(chunk)
                prob = torch.sigmoid(self.net["head"](feats).squeeze(-1))
                distance = self.novelty(feats)
                if distance is not None:
                    far.append(distance.float().cpu().numpy())
                    if self.gate is not None:  # beyond the gate, (gate / distance)^GATE_POWER of the probability
                        prob = prob * (self.gate / distance.clamp_min(1e-9)).clamp(max=1.0).pow(GATE_POWER)
                out.append(prob.float().cpu().numpy())
        self.net.train(was_training)
        extra = {"novelty": np.concatenate(far)} if far else {}
        return Scores(success_prob=np.concatenate(out) if out else np.zeros(0, np.float32), extra=extra)

    # --- saving ---------------------------------------------------------------------------------------------
    def config(self) -> dict:
        return {**super().config(), **self.arch, "threshold": self.threshold, "gate": self.gate}

    @classmethod
    def from_config(cls, config: dict) -> SuccessClassifier:
        config = dict(config)
        return cls(config.pop("cameras", ()), config.pop("instructions", ()), **config)

    def state_dict(self) -> dict:
        return self.net.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state)  # strict: another architecture's weights raise RuntimeError
