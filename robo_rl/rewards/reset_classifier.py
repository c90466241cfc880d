"""The reset classifier: the task's camera frames → the chance that the scene is ready for an episode
(`env.reset_check=camera`, robo_rl/envs/reset_check.py).

It is the success classifier (robo_rl/rewards/classifier.py: a small CNN per camera, a threshold chosen on held-out
frames for a largest false-positive rate, the novelty gate) with "ready" as its positive class, trained by the same
`train_classifier`: each scene of the labelled frames becomes one of its episodes, whose per-frame `success` flags
are the ready labels, so its split by episode keeps a scene's look-alike frames on one side. What the threshold
bounds is then the dangerous error, a scene that is not ready called ready (an episode started from a wrong scene);
the other error, a ready scene called not ready, calls a person for nothing. The novelty gate errs the safe way here:
a scene unlike every ready one the classifier was shown is called not ready.

`reset_quality` is the check's report on labelled frames: accuracy, the rate at which a not-ready scene is called
ready, the rate at which a ready one is called not ready, and how many frames of each it rests on.
"""

from __future__ import annotations

import numpy as np

from robo_rl.data.datasets import Episode
from robo_rl.envs.reset_check import ResetFrames
from robo_rl.rewards.base import RewardModelError, Task, class_path, load_model
from robo_rl.rewards.classifier import SuccessClassifier

DEFAULT_EPOCHS = 200  # a few dozen frames fill a batch or two: an epoch is an update or two, and it needs ~100-200
BATCH_SIZE = 32
MAX_FALSE_READY = 0.01  # the threshold lets at most this share of the held-out not-ready frames be called ready
INPUT_MAX_PX = 64  # frames are resized to at most this a side: where things lie shows at that size, and it trains fast
# Smaller than the success classifier's: whether a scene is set shows in its layout, and a few dozen frames fit it.
ARCH = {"channels": 16, "features": 32, "hidden": 64}


class ResetClassifier(SuccessClassifier):
    """Frames → P(ready) (its `success_prob`); a scene is ready above `threshold`."""

    kind = "reset_classifier"

    def ready_probs(self, images: dict[str, np.ndarray]) -> np.ndarray:
        """P(ready) of N scenes: `images` camera → uint8 [N, H, W, 3]."""
        return self.score({c: np.asarray(images[c]) for c in self.cameras if c in images}, Task()).success_prob

    def ready_prob(self, images: dict[str, np.ndarray]) -> float:
        """P(ready) of the scene now: `images` camera → uint8 [H, W, 3] (the task's `camera_frames()`)."""
        return float(self.ready_probs({c: np.asarray(v)[None] for c, v in images.items()})[0])

    @classmethod
    def open_reset_check(cls, folder) -> ResetClassifier:
        """The reset classifier saved in `folder` (robo_rl/envs/reset_check.py finds it by this method)."""
        return load_model(folder, class_path(ResetClassifier))


def scene_episodes(frames: ResetFrames) -> list[Episode]:
    """One episode per scene, its `success` flags the ready labels (what `train_classifier` reads): its split by
    episode is then a split by scene. The ready frames go first, so an episode's outcome (its last frame) is "every
    frame ready", and the split balances scenes with and without a not-ready frame."""
    episodes = []
    for scene in np.unique(frames.scene):
        at = np.flatnonzero(frames.scene == scene)
        at = at[np.argsort(~frames.ready[at], kind="stable")]
        records = {"step": np.arange(len(at)), "success": frames.ready[at]}
        records.update({f"image/{c}": frames.images[c][at] for c in frames.cameras})
        episodes.append(Episode(records, source=f"scene {int(scene)}"))
    return episodes


def reset_quality(model: ResetClassifier, frames: ResetFrames) -> dict:
    """The check's figures on labelled frames at the model's threshold."""
    called_ready = model.ready_probs(frames.images) > model.threshold
    ready = frames.ready
    n_ready, n_not = int(ready.sum()), int((~ready).sum())
    return {
        "accuracy": float((called_ready == ready).mean()) if len(ready) else float("nan"),
        "false_ready_rate": float(called_ready[~ready].mean()) if n_not else float("nan"),
        "needless_call_rate": float((~called_ready[ready]).mean()) if n_ready else float("nan"),
        "false_ready": int((called_ready & ~ready).sum()),
        "needless_calls": int((~called_ready & ready).sum()),
        "frames": len(ready),
        "ready_frames": n_ready,
        "not_ready_frames": n_not,
        "scenes": len(np.unique(frames.scene)),
        "threshold": float(model.threshold),
    }


def train_reset_classifier(
    frames: ResetFrames,
    cameras=None,
    *,
    epochs: int = DEFAULT_EPOCHS,
    batch_size: int = BATCH_SIZE,
    seed: int = 0,
    max_false_ready: float = MAX_FALSE_READY,
    val_fraction: float = 0.25,
    progress: bool = False,
    **model_kwargs,
) -> tuple[ResetClassifier, dict]:
    """A ResetClassifier from labelled frames, and its quality report on the held-out scenes (the threshold is chosen
    on them, so a fresh set, `reset_quality`, gives the honest figures). Frames are resized to the first camera's
    size, at most INPUT_MAX_PX a side, unless `resize` says otherwise (an env at another image size is read too);
    `model_kwargs` are the classifier's architecture (ARCH, then the success classifier's)."""
    from robo_rl.rewards.classifier_fit import train_classifier

    cameras = tuple(cameras or frames.cameras)
    missing = [c for c in cameras if c not in frames.images]
    if missing:
        raise RewardModelError(f"the labelled frames have no camera {missing} (they have {list(frames.cameras)})")
    for label, name in ((True, "ready"), (False, "not-ready")):
        if len(np.unique(frames.scene[frames.ready == label])) < 2:
            raise RewardModelError(f"a reset classifier needs {name} frames of two scenes at least (one to hold out)")
    if not 0 < max_false_ready < 1:
        raise RewardModelError(f"max_false_ready={max_false_ready}: a share in (0, 1)")
    episodes = scene_episodes(frames)
    model_kwargs = {**ARCH, **model_kwargs}
    model_kwargs.setdefault("resize", [min(side, INPUT_MAX_PX) for side in frames.images[cameras[0]].shape[1:3]])
    fitted, fit_report = train_classifier(
        episodes,
        cameras,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        val_fraction=val_fraction,
        progress=progress,
        margin=0,
        max_fpr=max_false_ready,
        debounce_k=1,
        **model_kwargs,
    )
    model = ResetClassifier.from_config({k: v for k, v in fitted.config().items() if k != "_target_"})
    model.load_state_dict(fitted.state_dict())
    val = np.isin(frames.scene, np.unique(frames.scene)[fit_report["val_episode_indices"]])
    report = {
        "held_out": reset_quality(model, frames.take(val)),
        "train_frames": int((~val).sum()),
        "train_scenes": fit_report["train_episodes"],
        "cameras": list(cameras),
        "max_false_ready": max_false_ready,
        "auroc": fit_report.get("auroc"),
        "gate": fit_report.get("gate"),
        "epochs": epochs,
        "batch_size": batch_size,
        "seed": seed,
        "final_loss": fit_report["final_loss"],
        "seconds": fit_report["seconds"],
        "note": "held_out: the scenes the threshold was chosen on; reset-check eval on fresh frames is the honest test",
    }
    return model, report
