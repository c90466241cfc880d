"""robo_rl episodes to and from the LeRobotDataset v3 format, through the `lerobot` package.

LeRobot's convention: frame k holds observation_k and the action taken at it, with the outcome of that
action under `next.*`. An episode of records 0..T (see `robo_rl.data.schema`) becomes T frames; frame k has

    observation.state, observation.images.<cam>   state and image/<cam> of record k (images as video)
    action                                         action_executed of record k+1
    next.reward, next.done                         reward, terminated or truncated of record k+1
    next.terminated, next.truncated, next.success  the flags of record k+1, kept apart
    complementary_info.is_intervention             intervention flag of record k+1
    complementary_info.action_policy / action_base what the policy proposed / the base policy's action
    complementary_info.ended_by                    ENDED_BY code of record k+1 (0 while running)
    complementary_info.partition                   the episode's index in PARTITIONS
    task (tasks.parquet, one row per instruction)  the episode's instruction; one without gets `task=` or
                                                   DEFAULT_TASK, which reads back as no instruction

The final observation (record T) has no frame: LeRobot keeps none. Import puts back a COPY of frame T-1's
observation as record T; it only matters for a truncated episode (a terminated one never bootstraps
from it). LeRobot regenerates timestamps as frame_index / fps, so imported timestamps are those (the final
record gets one more 1/fps) and policy_version is 0. An episode with no transition is not exported.

A foreign dataset (without the fields above) imports as partition "demos" (prior data): `next.done` ends it as
terminated (or truncated, `terminal_on_done=False`), no done at all as truncated, success = last reward > 0,
and intervention flags are read under the names LeRobot's HIL-SERL and DAgger recorders use. An episode stored
as "interventions" that carries no intervention flag comes back as "demos".
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from robo_rl.data.datasets import PARTITIONS, Episode
from robo_rl.data.schema import ENDED_BY_CODES, check_step_batch, step_fields
from robo_rl.data.tasks import NO_TASK

DEFAULT_TASK = "robo_rl episode"
STATE, ACTION, REWARD, DONE = "observation.state", "action", "next.reward", "next.done"
TERMINATED, TRUNCATED, SUCCESS = "next.terminated", "next.truncated", "next.success"
INTERVENTION = "complementary_info.is_intervention"
ACTION_POLICY, ACTION_BASE = "complementary_info.action_policy", "complementary_info.action_base"
ENDED, PARTITION = "complementary_info.ended_by", "complementary_info.partition"
IMAGES = "observation.images."
# intervention flags as recorders name them: ours and LeRobot's HIL-SERL actor (TeleopEvents.IS_INTERVENTION
# in complementary_info), LeRobot's DAgger rollouts ("intervention")
INTERVENTION_KEYS = (INTERVENTION, "intervention", "is_intervention", "complementary_info.intervention")


MIN_VIDEO_SIDE = 32  # pixels: SVT-AV1 kills the process on 8x8 and 16x16 frames


def _vec(dtype: str, n: int) -> dict:
    return {"dtype": dtype, "shape": (n,), "names": None}


def _features(records: dict[str, np.ndarray]) -> dict[str, dict]:
    a = records["action_executed"].shape[1]
    feats = {STATE: _vec("float32", records["state"].shape[1]), ACTION: _vec("float32", a)}
    for name, arr in records.items():
        if name.startswith("image/"):
            h, w = arr.shape[1:3]
            if min(h, w) < MIN_VIDEO_SIDE:  # smaller frames crash the AV1 encoder inside the process (SIGFPE)
                raise ValueError(
                    f"camera '{name[6:]}' is {h}x{w}: LeRobot's video encoding needs at least "
                    f"{MIN_VIDEO_SIDE}x{MIN_VIDEO_SIDE} pixels; record larger images to export it"
                )
            feats[IMAGES + name[6:]] = {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
    feats.update(
        {
            REWARD: _vec("float32", 1),
            DONE: _vec("bool", 1),
            TERMINATED: _vec("bool", 1),
            TRUNCATED: _vec("bool", 1),
            SUCCESS: _vec("bool", 1),
            INTERVENTION: _vec("bool", 1),
            ACTION_POLICY: _vec("float32", a),
            ACTION_BASE: _vec("float32", a),
            ENDED: _vec("int64", 1),
            PARTITION: _vec("int64", 1),
        }
    )
    return feats


def _columns(ep: Episode) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The LeRobot frames of one episode as column arrays (see the module docstring), and its camera frames."""
    r = ep.records
    if ep.partition not in PARTITIONS:
        raise ValueError(f"episode partition '{ep.partition}' is not one of {PARTITIONS}")
    n, nxt = len(ep), slice(1, None)  # frame k: observation of record k, outcome of record k+1
    terminated, truncated = r["terminated"][nxt].astype(bool), r["truncated"][nxt].astype(bool)
    columns = {
        STATE: np.asarray(r["state"][:n], np.float32),
        ACTION: np.asarray(r["action_executed"][nxt], np.float32),
        REWARD: np.asarray(r["reward"][nxt], np.float32),
        DONE: terminated | truncated,
        TERMINATED: terminated,
        TRUNCATED: truncated,
        SUCCESS: r["success"][nxt].astype(bool),
        INTERVENTION: r["intervention"][nxt].astype(bool),
        ACTION_POLICY: np.asarray(r["action_policy"][nxt], np.float32),
        ACTION_BASE: np.asarray(r["action_base"][nxt], np.float32),
        ENDED: r["ended_by"][nxt].astype(np.int64),
        PARTITION: np.full(n, PARTITIONS.index(ep.partition), np.int64),
    }
    videos = {IMAGES + k[6:]: np.asarray(v[:n], np.uint8) for k, v in r.items() if k.startswith("image/")}
    return columns, videos


