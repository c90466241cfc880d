"""A learned reward checked while the run goes on: a person's marks become training data, a retrained model becomes a
new version the running actors load between steps (issue 52: one person supervising hours of learning).

Everything lives in the run folder, so the page, the actors and `robo-rl reward retrain <run>` need nothing else:

  reward/marks/<actor>_<ms>_<label>.npz  one mark: the actor's last frames before the key press (`image/<camera>`,
                                         uint8 (N, H, W, 3)), their `label` (float32 (N,): 0 for a false success, 1
                                         for a missed one) and `meta` (JSON text: actor, episode, step, model version,
                                         threshold, time); written whole or not at all
  reward/models/v<N>/                    version N of the model, a reward model folder (`load_model` reads it)
  reward/models/current.json             {"format", "version", "path"}: the version actors should score with

`load_marks` returns the marks as classifier_fit's `human_labelled` (frames, labels): the classifier trains on them
beside its episodes. `retrain` fits version N+1 from the current model's data plus every mark and publishes it;
`ModelWatcher` (on an actor) sees the new `current.json`, loads the model off the control loop and hands it to the
RewardWrapper, which swaps it in between two steps; each record then says which version scored it
(`extra/reward_model_version`; the model the run started with is version 0).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from robo_rl.rewards.base import RewardModelError, load_model

log = logging.getLogger(__name__)

MARKS_DIR, MODELS_DIR, CURRENT = Path("reward/marks"), Path("reward/models"), "current.json"
FORMAT = 1  # the marks' and current.json's schema version
MARK_LABELS = {"false_success": 0.0, "missed_success": 1.0}  # what the marked frames really are
MARK_FRAMES = 8  # the frames before a mark that it labels: a debounced success spans a few steps
WATCH_EVERY_S = 1.0  # how often an actor looks for a newer model version


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then rename: a reader (an actor, a retrain) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


# --- marks -----------------------------------------------------------------------------------------------------------
def save_mark(run_dir: str | Path, actor: str, label: str, frames: dict[str, np.ndarray], meta: dict) -> Path:
    """Save one mark (see the module text) and return its file; an unknown label or no frames: ValueError."""
    if label not in MARK_LABELS:
        raise ValueError(f"mark label {label!r}: one of {', '.join(MARK_LABELS)}")
    n = {len(f) for f in frames.values()}
    if not frames or n == {0} or len(n) != 1:
        raise ValueError("a mark needs the same number (at least one) of recent frames from every camera")
    count = n.pop()
    ms = int(time.time() * 1000)
    path = Path(run_dir) / MARKS_DIR / f"{actor}_{ms}_{label}.npz"
    arrays = {f"image/{cam}": np.asarray(f, np.uint8) for cam, f in frames.items()}
    arrays["label"] = np.full(count, MARK_LABELS[label], np.float32)
    arrays["meta"] = np.array(json.dumps({"format": FORMAT, "label": label, "actor": actor, **meta}))

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    _write_atomically(path, write)
    return path


def mark_files(run_dir: str | Path) -> list[Path]:
    return sorted((Path(run_dir) / MARKS_DIR).glob("*.npz"))


def load_marks(run_dir: str | Path, cameras) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """Every mark of the run as (camera → frames, labels), classifier_fit's `human_labelled`; None without marks.
    A mark without one of `cameras` is refused with its file named."""
    frames, labels = {c: [] for c in cameras}, []
    for path in mark_files(run_dir):
        with np.load(path, allow_pickle=False) as z:
            missing = [c for c in cameras if f"image/{c}" not in z.files]
            if missing:
                raise RewardModelError(f"mark {path} has no frames of cameras {missing}")
            for cam in cameras:
                frames[cam].append(z[f"image/{cam}"])
            labels.append(z["label"])
    if not labels:
        return None
    return {c: np.concatenate(f) for c, f in frames.items()}, np.concatenate(labels)


# --- versions --------------------------------------------------------------------------------------------------------
def current_model(run_dir: str | Path) -> tuple[int, Path] | None:
    """(version, folder) of the model the run's actors should score with; None before any retrain."""
    path = Path(run_dir) / MODELS_DIR / CURRENT
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RewardModelError(f"{path} cannot be read: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("version"), int):
        raise RewardModelError(f"{path} is not a version-{FORMAT} current-model file")
    return doc["version"], path.parent / str(doc["path"])


def publish_model(run_dir: str | Path, model, report: dict | None = None) -> tuple[int, Path]:
    """Save `model` as the run's next version and make it the current one; (version, folder)."""
    models = Path(run_dir) / MODELS_DIR
    current = current_model(run_dir)
    version = (current[0] if current else 0) + 1
    folder = model.save(models / f"v{version}")
    if report is not None:
        (folder / "train_report.json").write_text(json.dumps(report, indent=1, default=float))
    doc = {"format": FORMAT, "version": version, "path": folder.name, "time": time.time()}
    _write_atomically(models / CURRENT, lambda tmp: tmp.write_text(json.dumps(doc)))
    log.info("reward model v%d published in %s", version, folder)
    return version, folder


def run_model_path(run_dir: str | Path) -> Path:
    """The model a run scores with now: its newest published version, else its config's `reward.model`."""
    current = current_model(run_dir)
    if current is not None:
        return current[1]
    from omegaconf import OmegaConf

    config = Path(run_dir) / "config.yaml"
    if not config.is_file():
        raise RewardModelError(f"{run_dir} is not a run folder (no config.yaml)")
    model = OmegaConf.select(OmegaConf.load(config), "reward.model", default=None)
    if not model or str(model).startswith("tcp://"):
        raise RewardModelError(f"the run {run_dir} scores with no saved reward model (reward.model={model})")
    return Path(str(model))


def retrain(
    run_dir: str | Path,
    data: str | None = None,
    epochs: int = 10,
    seed: int = 0,
    progress: bool = False,
    mark_share: float | None = None,
) -> tuple[int, Path, dict]:
    """Fit the run's classifier again, same architecture, on its data (`data`, else the data the current model was
    trained on, else the run's own episodes) plus every mark, and publish it as the next version. `mark_share`: the
    share of each class's half of a batch drawn from the marks of that class (classifier_fit's `human_share`; None:
    a mark's frames drawn as rarely as any recorded frame)."""
    import torch

    from robo_rl.data.datasets.io import load_some_episodes
    from robo_rl.rewards.classifier import SuccessClassifier
    from robo_rl.rewards.classifier_fit import train_classifier

    base_path = run_model_path(run_dir)
    base = load_model(base_path)
    if not isinstance(base, SuccessClassifier):
        raise RewardModelError(
            f"retrain fits success classifiers; {base_path} holds a {base.kind} model (train it anew: robo-rl reward "
            "train)"
        )
    if data is None:
        report_file = base_path / "train_report.json"
        known = json.loads(report_file.read_text()).get("data") if report_file.is_file() else None
        data = known or str(run_dir)
    try:
        episodes = load_some_episodes(data, progress=False)
    except ValueError as e:
        raise RewardModelError(f"data={e} (retrain refits on them)") from None
    marks = load_marks(run_dir, base.cameras)
    arch = {k: v for k, v in base.arch.items() if k not in ("bank_size", "image_sizes")}
    model, report = train_classifier(
        episodes,
        base.cameras,
        epochs=epochs,
        seed=seed,
        progress=progress,
        human_labelled=marks,
        human_share=mark_share if marks is not None else None,
        **arch,
    )
    model.instructions = base.instructions
    report.update(
        data=str(data),
        marks=len(mark_files(run_dir)),
        retrained_from=str(base_path),
        nice=os.nice(0),
        threads=torch.get_num_threads(),
    )
    version, folder = publish_model(run_dir, model, report)
    return version, folder, report


class ModelWatcher:
    """On an actor: a thread that looks for a newer version in the run folder every WATCH_EVERY_S, loads it (off the
    control loop) and hands it to `swap(model, version)`; a version that cannot be loaded is said once and skipped."""

    def __init__(self, run_dir: str | Path, swap: Callable[[object, int], None], cameras, every_s=WATCH_EVERY_S):
        self.run_dir, self.swap, self.cameras, self.every_s = Path(run_dir), swap, tuple(cameras), every_s
        self.version = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reward-model-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            current = None
            try:
                current = current_model(self.run_dir)
                if current is None or current[0] <= self.version:
                    continue
                version, path = current
                model = load_model(path)
                if tuple(model.cameras) != self.cameras:
                    raise RewardModelError(
                        f"it scores cameras {list(model.cameras)}, this actor's {list(self.cameras)}"
                    )
            except RewardModelError as e:
                log.error("reward model: not swapping in the newest version: %s", e)
                self.version = current[0] if current else self.version  # said once per version
                continue
            self.version = version
            self.swap(model, version)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
