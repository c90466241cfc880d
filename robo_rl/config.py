"""Composing the hydra config tree in `launch/conf/`, and building objects from it.

Hydra and OmegaConf are imported where they are used: `robo-rl --help` and config errors answer without them.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from robo_rl.configs.settings import MISSING, TYPED_BLOCKS, check_settings, typed_config, typed_prefix
from robo_rl.configs.typed import FIXED, LABEL_KEYS, defaults_of
from robo_rl.errors import UserError
from robo_rl.task_conditioning import policy_arguments

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Found by path, not by importing `launch`: the core does not import the launchers.
CONF_DIR = Path(importlib.util.find_spec("launch").submodule_search_locations[0]) / "conf"

# Where one robot's config differs from another's on the same learner (which bus, which address, its calibration),
# left out of the config hash; the env spec (the spaces) is still checked for every actor.
PER_MACHINE_DRIVER_KEYS = ("port", "id", "host", "home")
PER_MACHINE_CAMERA_KEYS = ("device", "serial")
# What actor and learner must agree on: the task (spaces, dynamics) and the policy (its weights must load).
# Learner-only settings (algo, train budget, checkpoints) may differ, e.g. on resume with a longer budget.
SHARED_KEYS = ("env", "policy")


class ConfigError(UserError, ValueError):
    """A config problem a user can fix; the text says which key or group."""


def load_config(overrides: list[str]) -> DictConfig:
    """Compose the root config with command-line overrides (`key=value`, `group=option`), ranges checked.

    With `resume=<run folder>`, the run's saved config is the base and the overrides apply on top.
    """
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    overrides = [_shorthand(o) for o in overrides]
    resume = override_value(overrides, "resume")
    if resume and resume != "null":
        return load_saved_config(Path(resume) / "config.yaml", overrides)
    block_overrides = [o for o in overrides if _typed_block_key(o)]
    rest = [o for o in overrides if not _typed_block_key(o)]
    try:
        cfg = _compose(rest, completed=True)
        _apply_block_overrides(cfg, block_overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_one_line(e, overrides)) from None
    cfg = _apply_calibration(cfg, overrides)
    OmegaConf.set_struct(cfg, True)
    try:
        _check(cfg)
    except ConfigError as e:
        raise ConfigError(_where_an_unknown_key_came_from(str(e), overrides)) from None
    return cfg


def _where_an_unknown_key_came_from(text: str, overrides: list[str]) -> str:
    """An unknown key the command line did not set came from the experiment: say so, since the user never typed it
    (an experiment's algorithm settings do not fit another algorithm, e.g. `algo=sac` under a residual experiment)."""
    import re

    found = re.match(r"unknown config key '([\w.]+)'", text)
    given = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in overrides}
    mappings = [k for k, v in given.items() if v.startswith("{")]  # a mapping given whole holds its own keys
    if not found or found.group(1) in given or any(found.group(1).startswith(k + ".") for k in mappings):
        return text
    default = re.search(r"^\s*- experiment: (\w+)", (CONF_DIR / "config.yaml").read_text(), re.M)
    experiment = override_value(overrides, "experiment") or (default.group(1) if default else "?")
    group = found.group(1).split(".", 1)[0]
    return (
        f"{text}; it is set by experiment={experiment}, which was written for another {group} option: give an "
        f"experiment for this {group} too (robo-rl train --help lists them, e.g. experiment=rlpd for algo=sac)"
    )


CALIBRATED_KEYS = ("safety.workspace", "env.driver.home")  # what a `robo-rl calibrate` file sets