def export_lerobot(
    episodes: Iterable[Episode],
    root: str | Path,
    repo_id: str = "local/robo_rl",
    fps: float = 10.0,
    task: str = "",
    progress: bool = True,
    frame_tasks: Callable[[int, Episode], Sequence[str]] | None = None,
) -> Path:
    """Write `episodes` as a new LeRobotDataset v3 at `root` (which must not exist or be empty); return root.

    The files are those lerobot's recorder writes, written many episodes at a time (see `lerobot_writer`).
    `frame_tasks(i, episode)`, where given, is the i-th episode's task per frame instead of its instruction."""
    from robo_rl.data.datasets.lerobot_writer import LeRobotV3Writer

    root = Path(root)
    if root.exists():
        if not root.is_dir() or any(root.iterdir()):
            raise FileExistsError(f"export target {root} already exists and is not empty")
        root.rmdir()  # lerobot creates the folder itself
    if float(fps) != int(fps) or fps <= 0:
        raise ValueError(f"LeRobot datasets need a positive integer fps, got {fps}")
    total = len(episodes) if hasattr(episodes, "__len__") else None
    writer = None
    try:
        for i, ep in enumerate(tqdm(episodes, total=total, desc="export lerobot", unit="ep", disable=not progress)):
            if len(ep) < 1:
                continue
            if writer is None:
                writer = LeRobotV3Writer(root, repo_id, int(fps), _features(ep.records))
            columns, videos = _columns(ep)
            own = ep.instruction or task or DEFAULT_TASK  # each episode's own instruction
            writer.add(columns, videos, own if frame_tasks is None else frame_tasks(i, ep))
        if writer is None:
            raise ValueError("no episode with at least one transition to export")
        writer.finish()
    except BaseException:
        if writer is not None:
            writer.close()
        shutil.rmtree(root, ignore_errors=True)  # it did not exist (or was empty) before
        raise
    return root


class _DropTorchcodecFallback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "torchcodec" not in record.getMessage()


_video_backend_said = False


def video_backend() -> str:
    """The video decoder robo_rl asks lerobot for: PyAV, said once in one line. lerobot's default, torchcodec,
    needs FFmpeg's shared libraries; where they are missing lerobot logs a 90-line loading traceback on its
    fallback to PyAV, which the user cannot act on and which this drops."""
    global _video_backend_said
    if not _video_backend_said:
        logging.getLogger("lerobot.utils.import_utils").addFilter(_DropTorchcodecFallback())
        print("note: LeRobot videos are decoded with PyAV", file=sys.stderr)
        _video_backend_said = True
    return "pyav"


