"""RECAP's labels (π*0.6, Physical Intelligence 2025; RLinf's open RECAP and STEAM): every recorded action gets an
advantage and a binary "advantage positive" indicator, written beside the data, never into it.

Returns. An episode of T steps pays r = −1 a step, and at its end 0 if it succeeded or −C (`recap.failure_penalty`,
C = the task's longest episode by default) if it did not (a time limit, a person's failure label, an e-stop: any end
without a success). The return from the observation of record t is G_t = Σ_{k>t} r_k; dividing by
`max_episode_steps` + C puts every return in [-1, 0] (−1: failed at the time limit). An episode that had not ended
when the data was written (no terminated/truncated flag on its last record) is left out: its end is unknown.

Advantages. A_t = Σ_{k=1..N} r_t+k + V(s_t+N) − V(s_t), the sum and the value stopping at the episode's end (V = 0
after it). With the return value, V is the categorical model of recap_value.py; with STEAM, V(s_t+N) − V(s_t) is the
pessimistic pairwise progress from s_t to s_t+N.

Indicator. Per instruction, the actions whose advantage is above the (1 − `recap.positive_share`) quantile are
positive; the thresholds are stored. A human's corrective actions are positive regardless (π*0.6 does the same).

The sidecar (`<data>/recap/` for a run folder, replay store or LeRobot dataset; `<file>.recap/` for an .npz): one row
per observation an action was taken from (records 0..T−1 of each labelled episode, i.e. every LeRobot frame), keyed by
the data path's index, its source, episode id (a LeRobot episode_index) and step (its frame_index), with the return,
V, the advantage of the action taken from it, the indicator and the value's version (`labels.parquet`), and what made
them (`labels.json`: data paths, settings, thresholds, counts). The value's weights: `value.pt`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from robo_rl.config import ConfigError
from robo_rl.data.datasets import Episode

LABELS, META, VALUE = "labels.parquet", "labels.json", "value.pt"
DEFAULT_INSTRUCTION = "do the task"  # what STEAM's critics read for data without an instruction


# --- returns, advantages, indicator (numpy, per episode) -----------------------------------------------------------
def step_rewards(length: int, success: bool, scale: float, failure_penalty: float) -> np.ndarray:
    """r_1..r_T, normalised by `scale`: −1 a step, the last one 0 on a success and −failure_penalty otherwise."""
    r = np.full(length, -1.0)
    if length:
        r[-1] = 0.0 if success else -failure_penalty
    return r / scale


def returns_to_go(rewards: np.ndarray) -> np.ndarray:
    """G_0..G_T−1 from r_1..r_T: G_t = r_t+1 + ... + r_T."""
    return np.cumsum(rewards[::-1])[::-1].copy()


def n_step_advantages(rewards: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """A_t = r_t+1 + ... + r_t+N + V(s_t+N) − V(s_t) for t = 0..T−1, stopping at the end (V there is 0)."""
    length = len(rewards)
    padded = np.concatenate([[0.0], np.cumsum(rewards)])  # padded[k] = r_1 + ... + r_k
    t = np.arange(length)
    end = np.minimum(t + n, length)
    after = np.where(end < length, np.concatenate([values, [0.0]])[end], 0.0)
    return padded[end] - padded[t] + after - values


def progress_advantages(rewards: np.ndarray, progress_gain: np.ndarray, n: int) -> np.ndarray:
    """STEAM's A_t: the N-step reward sum plus the progress gain from s_t to s_t+N (V's difference)."""
    zeros = np.zeros(len(rewards))
    return n_step_advantages(rewards, zeros, n) + progress_gain


def positive_indicator(advantages: np.ndarray, groups: np.ndarray, share: float) -> tuple[np.ndarray, dict]:
    """Each row positive when its advantage is above its group's (1 − share) quantile; the thresholds per group."""
    positive = np.zeros(len(advantages), bool)
    thresholds = {}
    for g in np.unique(groups):
        rows = groups == g
        cut = float(np.quantile(advantages[rows], 1.0 - share))
        thresholds[str(g)] = cut
        positive[rows] = advantages[rows] > cut
    return positive, thresholds


def ended(ep: Episode) -> bool:
    return bool(ep.records["terminated"][-1] or ep.records["truncated"][-1])


