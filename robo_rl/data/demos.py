"""Scripted-expert demonstrations for simulated tasks, cached on disk and reused."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from robo_rl.config import ConfigError, make_env, make_expert
from robo_rl.data.datasets.io import load_step_batch, save_step_batch
from robo_rl.data.schema import SCHEMA_VERSION, EpisodeRecorder, fields_for_env, stack_records
from robo_rl.data.tasks import TaskTable, pack_instructions


def rollout_episode(
    env, act, seed: int, episode_id: int, hold_success: int = 0, tasks: TaskTable | None = None
) -> tuple[list[dict], bool]:
    """Run one episode with `act(obs) -> action`; return its step records and whether it succeeded.

    `hold_success` > 0 (with an env that does not end at its success): a success goes on up to that many steps more,
    so that it shows in more than one frame (a success classifier's positives), and the episode ends at its last
    success frame if the success is lost before then (a slipping cube); either way its last record is terminal.
    Records index the episode's instruction in `tasks` (share one table across the episodes of one batch)."""
    recorder = EpisodeRecorder(env.action_space.shape[0], tasks=tasks)
    obs, _ = env.reset(seed=seed)
    records, first = [recorder.reset(obs, episode_id)], None
    while True:
        obs, reward, terminated, truncated, info = env.step(act(obs))
        if first is not None and not info["success"]:  # lost: the episode ends where it still held
            records[-1]["terminated"] = True
            return records, True
        records.append(recorder.record_step(obs, reward, terminated, truncated, info))
        if hold_success and info["success"] and first is None:
            first = len(records) - 1
        if terminated or truncated or (first is not None and len(records) - 1 >= first + hold_success):
            if first is not None:  # a held success ends the episode
                records[-1]["terminated"] = True
            return records, bool(info["success"])


def recording_config(cfg: DictConfig) -> DictConfig:
    """The config the scripted expert records under: the run's, or with `demos.randomize=false` the same without
    `env.randomize` (a scripted expert fails under a step or two of latency; the learner still trains under it) but
    for the keys in `demos.randomize_keep` (ones the expert handles, such as the cube's size)."""
    if cfg.demos.get("randomize", True) or cfg.env.get("randomize") is None:
        return cfg
    nominal = cfg.copy()
    keep = {k: v for k, v in cfg.env.randomize.items() if k in cfg.demos.get("randomize_keep", ())}
    nominal.env.randomize = keep or None
    return nominal


def demos_path(cfg: DictConfig) -> Path:
    """The cache file for the env config the demonstrations are recorded under, the demo config and the env/expert
    source (a changed task re-records). `demos.randomize(_keep)` is not in the key: the env it picks is, so a nominal
    recording is shared with runs that never randomised."""
    cfg = recording_config(cfg)
    demo_settings = {
        k: v for k, v in OmegaConf.to_container(cfg.demos).items() if k not in ("randomize", "randomize_keep")
    }
    key = {
        "env": OmegaConf.to_container(cfg.env, resolve=True),
        "demos": demo_settings,
        "source": [_source_digest(cfg.env._target_), _source_digest(cfg.env.get("expert", {}).get("_target_"))],
        "schema": SCHEMA_VERSION,  # a cache of another record layout is recorded again, not loaded
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(cfg.cache_dir) / "demos" / f"{cfg.env._target_.rsplit('.', 1)[-1]}_{digest}.npz"


def _source_digest(target: str | None) -> str:
    if not target:
        return ""
    module = importlib.import_module(target.rsplit(".", 1)[0])
    return hashlib.sha256(Path(inspect.getsourcefile(module)).read_bytes()).hexdigest()[:12]


def load_or_make_demos(cfg: DictConfig, progress: bool = True) -> tuple[dict | None, Path | None, bool]:
    """The cached demonstrations for this env and demo config, generating them first if needed.

    Returns (step batch, cache path, whether they came from the cache); (None, None, False) with
    `demos.num_episodes=0` and no `demos.path` (learning from online data and interventions alone). Only successful
    episodes are kept.
    """
    if cfg.demos.path:
        return load_demo_dataset(cfg), Path(cfg.demos.path), True
    if cfg.demos.num_episodes == 0:
        return None, None, False
    if "expert" not in cfg.env:  # decided from the config: opening a robot env to find out would open the robot
        raise ConfigError(
            f"env {cfg.env._target_} has no scripted expert (env.expert) to record demonstrations with, as on a "
            "robot: record them with a device (robo-rl record <dst> human=keyboard episodes=20) and give "
            "demos.path=<dst>, or set demos.num_episodes=0 to learn from online data and interventions alone"
        )
    path = demos_path(cfg)
    if path.exists():
        try:
            return load_step_batch(path), path, True
        except (OSError, ValueError) as e:
            print(f"demo cache {path} is unreadable ({e}); recording it again")
    cfg = recording_config(cfg)
    env = make_env(cfg)
    expert = make_expert(cfg, env, noise_std=cfg.demos.noise_std, seed=cfg.demos.seed)
    fields = fields_for_env(env)
    records, kept, attempts, tasks = [], 0, 0, TaskTable()
    bar = tqdm(total=cfg.demos.num_episodes, desc="demonstrations", unit="ep", disable=not progress)
    while kept < cfg.demos.num_episodes:
        if attempts >= 3 * cfg.demos.num_episodes:
            raise RuntimeError(f"the scripted expert succeeded in only {kept} of {attempts} episodes")
        expert.reset()
        episode, success = rollout_episode(env, expert.act, cfg.demos.seed + attempts, attempts, tasks=tasks)
        attempts += 1
        if success:
            records += episode
            kept += 1
            bar.update(1)
    bar.close()
    env.close()
    batch = pack_instructions(stack_records(records, fields), tasks.names)  # the cache carries its instructions
    path.parent.mkdir(parents=True, exist_ok=True)
    save_step_batch(path, batch)
    return batch, path, False


def env_fields(cfg: DictConfig) -> dict[str, tuple]:
    """The env's record layout, from its config where its class can tell (`spec_from_config`: a robot's always can,
    and opening it to find out would open the robot), else from the opened env."""
    from robo_rl.envs.spec import static_spec

    try:
        spec = static_spec(OmegaConf.to_container(cfg.env, resolve=True))
    except ValueError as e:
        raise ConfigError(f"env {cfg.env._target_}: {e}") from None
    if spec is not None:
        return fields_for_env(spec)
    env = make_env(cfg)
    fields = fields_for_env(env)
    env.close()
    return fields


def load_demo_dataset(cfg: DictConfig) -> dict[str, np.ndarray]:
    """Demonstrations from `demos.path` (a replay store or run folder, a LeRobot dataset, a robomimic file),
    checked against this env's observation and action layout."""
    from robo_rl.config import ConfigError
    from robo_rl.data.datasets import join_episodes
    from robo_rl.data.datasets.io import describe_fields, fields_of, load_episodes, same_layout

    try:
        episodes = load_episodes(cfg.demos.path, progress=False)
    except (ValueError, FileExistsError) as e:
        raise ConfigError(f"demos.path: {e}") from None
    if not episodes:
        raise ConfigError(f"demos.path: {cfg.demos.path} holds no episodes")
    batch = join_episodes(episodes)
    fields = env_fields(cfg)
    if not same_layout(fields_of(batch), fields):
        raise ConfigError(
            f"demos.path: {cfg.demos.path} holds {describe_fields(fields_of(batch))}; "
            f"this env needs {describe_fields(fields)}"
        )
    return batch