def _apply_calibration(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """`hardware.calibration=<file>`: its workspace box and home pose join the config (the command line wins)."""
    from omegaconf import OmegaConf

    path = OmegaConf.select(cfg, "hardware.calibration", default=None)
    if not path:
        return cfg
    try:
        data = OmegaConf.load(path)
    except FileNotFoundError:
        raise ConfigError(f"hardware.calibration={path}: no such file (robo-rl calibrate writes one)") from None
    except Exception as e:  # noqa: BLE001 - a broken file: one line naming it
        raise ConfigError(f"hardware.calibration={path} cannot be read: {_one_line(e)}") from None
    given = {o.partition("=")[0].lstrip("+") for o in overrides}
    for key in CALIBRATED_KEYS:
        value = OmegaConf.select(data, key, default=None)
        if value is not None and key not in given:
            if key == "env.driver.home" and OmegaConf.select(cfg, "env.driver", default=None) is None:
                raise ConfigError(
                    f"hardware.calibration={path} has a home pose, but env={cfg.env.get('_target_')} has no arm driver"
                )
            OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def _typed_block_key(override: str) -> bool:
    """`algo.<key>=<value>`: a setting of a block whose keys a typed config may default (applied after composing, so
    a setting the YAML leaves to its dataclass can be set without `+`)."""
    key = override.partition("=")[0].lstrip("+")
    return "=" in override and not override.startswith("~") and typed_prefix(key) is not None


def _apply_block_overrides(cfg: DictConfig, overrides: list[str]) -> None:
    """`overrides` applied on top of a config whose typed blocks are complete, in order (a new `_target_` gets its
    own dataclass's defaults after them); in an untyped block (a plugin's) an unknown key still needs `+`, as hydra
    asks."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if not overrides:  # completing a complete config again changes nothing
        return
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.key_or_group
        prefix = typed_prefix(key)
        typed = typed_config(prefix, OmegaConf.select(cfg, f"{prefix}._target_", default=None)) is not None
        typed = typed and "." not in key[len(prefix) + 1 :]  # inside a plugin spec (env.driver.port): not a setting
        if not (typed or o.is_add() or o.is_force_add()) and OmegaConf.select(cfg, key, default=MISSING) is MISSING:
            known = _dotted_keys(OmegaConf.to_container(cfg))
            raise ConfigError(
                f"unknown config key '{key}'{_did_you_mean(key, known)} (list the keys with: robo-rl show)"
            )
        # a typed block's unknown key is let in here and refused by name in _check
        OmegaConf.update(cfg, key, o.value(), merge=True, force_add=True)
    complete_typed_blocks(cfg)


def complete_typed_blocks(cfg: DictConfig) -> None:
    """Each typed block (`algo`, `train`) holds every setting of its dataclass: the YAML's values, then the defaults it
    left out, in the dataclass's order (`robo-rl show` and a run's config.yaml list them all). A top-level block
    without a `_target_` that no YAML writes is made from its dataclass alone; parents before their sub-blocks."""
    from omegaconf import OmegaConf, open_dict

    for prefix in sorted(TYPED_BLOCKS, key=lambda p: p.count(".")):
        block = OmegaConf.select(cfg, prefix, default=None)
        if block is None and "." not in prefix and FIXED in TYPED_BLOCKS[prefix]:
            block = OmegaConf.create({})
        cls = typed_config(prefix, block.get("_target_")) if OmegaConf.is_dict(block) else None
        if cls is None:
            continue
        given = OmegaConf.to_container(block)  # interpolations stay as written (`${algo.gamma}`)
        ordered = {k: given[k] for k in LABEL_KEYS if k in given}
        ordered.update({k: given.get(k, v) for k, v in defaults_of(cls).items()})
        ordered.update({k: v for k, v in given.items() if k not in ordered})  # sub-blocks; unknown: refused in _check
        if list(ordered.items()) == list(given.items()) and OmegaConf.select(cfg, prefix, default=None) is not None:
            continue  # already complete, in order: rebuilding it would make the same block
        with open_dict(cfg):
            OmegaConf.update(cfg, prefix, OmegaConf.create(ordered), merge=False, force_add=True)


def _drop_retired_keys(cfg: DictConfig) -> None:
    """A saved run's keys its block's dataclass has retired (`retired_keys`: settings that were never read there)."""
    from omegaconf import OmegaConf, open_dict

    for prefix in TYPED_BLOCKS:
        block = OmegaConf.select(cfg, prefix, default=None)
        cls = typed_config(prefix, block.get("_target_")) if OmegaConf.is_dict(block) else None
        fields = defaults_of(cls) if cls is not None else {}
        with open_dict(cfg):
            for key in getattr(cls, "retired_keys", ()):
                if key in block and key not in fields:
                    del block[key]


def _shorthand(override: str) -> str:
    """`gui=true` for `gui.enabled=true` (the GUI is a switch with settings, not a config group)."""
    key, _, value = override.partition("=")
    return f"gui.enabled={value}" if key.lstrip("+") == "gui" and value.lower() in ("true", "false") else override


# (conf tree's content, overrides, completed) -> the composed config: a process composes the same tree with the same
# group options many times (every check, every error's suggestion, each test), and hydra takes ~0.3 s each time.
_COMPOSED: dict[tuple, DictConfig] = {}
_COMPOSED_MAX = 128  # ~0.2 MB each


def _compose(overrides: list[str], completed: bool = False) -> DictConfig:
    """The root config composed with `overrides` (group options, untyped keys); with `completed`, its typed blocks
    completed too (`complete_typed_blocks`). A fresh copy each call; composed once per content of the tree."""
    key = (_conf_tree_digest(), tuple(overrides), completed)
    cfg = _COMPOSED.pop(key, None)
    if cfg is None:
        cfg = _compose(overrides) if completed else _compose_with_hydra(overrides)
        if completed:
            complete_typed_blocks(cfg)
        if len(_COMPOSED) >= _COMPOSED_MAX:
            del _COMPOSED[next(iter(_COMPOSED))]  # the least recently used
    _COMPOSED[key] = cfg  # last: the most recently used
    return copy.deepcopy(cfg)


def _conf_tree_digest() -> str:
    """A hash of every YAML file under `CONF_DIR` (paths and bytes): an edited file composes afresh."""
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(CONF_DIR):  # os.walk and open, not pathlib: 1.6 ms, not 10
        subfolders.sort()
        for name in sorted(f for f in files if f.endswith(".yaml")):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                digest.update(path.encode() + b"\0" + f.read() + b"\0")
    return digest.hexdigest()


def sparse_return_range(reward_type: str | None) -> list[float] | None:
    """`${sparse_return_range:${oc.select:env.reward_type,null}}`: [0, 1], the returns of a 0/1 success reward that
    ends the episode, for a sparse reward; None (no clip) for any other, or an env with no such setting."""
    return [0.0, 1.0] if reward_type == "sparse" else None


def register_resolvers() -> None:
    """The config tree's own interpolations (saved configs are resolved: only composing needs them)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("sparse_return_range"):
        OmegaConf.register_new_resolver("sparse_return_range", sparse_return_range)


