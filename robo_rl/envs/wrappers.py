"""The actor's env: the task's env inside a chain of small wrappers named by `actor.wrappers`.

Each entry names a top-level config node with a `_target_` (a wrapper class or builder taking `env=`) or is such a
node itself; entries are applied in order, the first innermost: `[safety, human]` checks the human's commands too.
An empty node (the `none` option of its group) is skipped. Only the actor builds this chain: the learner never opens
an env (it reads an `EnvSpec`, robo_rl/envs/spec.py).
"""

from __future__ import annotations

from robo_rl.config import ConfigError, make_env
from robo_rl.envs.groups import GroupedResets
from robo_rl.envs.resets import ResetWrapper, with_resets


def actor_wrapper_nodes(cfg):
    """(entry, config node) of each wrapper the actor builds, in order: empty nodes (`human=none`) and those the
    learner applies itself (`where: learner`) are skipped; an entry naming no config node is a ConfigError."""
    from omegaconf import DictConfig, OmegaConf

    for entry in cfg.actor.wrappers:
        node = entry if isinstance(entry, DictConfig) else OmegaConf.select(cfg, str(entry), default=None)
        if node is None and isinstance(entry, str):
            raise ConfigError(f"actor.wrappers names '{entry}', which is not a config node")
        if node and "_target_" in node and node.get("where", "actor") == "actor":
            yield entry, node


def _settings(node) -> dict:
    from omegaconf import OmegaConf

    return {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "where"}


def wrap(env, node, name: str):
    """`env` inside the wrapper config `node` names (nested specs stay specs); a wrapper that refuses its settings is
    one line naming it (`name`), and the env is closed."""
    from hydra.utils import instantiate

    try:
        return instantiate(_settings(node), env=env, _convert_="all", _recursive_=False)
    except Exception as e:
        env.close()
        raise ConfigError(f"{name}: {e.__cause__ or e}") from None


def make_actor_env(cfg):
    env = make_env(cfg)
    try:  # env.reset_mode: innermost, so a safety stop is acknowledged before the reset moves the arm
        env = with_resets(env)
    except ValueError as e:  # a taught trajectory that is missing or made for another robot
        env.close()
        raise ConfigError(str(e)) from None
    for entry, node in actor_wrapper_nodes(cfg):
        env = wrap(env, node, f"actor wrapper '{entry if isinstance(entry, str) else node._target_}'")
    resets = find_wrapper(env, ResetWrapper)
    if resets is not None and find_wrapper(env, GroupedResets) is not None:
        env.close()
        raise ConfigError(
            f"env.reset_mode={resets.settings.mode} starts each episode where the last left the scene; group_resets "
            "needs each group's episodes to start from one seeded state: use one of them"
        )
    if resets is not None:  # a failed reset check listens to the human's devices (their `poll`) while it waits
        layer = env
        while layer is not None:
            if hasattr(type(layer), "poll") and hasattr(layer, "devices"):
                resets.add_poller(layer.poll)
            layer = getattr(layer, "env", None)
    return env


def make_guarded_env(cfg):
    """The task's env behind its safety layer when one is configured (`safety=default` on a robot): what evaluation
    runs, so that a checkpoint's evaluation on metal is guarded like its training."""
    from omegaconf import OmegaConf

    env = make_env(cfg)
    node = OmegaConf.select(cfg, "safety", default=None)
    return wrap(env, node, "the safety layer") if node and "_target_" in node else env


def wrapper_extras(cfg) -> dict[str, tuple]:
    """What the configured wrappers add to each record, from the config alone (a wrapper class says so in its
    `record_extras_from_config(**settings)`): the learner's record layout without opening the env."""
    from hydra.utils import get_class

    extras: dict[str, tuple] = {}
    for _, node in actor_wrapper_nodes(cfg):
        builder = getattr(get_class(node._target_), "record_extras_from_config", None)
        if builder is not None:
            extras.update(builder(**{k: v for k, v in _settings(node).items() if k != "_target_"}))
    return extras


def find_safety(env):
    """The safety layer in `env`'s chain (a wrapper that can be acknowledged after a stop), or None: the core finds
    it by what it does, never importing `hardware`."""
    while env is not None:
        if hasattr(type(env), "acknowledge") and hasattr(type(env), "stats"):
            return env
        env = getattr(env, "env", None)
    return None


def find_wrapper(env, cls):
    """The wrapper of type `cls` in `env`'s chain, or None."""
    while env is not None:
        if isinstance(env, cls):
            return env
        env = getattr(env, "env", None)
    return None
