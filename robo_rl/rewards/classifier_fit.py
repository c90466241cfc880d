"""Fitting and scoring the success classifier (`robo_rl/rewards/classifier.py`) from recorded episodes.

`train_classifier` learns it from episodes (`label_frames`: the frames a successful episode's records flag as a
success are positives, every other frame a negative, a margin just before the first success left out), split by
episode, and fits the decision threshold and the novelty gate on the held-out episodes; `evaluate_classifier`
reports frame AUROC, FPR/TPR at the threshold and the per-episode false-positive rate with a debounce.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch
from torch.nn import functional as F

from policies.augment import random_shift
from robo_rl.data.datasets import Episode
from robo_rl.rewards.base import RewardModelError, Task
from robo_rl.rewards.classifier import BANK_MAX, SuccessClassifier

log = logging.getLogger(__name__)


def _episode_labels(episode: Episode, margin: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels (float32) and which frames to keep for one episode: the frames its records flag as a success (the
    simulator's check, a person's per-frame label; also in an episode that lost its success later) are positives,
    every other frame a negative, and the `margin` frames just before its first positive are left out (they look
    almost done but are not)."""
    n = len(episode.records["step"])
    flags = np.asarray(episode.records["success"], bool).reshape(n)
    labels, keep = flags.astype(np.float32), np.ones(n, bool)
    if flags.any():
        first = int(np.argmax(flags))
        keep[max(0, first - margin) : first] = False
    return labels, keep


def label_frames(
    episodes: list[Episode], cameras, margin: int = 2, human_labelled: tuple[dict, np.ndarray] | None = None
):
    """(frames camera → uint8 (N, H, W, 3), labels float32 (N,), episode_index int (N,)); human-labelled
    (frames, labels) are appended as they are, with episode index -1."""
    frames, labels, index = {c: [] for c in cameras}, [], []
    for i, ep in enumerate(episodes):
        for cam in cameras:
            if f"image/{cam}" not in ep.records:
                have = [k[6:] for k in ep.records if k.startswith("image/")]
                raise RewardModelError(f"episode {i} has no camera '{cam}' (it has {have})")
        lab, keep = _episode_labels(ep, margin)
        for cam in cameras:
            frames[cam].append(ep.records[f"image/{cam}"][keep])
        labels.append(lab[keep])
        index.append(np.full(int(keep.sum()), i))
    if human_labelled is not None:
        extra, extra_labels = human_labelled
        for cam in cameras:
            frames[cam].append(np.asarray(extra[cam], np.uint8))
        labels.append(np.asarray(extra_labels, np.float32))
        index.append(np.full(len(extra_labels), -1))
    return (
        {c: np.concatenate(f) for c, f in frames.items()},
        np.concatenate(labels).astype(np.float32),
        np.concatenate(index).astype(np.int64),
    )


def sampling_weights(labels: np.ndarray, human: np.ndarray, human_share: float | None = None) -> torch.Tensor:
    """Each frame's chance of being drawn into a batch: each class (success, failure) half of a batch; within a class
    with human-labelled frames (`human`), those `human_share` of its half and the recorded frames the rest (None: every
    frame of a class alike)."""
    positive = np.asarray(labels) > 0.5
    human = np.asarray(human, bool)
    weights = np.zeros(len(positive), np.float32)  # float32 as the weights were before human_share (same draws)
    for cls in (positive, ~positive):
        marked, recorded = cls & human, cls & ~human
        if human_share is None or not marked.any() or not recorded.any():
            weights[cls] = 0.5 / cls.sum()
        else:
            weights[marked] = 0.5 * human_share / marked.sum()
            weights[recorded] = 0.5 * (1 - human_share) / recorded.sum()
    return torch.from_numpy(weights).double()


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve from ranks (ties count half); nan without both classes."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels) > 0.5
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # 1-based, ties get their average rank
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _fires(probs: np.ndarray, threshold: float, k: int) -> bool:
    """Some k consecutive frames above the threshold."""
    above = (probs > threshold).astype(np.int64)
    return bool(len(above) >= k and np.convolve(above, np.ones(k, np.int64), "valid").max() >= k)


def choose_threshold(negative_scores: np.ndarray, max_fpr: float = 0.01) -> float:
    """The lowest threshold (but at least 0.5) at which at most `max_fpr` of the negatives score above it."""
    s = np.sort(np.asarray(negative_scores, np.float64))[::-1]
    k = int(math.floor(max_fpr * len(s) + 1e-9))  # false positives allowed
    return float(max(s[k], 0.5)) if k < len(s) else 0.5