def _open(repo_or_root: str | Path, repo_id: str | None):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    path = Path(repo_or_root).expanduser()
    if not path.exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", str(repo_or_root)):
        try:  # a repo id: lerobot looks in $HF_LEROBOT_HOME, then on the Hub
            return LeRobotDataset(str(repo_or_root), video_backend="pyav"), str(repo_or_root)
        except Exception as e:
            raise ValueError(f"{repo_or_root}: not a local folder, and no LeRobot dataset by that repo id ({e})") from e
    if not (path / "meta" / "info.json").is_file() or not (path / "data").is_dir():
        raise ValueError(f"{path} is not a LeRobot v3 dataset (it needs meta/info.json and data/)")
    try:
        version = str(json.loads((path / "meta" / "info.json").read_text()).get("codebase_version", "?"))
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: unreadable meta/info.json ({e})") from e
    if not version.startswith("v3"):  # lerobot would otherwise try the Hub for the files it misses
        raise ValueError(
            f"{path} is a LeRobot {version} dataset; convert it to v3.0 first (lerobot's convert_dataset_v21_to_v30)"
        )
    repo_id = repo_id or f"local/{path.resolve().name}"
    try:
        return LeRobotDataset(repo_id, root=path, video_backend="pyav"), str(path)
    except Exception as e:
        raise ValueError(f"{path}: cannot read it as a LeRobot v3 dataset ({type(e).__name__}: {e})") from e


def _require(key: str, feats: dict) -> None:
    if key not in feats:
        raise ValueError(f"LeRobot feature '{key}' not in the dataset; available features: {sorted(feats)}")