# --- the data -------------------------------------------------------------------------------------------------------
@dataclass
class Steps:
    """The labelled episodes' observation rows (records 0..T−1 of each), flattened."""

    data: np.ndarray  # index of the data path each row came from
    source: np.ndarray  # str
    episode_id: np.ndarray
    step: np.ndarray
    episode: np.ndarray  # 0.. per labelled episode
    instruction: np.ndarray  # str ("" where none)
    states: np.ndarray
    images: dict[str, np.ndarray]
    rewards: np.ndarray  # r of the action taken from this row's observation (normalised)
    returns: np.ndarray
    corrected: np.ndarray  # the action taken from this observation was a human's


def load_data(paths: list[Path], progress: bool = True) -> list[tuple[int, Episode]]:
    """(data index, episode) of every episode at `paths`, in order; a path without episodes refused in one line."""
    from robo_rl.data.datasets.io import load_some_episodes

    out = []
    for i, path in enumerate(paths):
        try:
            out += [(i, ep) for ep in load_some_episodes(path, progress=progress)]
        except ValueError as e:
            raise ConfigError(f"recap: {e}") from None
    return out


def episode_scale(settings, episodes: list[Episode]) -> tuple[int, float, float]:
    """(max_episode_steps, failure penalty, the returns' normaliser) of these settings and data."""
    longest = max(len(e) for e in episodes)
    t_max = settings.max_episode_steps or longest
    if longest > t_max:
        raise ConfigError(
            f"recap.max_episode_steps={t_max} but the data holds an episode of {longest} steps: raise it (or null)"
        )
    penalty = float(t_max if settings.failure_penalty is None else settings.failure_penalty)
    return t_max, penalty, t_max + penalty


def flatten(labelled: list[tuple[int, Episode]], settings, cameras: bool) -> tuple[Steps, dict]:
    """The rows to label, and what the returns were computed with."""
    t_max, penalty, scale = episode_scale(settings, [e for _, e in labelled])
    parts = []
    for k, (index, ep) in enumerate(labelled):
        r = ep.records
        length = len(ep)
        rewards = step_rewards(length, ep.success, scale, penalty)
        parts.append(
            {
                "data": np.full(length, index),
                "source": np.full(length, ep.source or "data", dtype=object),
                "episode_id": r["episode_id"][:length].astype(np.int64),
                "step": r["step"][:length].astype(np.int64),
                "episode": np.full(length, k),
                "instruction": np.full(length, ep.instruction or "", dtype=object),
                "states": r["state"][:length],
                "rewards": rewards,
                "returns": returns_to_go(rewards),
                "corrected": r["intervention"][1 : length + 1].astype(bool),
                **{c: v[:length] for c, v in r.items() if c.startswith("image/") and cameras},
            }
        )
    cat = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    images = {k[len("image/") :]: cat.pop(k) for k in list(cat) if k.startswith("image/")}
    steps = Steps(images=images, **cat)
    return steps, {"max_episode_steps": t_max, "failure_penalty": penalty, "return_scale": scale}


# --- the label command ------------------------------------------------------------------------------------------------
def sidecar_dir(path: Path) -> Path:
    """Where the labels of the data at `path` go: `<path>/recap/` for a folder, `<file>.recap/` for a file."""
    return path / "recap" if path.is_dir() else path.with_suffix(".recap")


