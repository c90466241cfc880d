"""Run folders: resolved config, metrics JSONL, checkpoints written atomically."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import re
import time
from pathlib import Path

import numpy as np

from robo_rl.errors import UserError

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
_CKPT_RE = re.compile(r"^step_(\d+)\.pt$")
PAUSE_ENV = "ROBO_RL_TEST_CHECKPOINT_PAUSE_S"  # tests only: sleep between writing and renaming a checkpoint


class CheckpointError(UserError, ValueError):
    """A missing, corrupt or incompatible checkpoint; the text names the file."""


def new_run_dir(outputs_dir: str | Path, name: str) -> Path:
    now = dt.datetime.now()
    path = Path(outputs_dir) / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}_{name}"
    suffix = 1
    while path.exists():  # two runs started within one second
        suffix += 1
        path = path.with_name(f"{now.strftime('%H-%M-%S')}_{name}_{suffix}")
    (path / "checkpoints").mkdir(parents=True)
    return path


def task_label(env_cfg) -> str:
    """A task's short name for a run folder: the env class (or a robot's driver class) in snake case, and its
    `task` where one class holds several: PickCubeEnv -> pick_cube, RobosuiteEnv task=PickPlaceCan ->
    robosuite_pick_place_can."""
    driver = env_cfg.get("driver") if hasattr(env_cfg, "get") else None
    target = str((driver or env_cfg).get("_target_") or "env").rsplit(".", 1)[-1]
    stem = re.sub(r"(Env|Driver)$", "", target) or target
    task = env_cfg.get("task")
    words = [stem, task] if isinstance(task, str) else [stem]
    return "_".join(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", w).lower() for w in words)


def is_resumable(run_dir: Path) -> bool:
    """A run folder `resume=` can continue: it holds a checkpoint or stored replay."""
    run_dir = Path(run_dir)
    return bool(_checkpoints_in(run_dir / "checkpoints")) or any(run_dir.glob("replay/online/seg_*"))


def discard_unfinished_run(run_dir: Path, product: str | None = None) -> bool:
    """Remove a run folder a failed command made before it wrote anything worth keeping: a checkpoint or stored
    replay, or `product` (a file inside it: bc/policy.pt). Returns whether it was removed."""
    import shutil

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or is_resumable(run_dir) or (product and (run_dir / product).exists()):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


class MetricsWriter:
    """Appends one strict-JSON object per line (NaN and infinities become null; see `json_safe`), flushed per
    line so a crash loses at most the last one, and hands the same record to any extra `sinks` (TensorBoard,
    W&B: robo_rl.loggers). Never raises on a value: metrics come partly from actors' heartbeats."""

    def __init__(self, path: Path, sinks: list | tuple = ()) -> None:
        self.file = open(path, "a", buffering=1)
        self.sinks = list(sinks)
        self._warned: set[str] = set()

    def write(self, record: dict) -> None:
        problems: list[str] = []
        clean = json_safe({"time": time.time(), **record}, problems)
        for problem in problems:
            if problem not in self._warned:  # once per key, not once per line
                self._warned.add(problem)
                log.warning("metrics: %s", problem)
        self.file.write(json.dumps(clean, allow_nan=False) + "\n")
        for sink in list(self.sinks):
            try:
                sink.write(clean)
            except Exception as e:  # a logging backend must never stop training
                log.warning(
                    "metrics: the %s backend failed (%s: %s); it is switched off for this run",
                    type(sink).__name__,
                    type(e).__name__,
                    e,
                )
                self.sinks.remove(sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as e:
                log.warning("metrics: closing the %s backend failed (%s: %s)", type(sink).__name__, type(e).__name__, e)
        self.sinks = []
        self.file.close()


MAX_JSON_DEPTH = 16  # deeper nesting in a metrics record is cut (a hostile heartbeat could nest without end)
MAX_TEXT_CHARS = 200  # an unknown object is written as at most this much of its repr


def json_safe(value, problems: list[str] | None = None, key: str = "", depth: int = 0):
    """`value` as plain JSON: finite floats (NaN and infinities become None), str keys, lists for tuples and
    arrays, text for bytes and unknown objects. What was changed beyond NaN → None is noted in `problems`."""
    problems = [] if problems is None else problems
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return json_safe(value.item(), problems, key, depth)
    if depth >= MAX_JSON_DEPTH:
        problems.append(f"{key or 'record'} is nested deeper than {MAX_JSON_DEPTH} levels: dropped")
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v, problems, f"{key}.{k}" if key else str(k), depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        items = value.tolist() if isinstance(value, np.ndarray) else value
        return [json_safe(v, problems, key, depth + 1) for v in items]
    if isinstance(value, (bytes, bytearray, memoryview)):
        problems.append(f"{key} holds bytes: written as text")
        return bytes(value).decode("utf-8", errors="replace")
    try:
        text = repr(value)[:MAX_TEXT_CHARS]
    except Exception:
        problems.append(f"{key} holds a {type(value).__name__} that cannot be shown: dropped")
        return None
    problems.append(f"{key} holds a {type(value).__name__}: written as text")
    return text


def read_metrics(path: Path) -> list[dict]:
    """All complete lines of a metrics file (a torn last line from a crash is skipped)."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def save_checkpoint(run_dir: Path, env_steps: int, payload: dict) -> Path:
    """Write checkpoints/step_<env_steps>.pt via a temp file and rename, so a kill never leaves half a file."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"step_{env_steps:09d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    import torch  # here, not at import: the launcher makes run folders without loading torch

    torch.save({"format": CHECKPOINT_FORMAT, **payload}, tmp)
    if os.environ.get(PAUSE_ENV):  # fault-injection for tests: hold the half-done write open to be killed in
        time.sleep(float(os.environ[PAUSE_ENV]))
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _checkpoints_in(ckpt_dir: Path) -> list[Path]:
    """The step_*.pt files of a checkpoint folder, oldest first (none if the folder is missing)."""
    return sorted(p for p in ckpt_dir.iterdir() if _CKPT_RE.match(p.name)) if ckpt_dir.is_dir() else []


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint file as given, or the latest one in a run folder."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        ckpt_dir = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        found = _checkpoints_in(ckpt_dir)
        if found:
            return found[-1]
        raise CheckpointError(f"no checkpoint (step_*.pt) in {ckpt_dir}")
    raise CheckpointError(f"checkpoint {path} does not exist: pass a .pt file or a run folder")


def load_checkpoint(path: str | Path) -> dict:
    """Load safely (tensors and plain containers only, never arbitrary pickled objects)."""
    import torch

    path = find_checkpoint(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({type(e).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a robo_rl checkpoint of format {CHECKPOINT_FORMAT}")
    payload["path"] = str(path)
    return payload


def load_resume_checkpoint(run: str | Path) -> tuple[dict | None, list[str]]:
    """The newest readable checkpoint of a run folder (or the one file given), and what was skipped.

    A corrupt newest checkpoint (a kill while writing it, a bad disk) is reported and the one before it
    used; a run folder with no checkpoint at all gives None. A file given explicitly is never replaced."""
    path = Path(run)
    if path.is_file():
        return load_checkpoint(path), []
    return _newest_readable(path / "checkpoints")


def remove_unfinished_checkpoints(run_dir: str | Path) -> list[Path]:
    """Delete the step_*.pt.tmp files a kill left mid-write (never renamed, never read; a VLA's is gigabytes) and
    return them. The resuming learner calls this: it is the only writer of its run folder's checkpoints (a
    checkpoint file given to resume, not a folder, has none)."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    stale = sorted(ckpt_dir.glob("step_*.pt.tmp")) if ckpt_dir.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
        log.warning("removed %s: a checkpoint a kill left half-written", tmp)
    return stale


def _newest_readable(ckpt_dir: Path) -> tuple[dict | None, list[str]]:
    """The newest checkpoint in `ckpt_dir` that loads and the ones skipped on the way (None if there is none;
    raises if there are some and none loads)."""
    skipped = []
    for candidate in reversed(_checkpoints_in(ckpt_dir)):
        try:
            return load_checkpoint(candidate), skipped
        except CheckpointError as e:
            skipped.append(str(e))
    if skipped:
        raise CheckpointError("no readable checkpoint in " + str(ckpt_dir) + ": " + "; ".join(skipped))
    return None, []


def load_newest_readable(path: str | Path) -> tuple[dict, list[str]]:
    """For eval: a checkpoint file as given (refused if corrupt), or a run folder's newest readable checkpoint
    and what was skipped on the way (as resume does)."""
    path = Path(path)
    if not path.is_dir():
        return load_checkpoint(find_checkpoint(path)), []
    ckpt_dir = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    payload, skipped = _newest_readable(ckpt_dir)
    if payload is None:
        raise CheckpointError(f"no checkpoint (step_*.pt) in {ckpt_dir}")
    return payload, skipped