def _score_episodes(model: SuccessClassifier, episodes: list[Episode], task: Task) -> list[np.ndarray]:
    return [model.score({c: ep.records[f"image/{c}"] for c in model.cameras}, task).success_prob for ep in episodes]


def _metrics(probs: list[np.ndarray], episodes: list[Episode], threshold: float, debounce_k: int, margin: int) -> dict:
    frame_p, frame_y, false_eps, detected, n_success = [], [], 0, 0, 0
    for p, ep in zip(probs, episodes, strict=True):
        y, keep = _episode_labels(ep, margin)
        frame_p.append(p[keep])
        frame_y.append(y[keep])
        negatives = p[keep & (y == 0)]  # every frame not flagged as a success, outside the margin
        false_eps += _fires(negatives, threshold, debounce_k)
        if ep.success:
            n_success += 1
            success_frames = p[y == 1]
            detected += _fires(success_frames, threshold, min(debounce_k, len(success_frames)))
    fp, fy = np.concatenate(frame_p), np.concatenate(frame_y) > 0.5
    return {
        "auroc": auroc(fp, fy),
        "threshold": threshold,
        "debounce_k": debounce_k,
        "frame_fpr": float((fp[~fy] > threshold).mean()) if (~fy).any() else float("nan"),
        "frame_tpr": float((fp[fy] > threshold).mean()) if fy.any() else float("nan"),
        "episode_fpr": false_eps / len(episodes),
        "false_positive_episodes": false_eps,
        "episode_tpr": detected / n_success if n_success else float("nan"),
        "episodes": len(episodes),
        "successful_episodes": n_success,
        "frames": len(fp),
        "positives": int(fy.sum()),
    }


def _task(model: SuccessClassifier) -> Task:
    return Task(model.instructions[0] if model.instructions else "")


def evaluate_classifier(
    model: SuccessClassifier, episodes: list[Episode], debounce_k: int = 3, margin: int = 2, task: Task | None = None
) -> dict:
    """Frame AUROC, frame FPR/TPR at the model's threshold, and the per-episode false-positive rate (share of
    episodes where frames that should not be a success score above it `debounce_k` frames in a row)."""
    if not episodes:
        raise RewardModelError("no episodes to evaluate the classifier on")
    probs = _score_episodes(model, episodes, task or _task(model))
    return _metrics(probs, episodes, model.threshold, debounce_k, margin)