def _to_uint8_hwc(frames) -> np.ndarray:
    """(N, C, H, W) or (N, H, W, C), float in [0, 1] or uint8 → uint8 (N, H, W, 3)."""
    x = np.asarray(frames)
    if x.shape[1] in (1, 3) and x.shape[-1] not in (1, 3):
        x = x.transpose(0, 2, 3, 1)
    if x.dtype != np.uint8:
        x = np.clip(np.rint(x.astype(np.float32) * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.broadcast_to(x, x.shape[:3] + (3,)))


def import_lerobot(
    repo_or_root: str | Path,
    repo_id: str | None = None,
    state_keys: list[str] | None = None,
    camera_keys: dict[str, str] | None = None,
    image_size: tuple[int, int] | None = None,
    terminal_on_done: bool = True,
    progress: bool = True,
) -> list[Episode]:
    """Read a LeRobotDataset (a local folder, or a repo id found in the LeRobot cache or on the Hub) back into
    robo_rl episodes, one per LeRobot episode (episode_id = its episode index); see the module docstring."""
    import cv2
    from lerobot.datasets.video_utils import decode_video_frames

    ds, source = _open(repo_or_root, repo_id)
    meta, feats = ds.meta, ds.features
    depth = set(meta.depth_keys)
    if state_keys is None:
        state_keys = (
            [STATE]
            if STATE in feats
            else sorted(
                k
                for k, f in feats.items()
                if k.startswith("observation.") and f["dtype"] in ("float32", "float64") and len(f["shape"]) == 1
            )
        )
        if not state_keys:
            raise ValueError(f"{source}: no state feature found; available features: {sorted(feats)}")
    if camera_keys is None:
        camera_keys = {k.removeprefix(IMAGES): k for k in meta.camera_keys if k.startswith(IMAGES) and k not in depth}
        if "observation.image" in meta.camera_keys:
            camera_keys["image"] = "observation.image"
    for key in [*state_keys, ACTION, *camera_keys.values()]:
        _require(key, feats)
    for key in camera_keys.values():
        if feats[key]["dtype"] not in ("video", "image") or key in depth:
            raise ValueError(f"LeRobot feature '{key}' is not an RGB camera (dtype {feats[key]['dtype']})")
    optional = [REWARD, DONE, TERMINATED, TRUNCATED, SUCCESS, ACTION_POLICY, ACTION_BASE, ENDED, PARTITION]
    intervention_key = next((k for k in INTERVENTION_KEYS if k in feats), None)
    columns = [
        *state_keys,
        ACTION,
        "episode_index",
        "frame_index",
        "timestamp",
        *[k for k in [*optional, intervention_key] if k in feats],
    ]
    data = ds.hf_dataset.with_format("numpy", columns=columns)[:]  # non-video columns at once, no per-item decode
    data = {k: v.reshape(len(v), -1) if v.ndim == 1 else v for k, v in data.items()}

    order = np.lexsort((data["frame_index"][:, 0], data["episode_index"][:, 0]))
    ep_of_row = data["episode_index"][order, 0]
    starts = np.flatnonzero(np.r_[True, ep_of_row[1:] != ep_of_row[:-1]])
    segments = np.split(order, starts[1:])
    cam_shapes = {cam: tuple(image_size) if image_size else None for cam in camera_keys}
    episodes = []
    for rows in tqdm(segments, desc="import lerobot", unit="ep", disable=not progress):
        ep_index, n = int(data["episode_index"][rows[0], 0]), len(rows)

        def col(key, dtype, rows=rows):
            return data[key][rows].astype(dtype) if key in data else None

        ts = data["timestamp"][rows, 0].astype(np.float64)
        images = {}
        for cam, key in camera_keys.items():
            if feats[key]["dtype"] == "video":
                from_ts = meta.episodes[ep_index][f"videos/{key}/from_timestamp"]
                frames = decode_video_frames(
                    ds.root / meta.get_video_file_path(ep_index, key),
                    [from_ts + float(t) for t in ts],
                    ds.tolerance_s,
                    video_backend(),
                    return_uint8=True,
                )
            else:
                frames = ds.hf_dataset.with_format("numpy", columns=[key])[rows.tolist()][key]
            frames = _to_uint8_hwc(frames)
            if image_size is not None and frames.shape[1:3] != tuple(image_size):
                h, w = image_size
                frames = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])
            cam_shapes[cam] = frames.shape[1:3]
            images[f"image/{cam}"] = frames

        state = np.concatenate([col(k, np.float32).reshape(n, -1) for k in state_keys], axis=1)
        action = col(ACTION, np.float32).reshape(n, -1)
        fields = step_fields(state.shape[1], action.shape[1], cam_shapes)
        rec = {name: np.zeros((n + 1, *shape), dtype) for name, (shape, dtype) in fields.items()}
        obs = np.r_[np.arange(n), n - 1]  # record k shows frame k; the final record repeats frame n-1
        rec["episode_id"][:] = ep_index
        rec["step"][:] = np.arange(n + 1)
        rec["state"][:] = state[obs]
        for name, frames in images.items():
            rec[name][:] = frames[obs]
        rec["timestamp"][:] = np.r_[ts, ts[-1] + 1.0 / meta.fps]
        rec["action_executed"][1:] = action
        policy, base = col(ACTION_POLICY, np.float32), col(ACTION_BASE, np.float32)
        rec["action_policy"][1:] = action if policy is None else policy
        rec["action_base"][1:] = 0.0 if base is None else base
        zeros = np.zeros(n, bool)
        reward = col(REWARD, np.float32)
        rec["reward"][1:] = 0.0 if reward is None else reward[:, 0]

        def flag(key, default=zeros, rows=rows):
            return default if key not in data else data[key][rows, 0].astype(bool)

        done = flag(DONE)
        term = flag(TERMINATED, (done if terminal_on_done else zeros) & ~flag(TRUNCATED))
        trunc = flag(TRUNCATED, done & ~term)
        if not (TERMINATED in data and TRUNCATED in data) and not (term[-1] or trunc[-1]):
            trunc[-1] = True  # a foreign episode that ends without a done flag ended on a limit
        rec["terminated"][1:], rec["truncated"][1:] = term, trunc
        if SUCCESS in data:
            rec["success"][1:] = flag(SUCCESS)
        else:
            rec["success"][-1] = reward is not None and reward[-1, 0] > 0
        if ENDED in data:
            rec["ended_by"][1:] = data[ENDED][rows, 0]
        else:
            limit = np.where(trunc, ENDED_BY_CODES["time_limit"], 0)
            rec["ended_by"][1:] = np.where(term, ENDED_BY_CODES["env"], limit)
        if intervention_key is not None:
            rec["intervention"][1:] = flag(intervention_key)
        partition = "demos"  # a foreign dataset is prior data
        if PARTITION in data:
            code = int(data[PARTITION][rows[0], 0])
            if not 0 <= code < len(PARTITIONS):
                raise ValueError(f"{source}: episode {ep_index} has unknown partition code {code}")
            partition = PARTITIONS[code]
        if partition == "interventions" and not rec["intervention"].any():
            partition = "demos"
        tasks = meta.episodes[ep_index].get("tasks") or []  # an episode's instruction is its task (one per episode)
        instruction = str(tasks[0]) if tasks and tasks[0] != DEFAULT_TASK else None
        rec["task"][:] = NO_TASK if instruction is None else 1  # its code in [instruction]: a store re-indexes it
        check_step_batch(rec, fields)
        episodes.append(Episode(rec, partition, source, instruction))
    return episodes
