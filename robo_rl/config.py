"""Composing the hydra config tree in `launch/conf/`, and building objects from it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import launch

CONF_DIR = Path(launch.__file__).parent / "conf"

# What actor and learner must agree on: the task (spaces, dynamics) and the policy (its weights must load).
# Learner-only settings (algo, train budget, checkpoints) may differ, e.g. on resume with a longer budget.
SHARED_KEYS = ("env", "policy")


class ConfigError(ValueError):
    """A config problem a user can fix; the text says which key or group."""


def load_config(overrides: list[str]) -> DictConfig:
    """Compose the root config with command-line overrides (`key=value`, `group=option`).

    With `resume=<run folder>`, the run's saved config is the base and the overrides apply on top.
    """
    resume = override_value(overrides, "resume")
    if resume and resume != "null":
        return load_saved_config(Path(resume) / "config.yaml", overrides)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_one_line(e)) from None
    OmegaConf.set_struct(cfg, True)
    return cfg


def override_value(overrides: list[str], key: str) -> str | None:
    """The value given to top-level `key` on the command line (`key=value`), or None."""
    return next((o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")), None)


def _one_line(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "Could not override" in text:
        key = text.split("'")[1] if "'" in text else "?"
        text = f"unknown config key '{key}' (list the keys with: robo-rl show)"
    elif "Could not find" in text:
        text += " (the options are the .yaml files in launch/conf/<group>/)"
    return text


def config_hash(cfg: DictConfig) -> str:
    """A short hash of what actor and learner must agree on (`SHARED_KEYS`)."""
    data = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in SHARED_KEYS}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def make_env(cfg: DictConfig, **overrides):
    """Instantiate the env of `cfg.env` (its `expert` entry is not an env argument)."""
    spec = OmegaConf.to_container(cfg.env, resolve=True)
    spec.pop("expert", None)
    try:
        return instantiate({**spec, **overrides}, _convert_="all")
    except Exception as e:
        raise ConfigError(f"cannot build env {spec.get('_target_')}: {_one_line(e)}") from None


def make_expert(cfg: DictConfig, env, **kwargs):
    if "expert" not in cfg.env:
        raise ConfigError(f"env {cfg.env._target_} has no scripted expert (env.expert) to record demonstrations")
    return instantiate(cfg.env.expert, env=env, **kwargs)


def make_policy(cfg: DictConfig, env):
    return instantiate(
        cfg.policy,
        observation_space=env.observation_space,
        action_dim=env.action_space.shape[0],
        _convert_="all",
    )


def save_config(cfg: DictConfig, path: Path) -> None:
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))


def load_saved_config(path: Path, overrides: list[str] = ()) -> DictConfig:
    """A run folder's resolved config, with optional overrides applied on top."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist: is this a run folder made by robo-rl?")
    cfg = OmegaConf.load(path)
    OmegaConf.set_struct(cfg, True)  # a typo stays an error, as in a fresh config
    try:
        cfg.merge_with(OmegaConf.from_dotlist(list(overrides)))
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    return cfg
