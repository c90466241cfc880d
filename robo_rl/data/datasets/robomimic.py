"""Import robomimic-format HDF5 demonstrations (as written by robosuite + robomimic) into robo_rl episodes.

Layout read: ``data/demo_<i>/{actions, rewards, dones, states, obs/<key>, next_obs/<key>}``, the JSON attribute
``data.attrs["env_args"]`` and optional filters ``mask/<name>`` (demo names as bytes). Files straight from
robosuite's ``collect_human_demonstrations`` hold only MuJoCo states; they need robomimic's
``dataset_states_to_obs`` first.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from robo_rl.data.datasets import Episode
from robo_rl.data.schema import ENDED_BY_CODES, check_step_batch, step_fields
from robo_rl.data.tasks import NO_TASK

log = logging.getLogger(__name__)
DEFAULT_CONTROL_HZ = 20.0  # robosuite's default control_freq, used for timestamps when env_args lacks it


def _open(path: str | Path) -> h5py.File:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"robomimic file {path.name}: no such file ({path})")
    if not h5py.is_hdf5(path):
        raise ValueError(f"robomimic file {path.name}: not an HDF5 file")
    f = h5py.File(path, "r")
    if not isinstance(f.get("data"), h5py.Group):
        top = sorted(f.keys())
        f.close()
        raise ValueError(f"robomimic file {path.name}: no 'data' group (top-level keys: {top})")
    return f


def _demo_number(name: str) -> int:
    m = re.fullmatch(r"demo_?(\d+)", name)
    return int(m.group(1)) if m else -1


def _sorted_demos(names) -> list[str]:
    return sorted((n for n in names if _demo_number(n) >= 0), key=_demo_number)


def _is_image(shape: tuple, dtype) -> bool:
    return np.dtype(dtype) == np.uint8 and len(shape) == 3


def _info(f: h5py.File, name: str) -> dict:
    data = f["data"]
    raw = data.attrs.get("env_args")
    env_args = json.loads(raw) if raw is not None else {}
    demos = _sorted_demos(data.keys())
    obs_keys = {}
    if demos and isinstance(data[demos[0]].get("obs"), h5py.Group):
        obs_keys = {k: (tuple(d.shape[1:]), str(d.dtype)) for k, d in data[demos[0]]["obs"].items()}
    masks = f.get("mask")
    filters = (
        {k: _sorted_demos(n.decode() if isinstance(n, bytes) else str(n) for n in masks[k][()]) for k in masks}
        if isinstance(masks, h5py.Group)
        else {}
    )
    return {
        "file": name,
        "env_name": env_args.get("env_name", data.attrs.get("env")),
        "env_args": env_args,
        "demos": demos,
        "lengths": {d: int(data[d].attrs.get("num_samples", len(data[d].get("actions", ())))) for d in demos},
        "obs_keys": obs_keys,  # key → (per-sample shape, dtype name), read from the first demo
        "image_keys": sorted(k for k, (s, t) in obs_keys.items() if _is_image(s, t)),
        "filter_keys": filters,  # filter name → demo names
    }


def read_robomimic_info(path: str | Path) -> dict:
    """Env name, env_args, demo names (numeric order), lengths, obs keys with shapes/dtypes and filter keys."""
    with _open(path) as f:
        return _info(f, Path(path).name)


def _frames(obs: dict, nxt: dict | None, keys: list[str], t: int) -> list[np.ndarray]:
    """Per key the T+1 observations of an episode: obs[0] then next_obs[0..T-1] (or obs[1..T-1] + obs[T-1])."""
    out = []
    for k in keys:
        later = nxt[k] if nxt is not None else np.concatenate([obs[k][1:], obs[k][-1:]])
        out.append(np.concatenate([obs[k][:1], later]).reshape(t + 1, *obs[k].shape[1:]))
    return out


def _resize(img: np.ndarray, image_size: tuple[int, int] | None, flip: bool) -> np.ndarray:
    if flip:
        img = img[:, ::-1]
    if image_size is not None and img.shape[1:3] != tuple(image_size):
        import cv2

        h, w = image_size
        img = np.stack([cv2.resize(np.ascontiguousarray(i), (w, h), interpolation=cv2.INTER_AREA) for i in img])
    return np.ascontiguousarray(img, dtype=np.uint8)


def import_robomimic(
    path: str | Path,
    state_keys: list[str] | None = None,
    camera_keys: dict[str, str] | None = None,
    filter_key: str | None = None,
    image_size: tuple[int, int] | None = None,
    flip_images: bool = False,
    success_from: str = "reward",
    progress: bool = True,
) -> list[Episode]:
    """Read the demos of a robomimic HDF5 file as `Episode`s (partition "demos", source = file name).

    A demo with T actions gives records 0..T: record 0 holds obs[0] with zero actions; record k holds
    next_obs[k-1] (without next_obs: obs[k], and for the last record a copy of obs[T-1]) and actions[k-1],
    rewards[k-1]. `state` concatenates `state_keys` (default: every 1-D non-image obs key, sorted) as float32;
    `camera_keys` maps camera name → obs key (default: `<name>_image` → `<name>`). `image_size` is (height, width),
    resized with INTER_AREA; `flip_images` flips vertically (robosuite renders upside down). The last record is
    terminated when dones[-1] is set (ended_by "env"), else truncated (ended_by "time_limit"). Success: with
    `success_from="reward"` a demo succeeded if any reward >= 1 or dones[-1]; with "all" every demo did; per-step
    `success` is reward >= 1, and the last record carries the demo's success. Demos with inconsistent lengths or
    NaN/inf are skipped with a warning.
    """
    if success_from not in ("reward", "all"):
        raise ValueError(f"success_from must be 'reward' or 'all', got {success_from!r}")
    name = Path(path).name
    with _open(path) as f:
        info = _info(f, name)
        keys = info["obs_keys"]
        if info["demos"] and not keys:
            raise ValueError(
                f"robomimic file {name}: demos have no 'obs' group (raw robosuite states only?); "
                "extract observations with robomimic's dataset_states_to_obs first"
            )
        demos = info["demos"]
        if filter_key is not None:
            if filter_key not in info["filter_keys"]:
                raise ValueError(
                    f"robomimic file {name}: unknown filter key {filter_key!r}; "
                    f"available: {sorted(info['filter_keys'])}"
                )
            demos = info["filter_keys"][filter_key]
            missing = [d for d in demos if d not in f["data"]]
            if missing:
                log.warning("robomimic file %s: filter %r lists absent demos %s", name, filter_key, missing)
            demos = [d for d in demos if d not in missing]
        if state_keys is None:
            state_keys = sorted(k for k, (s, t) in keys.items() if len(s) == 1 and not _is_image(s, t))
        if camera_keys is None:
            camera_keys = {k[: -len("_image")]: k for k in info["image_keys"] if k.endswith("_image")}
        for k in [*state_keys, *camera_keys.values()]:
            if k not in keys:
                raise ValueError(f"robomimic file {name}: unknown obs key {k!r}; available: {sorted(keys)}")
        state_dim = sum(int(np.prod(keys[k][0])) for k in state_keys)
        cams = {c: tuple(image_size) if image_size else keys[k][0][:2] for c, k in camera_keys.items()}
        hz = float(info["env_args"].get("env_kwargs", {}).get("control_freq") or DEFAULT_CONTROL_HZ)
        episodes = []
        for demo in tqdm(demos, desc=f"robomimic {name}", unit="demo", disable=not progress):
            try:
                grp = f["data"][demo]
                actions = np.asarray(grp["actions"][()], np.float32)
                fields = step_fields(state_dim, actions.shape[-1] if actions.ndim == 2 else 0, cams)
                rec = _demo_records(grp, actions, state_keys, camera_keys, image_size, flip_images, success_from, hz)
                rec["episode_id"][:] = _demo_number(demo)
                rec = {k: np.asarray(rec[k], dtype) for k, (_, dtype) in fields.items()}
                check_step_batch(rec, fields)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("robomimic file %s: skipping %s: %s", name, demo, e)
                continue
            episodes.append(Episode(rec, partition="demos", source=name))
    if not episodes:
        log.warning("robomimic file %s: no demos imported", name)
    return episodes


def _demo_records(grp, actions, state_keys, camera_keys, image_size, flip, success_from, hz) -> dict:
    t = len(actions)
    if t == 0 or actions.ndim != 2:
        raise ValueError(f"actions have shape {actions.shape}, expected (T>0, action_dim)")
    rewards = np.asarray(grp["rewards"][()] if "rewards" in grp else np.zeros(t), np.float32).reshape(-1)
    dones = np.asarray(grp["dones"][()] if "dones" in grp else np.zeros(t), bool).reshape(-1)
    used = [*state_keys, *camera_keys.values()]
    obs = {k: grp["obs"][k][()] for k in used}
    nxt = {k: grp["next_obs"][k][()] for k in used} if "next_obs" in grp else None
    lengths = {
        "rewards": len(rewards),
        "dones": len(dones),
        **{f"obs/{k}": len(v) for k, v in obs.items()},
        **{f"next_obs/{k}": len(v) for k, v in (nxt or {}).items()},
    }
    bad = {k: n for k, n in lengths.items() if n != t}
    if bad:
        raise ValueError(f"inconsistent lengths: {t} actions but {bad}")
    states = [s.reshape(t + 1, -1).astype(np.float32) for s in _frames(obs, nxt, state_keys, t)]
    zero = np.zeros((1, actions.shape[1]), np.float32)
    act = np.concatenate([zero, actions])
    success_ep = bool(dones[-1] or (rewards >= 1).any()) if success_from == "reward" else True
    n = t + 1
    rec = {
        "episode_id": np.zeros(n, np.int64),
        "step": np.arange(n, dtype=np.int32),
        "state": np.concatenate(states, axis=1) if states else np.zeros((n, 0), np.float32),
        "action_executed": act,
        "action_policy": act.copy(),
        "action_base": np.zeros_like(act),
        "reward": np.concatenate([[0.0], rewards]),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "intervention": np.zeros(n, bool),
        "success": np.concatenate([[False], rewards >= 1]),
        "ended_by": np.zeros(n, np.int8),
        "policy_version": np.zeros(n, np.int64),
        "timestamp": np.arange(n, dtype=np.float64) / hz,
        "task": np.full(n, NO_TASK, np.int32),  # robomimic files name no instruction
    }
    rec["terminated" if dones[-1] else "truncated"][-1] = True
    rec["success"][-1] = success_ep
    rec["ended_by"][-1] = ENDED_BY_CODES["env" if dones[-1] else "time_limit"]
    for cam, frames in zip(camera_keys, _frames(obs, nxt, list(camera_keys.values()), t), strict=True):
        rec[f"image/{cam}"] = _resize(frames, image_size, flip)
    return rec