def label(paths: list[Path], settings, out: Path | None = None, device="cpu", progress: bool = True) -> dict:
    """Fit the value on every episode at `paths`, compute the advantages and the indicator, write the sidecar beside
    the first path (or at `out`); return the summary written to labels.json."""
    from robo_rl.offline.bc import save_atomic
    from robo_rl.offline.recap_value import fit_value, predict_values

    start = time.perf_counter()
    out = out or sidecar_dir(paths[0])
    everything = load_data(paths, progress)
    labelled = [(i, e) for i, e in everything if ended(e) and len(e)]
    if not labelled:
        raise ConfigError(f"recap: none of the {len(everything)} episodes at {paths[0]} has ended: nothing to label")
    steam = settings.value == "steam"
    with_cameras = steam or settings.value_images
    if with_cameras and not any(k.startswith("image/") for k in labelled[0][1].records):
        raise ConfigError(
            f"recap.value={settings.value}{' with recap.value_images=true' if not steam else ''} needs camera frames "
            "and this data has none: record with cameras (env.cameras=[front]) or use recap.value=returns"
        )
    steps, scale = flatten(labelled, settings, with_cameras)
    if steam:
        values, advantages, fit = steam_advantages(labelled, steps, settings, progress)
    else:
        model, fit = fit_value(steps.states, steps.images, steps.returns, settings, device, progress)
        values = predict_values(model, steps.states, steps.images, device)
        advantages = np.concatenate(
            [
                n_step_advantages(steps.rewards[rows], values[rows], settings.n_step)
                for rows in episode_rows(steps.episode)
            ]
        )
    positive, thresholds = positive_indicator(advantages, steps.instruction.astype(str), settings.positive_share)
    if settings.interventions_positive:
        positive |= steps.corrected
    previous = read_meta(out)
    version = int(previous.get("value_version", 0)) + 1 if previous else 1
    out.mkdir(parents=True, exist_ok=True)
    if not steam:
        save_atomic(model.cpu().checkpoint(value_version=version, scale=scale), out / VALUE)
    write_labels(out, steps, values, advantages, positive, version)
    meta = {
        "value_version": version,
        "data": [str(Path(p).resolve()) for p in paths],
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(settings).items()},
        **scale,
        "thresholds": thresholds,
        "episodes": len(labelled),
        "episodes_left_out": len(everything) - len(labelled),
        "rows": int(len(advantages)),
        "positive_share": float(positive.mean()),
        "corrected_rows": int(steps.corrected.sum()),
        "success_rate": float(np.mean([e.success for _, e in labelled])),
        "value_fit": fit,
        "label_s": time.perf_counter() - start,
    }
    tmp = out / (META + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2))
    tmp.replace(out / META)
    return {**meta, "sidecar": str(out)}


def episode_rows(episode: np.ndarray) -> list[np.ndarray]:
    """The row indices of each episode, in order (rows of one episode are contiguous)."""
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    return np.split(np.arange(len(episode)), starts[1:])


def steam_advantages(labelled, steps: Steps, settings, progress: bool) -> tuple[np.ndarray, np.ndarray, dict]:
    """STEAM: progress critics trained on the labelled episodes; per row the worst critic's progress from s_t to
    s_t+N plus the N-step rewards; V(s_t) reported as the worst critic's per-frame progress − 1."""
    from robo_rl.offline.recap_value import pessimistic_progress, train_critic_ensemble
    from robo_rl.rewards.base import Task

    cameras = sorted(steps.images)
    episodes = [e for _, e in labelled]
    instructions = [e.instruction or DEFAULT_INSTRUCTION for e in episodes]
    critics = train_critic_ensemble(episodes, instructions, cameras, settings, progress)
    values, advantages = [], []
    for k, (ep, text) in enumerate(zip(episodes, instructions, strict=True)):
        length = len(ep)
        later = np.minimum(np.arange(length) + settings.n_step, length)
        now = {c: ep.records[f"image/{c}"][:length] for c in cameras}
        then = {c: ep.records[f"image/{c}"][later] for c in cameras}
        gain = pessimistic_progress(critics, now, then, text)
        rewards = steps.rewards[steps.episode == k]
        advantages.append(progress_advantages(rewards, gain, settings.n_step))
        progress_now = np.min([c.score(now, Task(text)).progress for c in critics], axis=0)
        values.append(progress_now.astype(np.float64) - 1.0)
    return np.concatenate(values), np.concatenate(advantages), {"critics": len(critics), "steps": settings.critic_steps}


# --- the sidecar --------------------------------------------------------------------------------------------------
def write_labels(out: Path, steps: Steps, values, advantages, positive, version: int) -> Path:
    """labels.parquet, written to a temporary file and renamed (a reader never sees half of it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "data": steps.data.astype(np.int32),
            "source": steps.source.astype(str),
            "episode_id": steps.episode_id,
            "step": steps.step,
            "return": steps.returns.astype(np.float32),
            "value": np.asarray(values, np.float32),
            "advantage": np.asarray(advantages, np.float32),
            "positive": np.asarray(positive, bool),
            "value_version": np.full(len(steps.step), version, np.int32),
        }
    )
    tmp = out / (LABELS + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(out / LABELS)
    return out / LABELS


def read_meta(out: Path) -> dict:
    path = Path(out) / META
    return json.loads(path.read_text()) if path.exists() else {}


def read_labels(out: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The sidecar's columns and its labels.json; a folder without one refused in one line."""
    import pyarrow.parquet as pq

    path = Path(out) / LABELS
    if not path.exists():
        raise ConfigError(f"recap: {out} holds no labels ({LABELS}): run `robo-rl recap label` on the data first")
    table = pq.read_table(path)
    return {name: table.column(name).to_numpy() for name in table.column_names}, read_meta(out)