def _compose_with_hydra(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def _check(cfg: DictConfig) -> None:
    from omegaconf import Container, OmegaConf

    def get(key: str):
        value = OmegaConf.select(cfg, key, default=MISSING)
        return OmegaConf.to_container(value, resolve=True) if isinstance(value, Container) else value

    try:
        check_settings(get)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def group_options(group: str) -> dict[str, str]:
    """The options of a config group (`env`, `algo`, ...): name -> its YAML's first comment line, continued to the
    end of the sentence that line ends in (a description never stops mid-sentence)."""
    options = {}
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        block = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            if not line.lstrip("#").strip().startswith("@package"):
                block.append(line.lstrip("#").strip())
        text = " ".join(block)
        start = max(0, len(block[0]) - 1) if block else 0  # the first line's last character may end the sentence
        end = re.search(r"[.!?](?= [A-Z]|$)", text[start:])
        options[path.stem] = text[: start + end.end()] if end else text
    return options


def config_groups() -> list[str]:
    return sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())


def override_value(overrides: list[str], key: str) -> str | None:
    """The value given to top-level `key` on the command line (`key=value`), or None."""
    return next((o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")), None)


def _one_line(e: Exception, overrides: list[str] = ()) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "Could not override" in text:
        key = text.split("'")[1] if "'" in text else "?"
        hint = _did_you_mean(key, _known_keys(overrides, key))
        text = f"unknown config key '{key}'{hint} (list the keys with: robo-rl show)"
    elif found := re.search(r"Could not find '([^']*)'", text):
        group, _, option = found.group(1).rpartition("/")
        options = group_options(group) if group in config_groups() else {}
        text = f"Could not find '{found.group(1)}': config group '{group}' has no option '{option}'"
        text += _did_you_mean(option, options) + f" (the options are: {', '.join(options)})" if options else ""
    return text


def _did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _known_keys(overrides: list[str], bad_key: str) -> list[str]:
    """Every dotted key of the config composed without the unknown key (for a suggestion)."""
    from omegaconf import OmegaConf

    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != bad_key]
    try:
        cfg = _compose(rest)
    except Exception:  # another override is bad too: suggest from the defaults
        cfg = _compose([])
    return _dotted_keys(OmegaConf.to_container(cfg))


def _dotted_keys(node, prefix: str = "") -> list[str]:
    keys = []
    for k, v in node.items():
        keys.append(prefix + str(k))
        if isinstance(v, dict):
            keys += _dotted_keys(v, f"{prefix}{k}.")
    return keys


def config_hash(cfg: DictConfig) -> str:
    """A short hash of what actor and learner must agree on (`SHARED_KEYS`)."""
    from omegaconf import OmegaConf

    data = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in SHARED_KEYS}
    env = data.get("env") or {}
    for key in PER_MACHINE_DRIVER_KEYS:  # two arms on one learner differ here, and may: the env spec still must match
        (env.get("driver") or {}).pop(key, None)
    for camera in (env.get("cameras") or {}).values() if isinstance(env.get("cameras"), dict) else ():
        for key in PER_MACHINE_CAMERA_KEYS:
            camera.pop(key, None)
    env.pop("dry_run", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def make_env(cfg: DictConfig, **overrides):
    """Instantiate the env of `cfg.env` (its `expert` entry is not an env argument)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    spec = OmegaConf.to_container(cfg.env, resolve=True)
    spec.pop("expert", None)
    try:
        # not recursive: a robot's driver spec stays a spec, the env builds it (against its twin on a dry run)
        return instantiate({**spec, **overrides}, _convert_="all", _recursive_=False)
    except Exception as e:  # hydra wraps the env's own error: name that one (a missing SDK, a port not found)
        cause = e.__cause__ if e.__cause__ is not None and "Error in call to target" in str(e) else e
        raise ConfigError(f"cannot build env {spec.get('_target_')}: {_one_line(cause)}") from None


def make_expert(cfg: DictConfig, env, **kwargs):
    if "expert" not in cfg.env:
        raise ConfigError(f"env {cfg.env._target_} has no scripted expert (env.expert) to record demonstrations")
    from hydra.utils import instantiate

    return instantiate(cfg.env.expert, env=env, **kwargs)


def make_policy(cfg: DictConfig, env):
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:  # the env's spaces, and for a one-hot of the instruction (policy.encoder.task_conditioning) its instructions
        return instantiate(cfg.policy, **policy_arguments(cfg.policy, env), _convert_="all")
    except InstantiationException as e:
        if isinstance(e.__cause__, ValueError | FileNotFoundError):  # a base that is missing or does not fit
            raise ConfigError(f"policy: {e.__cause__}") from None
        raise


def make_algorithm(cfg: DictConfig, policy, env):
    """The learner's algorithm: `cfg.algo`'s `_target_` builder, given the policy and the env's spaces."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(
            cfg.algo,
            policy=policy,
            observation_space=env.observation_space,
            action_dim=env.action_space.shape[0],
            state_names=tuple(getattr(env, "state_names", ())),
            _convert_="all",
        )
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, ValueError | TypeError):  # a setting the builder refuses: say which, in one line
            raise ConfigError(f"algo={cfg.algo.get('name', '?')}: {cause}") from None
        raise