def split_by_episode(episodes: list[Episode], val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Train / held-out episode indices, each outcome (success, failure) split separately."""
    rng, train, val = np.random.default_rng(seed), [], []
    for outcome in (True, False):
        group = rng.permutation([i for i, ep in enumerate(episodes) if ep.success == outcome]).tolist()
        n_val = min(max(round(val_fraction * len(group)), int(val_fraction > 0)), len(group) - 1) if group else 0
        val += group[:n_val]
        train += group[n_val:]
    return sorted(train), sorted(val)


def train_classifier(
    episodes: list[Episode],
    cameras,
    *,
    epochs: int = 20,
    batch_size: int = 64,
    lr: float = 3e-4,
    val_fraction: float = 0.2,
    seed: int = 0,
    augment: bool = True,
    progress: bool = True,
    human_labelled: tuple[dict, np.ndarray] | None = None,
    human_share: float | None = None,
    margin: int = 2,
    max_fpr: float = 0.01,
    debounce_k: int = 3,
    shift: float = 0.05,
    device: str = "cpu",
    gate_quantile: float | None = 0.99,
    **model_kwargs,
) -> tuple[SuccessClassifier, dict]:
    """Train a SuccessClassifier on `episodes`; returns it (threshold set on the held-out episodes) and a report.
    `shift`: the random-shift pad as a share of the smaller image side (at least 1 pixel). `gate_quantile`: the
    novelty gate keeps this share of the held-out success frames (None: no gate; see the module's text).
    `human_share`: the share of each class's half of a batch drawn from the `human_labelled` frames of that class (a
    person's few marks would otherwise be drawn as rarely as any one of thousands of recorded frames); None: drawn as
    any other frame."""
    if gate_quantile is not None and not 0 < gate_quantile <= 1:
        raise RewardModelError(f"gate_quantile must be in (0, 1] or None, got {gate_quantile}")
    if human_share is not None and not 0 < human_share < 1:
        raise RewardModelError(f"human_share must be in (0, 1) or None, got {human_share}")
    from tqdm import tqdm

    cameras, start = tuple(cameras), time.monotonic()
    train_idx, val_idx = split_by_episode(episodes, val_fraction, seed)
    frames, labels, origin = label_frames([episodes[i] for i in train_idx], cameras, margin, human_labelled)
    n_pos = int(labels.sum())
    n_success = sum(episodes[i].success for i in train_idx)
    if n_success and n_pos < 2 * n_success:
        log.warning(
            "the %d successful training episodes flag %d success frames: one each is what an env that ends "
            "at the first success records; record successes held for a few steps (a sim: "
            "env.terminate_on_success=false) or add human-labelled success frames",
            n_success,
            n_pos,
        )
    if n_pos == 0 or n_pos == len(labels):
        raise RewardModelError(
            f"training needs positive and negative frames; the {len(train_idx)} training "
            f"episodes give {n_pos} positives of {len(labels)}"
        )
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    sizes = {c: list(frames[c].shape[1:3]) for c in cameras}
    model = SuccessClassifier(cameras, **{"image_sizes": sizes, **model_kwargs})
    images = model.prepare({c: torch.from_numpy(frames[c]) for c in cameras})  # resized once, on the CPU
    model.to(device)
    y = torch.from_numpy(labels)
    weights = sampling_weights(labels, origin < 0, human_share)
    opt = torch.optim.Adam(model.net.parameters(), lr=lr)
    steps, loss = max(1, math.ceil(len(y) / batch_size)), torch.zeros(())
    model.net.train()
    for _ in (bar := tqdm(range(epochs), desc="reward classifier", unit="epoch", disable=not progress)):
        for _ in range(steps):
            idx = torch.multinomial(weights, batch_size, replacement=True, generator=gen)
            batch = {}
            for cam, image in images.items():
                image = image[idx]
                if augment:
                    image = random_shift(image, max(1, round(shift * min(image.shape[1:3]))), generator=gen)
                batch[cam] = image.to(device)
            loss = F.binary_cross_entropy_with_logits(model.logits(batch), y[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        bar.set_postfix(loss=f"{loss.item():.4f}")
    model.net.eval()
    report = {
        "train_episodes": len(train_idx),
        "val_episodes": len(val_idx),
        "train_frames": len(y),
        "train_positives": n_pos,
        "human_frames": 0 if human_labelled is None else len(human_labelled[1]),
        "human_share": human_share,
        "train_episode_indices": train_idx,
        "val_episode_indices": val_idx,
        "final_loss": float(loss.item()),
    }
    if val_idx:
        val = [episodes[i] for i in val_idx]
        if gate_quantile is not None:
            report.update(_fit_gate(model, images, labels, val, margin, gate_quantile, seed))
        probs = _score_episodes(model, val, _task(model))
        negatives = [
            p[keep & (lab == 0)]
            for p, ep in zip(probs, val, strict=True)
            for lab, keep in [_episode_labels(ep, margin)]
        ]
        model.threshold = choose_threshold(np.concatenate(negatives), max_fpr)
        metrics = _metrics(probs, val, model.threshold, debounce_k, margin)
        renamed = ("frames", "positives", "episodes")  # of the held-out set
        report.update({f"val_{k}" if k in renamed else k: v for k, v in metrics.items()})
    report.update(max_fpr=max_fpr, seconds=time.monotonic() - start)
    return model, report


def _fit_gate(
    model: SuccessClassifier,
    images: dict[str, torch.Tensor],
    labels: np.ndarray,
    val: list[Episode],
    margin: int,
    quantile: float,
    seed: int,
) -> dict:
    """The bank (the training success frames' features, at most BANK_MAX) and the gate: the `quantile` of the
    held-out success frames' distances to it. Without held-out success frames there is no gate (a warning)."""
    positives = np.flatnonzero(labels > 0.5)
    if len(positives) > BANK_MAX:
        positives = np.sort(np.random.default_rng(seed).choice(positives, BANK_MAX, replace=False))
    with torch.no_grad():
        feats = [
            model.features({c: im[positives[i : i + 256]].to(model.device) for c, im in images.items()})
            for i in range(0, len(positives), 256)
        ]
        model.set_bank(torch.cat(feats))
    success = [_episode_labels(ep, margin)[0] > 0.5 for ep in val]
    frames = {
        c: np.concatenate([ep.records[f"image/{c}"][m] for ep, m in zip(val, success, strict=True)])
        for c in model.cameras
    }
    if not len(frames[model.cameras[0]]):
        log.warning("no held-out success frames to set the novelty gate on: the classifier has no gate")
        return {"gate": None, "gate_quantile": quantile, "bank_frames": len(positives)}
    model.gate = None
    distance = model.score(frames, _task(model)).extra["novelty"]
    model.gate = float(np.quantile(distance, quantile, method="higher"))
    return {
        "gate": model.gate,
        "gate_quantile": quantile,
        "bank_frames": len(positives),
        "val_positives_within_gate": float((distance <= model.gate).mean()),
    }