def save_config(cfg: DictConfig, path: Path) -> None:
    from omegaconf import OmegaConf

    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))


def load_saved_config(path: Path, overrides: list[str] = ()) -> DictConfig:
    """A run folder's resolved config, with optional overrides applied on top, ranges checked."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not path.exists():
        raise ConfigError(f"{path} does not exist: is this a run folder made by robo-rl?")
    overrides = [_shorthand(o) for o in overrides]
    groups = [o.split("=", 1)[0] for o in overrides if o.split("=", 1)[0].lstrip("+~") in config_groups()]
    if groups:
        raise ConfigError(
            f"{path.parent} has its config resolved in config.yaml: a group option ({', '.join(groups)}="
            "...) cannot change it; leave it out, or override single keys such as env.<key>=<value>"
        )
    cfg = OmegaConf.load(path)
    _drop_retired_keys(cfg)
    complete_typed_blocks(cfg)  # a run saved before a setting existed gets its default, as its builder did
    OmegaConf.set_struct(cfg, True)  # a typo stays an error, as in a fresh config
    try:
        # in order; a mapping given for an existing key replaces it, as on a fresh config's command line
        for override in overrides:
            key = override.split("=", 1)[0]
            value = OmegaConf.select(OmegaConf.from_dotlist([override]), key)
            if isinstance(value, DictConfig) and OmegaConf.select(cfg, key, default="absent") != "absent":
                OmegaConf.update(cfg, key, OmegaConf.to_container(value), merge=False)
            else:
                cfg.merge_with(OmegaConf.from_dotlist([override]))
        complete_typed_blocks(cfg)  # and, as there, a typed block given as a mapping keeps its other defaults
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        if key and "not in struct" in str(e):
            known = _dotted_keys(OmegaConf.to_container(cfg))
            raise ConfigError(f"unknown config key '{key}' in {path}{_did_you_mean(key, known)}") from None
        raise ConfigError(_one_line(e)) from None
    _check(cfg)
    return cfg
