"""`EnvSpec`: what the learner needs to know of a task (its spaces), without opening the env.

On a robot, opening the env opens the hardware; the learner must never do that. It takes the spec from, in order:
the run folder's `env_spec.json` (written by the actor or by `robo-rl train`, kept for resume), a file given as
`env_spec=<path>`, or the env class's `spec_from_config(**env_config)` when the class can tell its spaces from its
config alone; otherwise it waits for an actor: the spec in its hello, or the run folder's file it writes. An actor
whose env differs is refused with the difference named (at its hello, and by the run folder's file).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from robo_rl.envs.base import make_observation_space

log = logging.getLogger(__name__)

SPEC_FILE = "env_spec.json"
SPEC_VERSION = 1


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """The spaces of a task; it stands in for the env wherever only its spaces are read (policy, algorithm,
    record layout)."""

    state_dim: int
    action_dim: int
    cameras: dict[str, tuple[int, int]]
    state_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()
    control_hz: float = 10.0
    # what the actor's wrappers add to each record (a reward model's raw env reward, ...): name → (shape, dtype)
    extras: dict[str, tuple[tuple[int, ...], str]] = dataclasses.field(default_factory=dict)
    instructions: tuple[str, ...] = ()  # every instruction the env can give, in its fixed order (`env.instructions`)

    @property
    def record_extras(self) -> dict[str, tuple]:
        return {k: (tuple(shape), np.dtype(dtype)) for k, (shape, dtype) in self.extras.items()}

    @property
    def observation_space(self) -> gym.spaces.Dict:
        return make_observation_space(self.state_dim, self.cameras)

    @property
    def action_space(self) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(
            version=SPEC_VERSION,
            cameras={k: list(v) for k, v in self.cameras.items()},
            state_names=list(self.state_names),
            action_names=list(self.action_names),
            instructions=list(self.instructions),
            extras={k: [list(shape), str(dtype)] for k, (shape, dtype) in self.extras.items()},
        )
        return out

    @classmethod
    def from_json(cls, data: dict, where: str = "env spec") -> EnvSpec:
        if not isinstance(data, dict) or data.get("version") != SPEC_VERSION:
            raise ValueError(f"{where}: not an env spec of version {SPEC_VERSION} (got {str(data)[:80]})")
        try:
            return cls(
                int(data["state_dim"]),
                int(data["action_dim"]),
                {str(k): (int(v[0]), int(v[1])) for k, v in data["cameras"].items()},
                tuple(map(str, data.get("state_names", ()))),
                tuple(map(str, data.get("action_names", ()))),
                float(data.get("control_hz", 10.0)),
                {str(k): (tuple(int(x) for x in v[0]), str(np.dtype(v[1]))) for k, v in data.get("extras", {}).items()},
                tuple(map(str, data.get("instructions", ()))),
            )
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"{where}: malformed env spec ({type(e).__name__}: {e})") from None

    def differences(self, other: EnvSpec) -> list[str]:
        """What differs from `other`, one phrase each (empty when they match)."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs and not (
                f.name in ("state_names", "action_names", "instructions") and not (mine and theirs)
            ):
                out.append(f"{f.name} {mine} vs {theirs}")
        return out


def spec_of(env, extras: dict | None = None) -> EnvSpec:
    """The spec of an opened env (or of anything with its spaces); `extras`: what wrappers not around it add to each
    record (`robo_rl.envs.wrappers.wrapper_extras`), beside the env's own."""
    space = env.observation_space
    return EnvSpec(
        int(space["state"].shape[0]),
        int(env.action_space.shape[0]),
        {name: tuple(int(x) for x in s.shape[:2]) for name, s in space["images"].spaces.items()},
        tuple(getattr(env, "state_names", ())),
        tuple(getattr(env, "action_names", ())),
        float(getattr(env, "control_hz", 10.0)),
        _extras_json({**(getattr(env, "record_extras", None) or {}), **(extras or {})}),
        tuple(getattr(env, "instructions", None) or ()),
    )


def _extras_json(extras: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    return {str(k): (tuple(int(x) for x in shape), str(np.dtype(dtype))) for k, (shape, dtype) in extras.items()}


def read_spec(path: Path) -> EnvSpec:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"env spec {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"env spec {path} cannot be read: {e}") from None
    return EnvSpec.from_json(data, str(path))


def write_spec(spec: EnvSpec, run_dir: Path) -> Path:
    """Write the run folder's spec; if one is there, it must match (ValueError naming the difference)."""
    path = Path(run_dir) / SPEC_FILE
    path.parent.mkdir(parents=True, exist_ok=True)  # an actor may start before its learner made the folder
    if not path.exists():  # learner and actor may both get here at once: the first link wins, whole
        tmp = path.with_name(f".{SPEC_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(spec.to_json(), indent=1))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    diff = read_spec(path).differences(spec)
    if diff:
        raise ValueError(f"this env does not match the run's env spec {path}: {'; '.join(diff)}")
    return path


def static_spec(env_cfg: dict, extras: dict | None = None) -> EnvSpec | None:
    """The spec an env class tells from its config alone (`spec_from_config`), or None if it cannot; `extras`: what
    the actor's wrappers add to each record (`robo_rl.envs.wrappers.wrapper_extras`)."""
    from hydra.utils import get_class

    spec = {k: v for k, v in env_cfg.items() if k not in ("_target_", "expert")}
    try:
        cls = get_class(env_cfg["_target_"])
    except Exception:  # noqa: BLE001 - an unimportable class is reported when the env is built
        return None
    builder = getattr(cls, "spec_from_config", None)
    if builder is None:
        return None
    return dataclasses.replace(builder(**spec), extras=_extras_json(extras or {}))


def learner_spec(cfg, run_dir: Path | None, wait_s: float = 0.0, from_actor=None) -> EnvSpec:
    """The learner's spec, without opening the env (see the module docstring). When nothing else gives it, waits up
    to `wait_s` for an actor: one that writes the run folder's file, or one whose hello carries it (`from_actor()`
    polls the link and returns the first such spec's JSON text, or None). The spec found is kept in the run folder."""
    from omegaconf import OmegaConf

    path = Path(run_dir) / SPEC_FILE if run_dir else None
    if path is not None and path.exists():
        return read_spec(path)
    given = OmegaConf.select(cfg, "env_spec", default=None)
    from robo_rl.envs.wrappers import wrapper_extras

    env_cfg = OmegaConf.to_container(cfg.env, resolve=True)
    spec = read_spec(Path(given)) if given else static_spec(env_cfg, wrapper_extras(cfg))
    if spec is None and (path is not None or from_actor is not None):
        deadline = time.monotonic() + wait_s
        log.warning(
            "the learner needs the task's spaces: waiting up to %.0f s for an actor (its hello, or %s), or "
            "give env_spec=<an actor's %s>",
            wait_s,
            path or "its run folder",
            SPEC_FILE,
        )
        while spec is None and time.monotonic() < deadline:
            if path is not None and path.exists():
                time.sleep(0.05)  # made by a link to a whole file: complete once it exists
                return read_spec(path)
            text = from_actor() if from_actor is not None else None
            if text is not None:
                try:
                    spec = EnvSpec.from_json(json.loads(text), "the env spec in an actor's hello")
                except json.JSONDecodeError as e:
                    raise ValueError(f"the env spec in an actor's hello is not JSON: {e}") from None
            elif from_actor is None:
                time.sleep(0.2)
    if spec is None:
        raise FileNotFoundError(
            f"no env spec for {cfg.env._target_}: start an actor for this run (it tells the "
            f"learner in its hello and writes {path or '<run>/' + SPEC_FILE}), or give "
            f"env_spec=<an actor's {SPEC_FILE}>"
        )
    if path is not None:
        write_spec(spec, path.parent)
    return spec


def spec_check(spec: EnvSpec):
    """For the learner's link: why an actor's spec (JSON text from its hello) does not fit `spec`, or None."""

    def check(text: str) -> str | None:
        try:
            theirs = EnvSpec.from_json(json.loads(text), "the actor's env spec")
        except (ValueError, json.JSONDecodeError) as e:
            return f"the env spec in the hello cannot be read: {e}"
        diff = spec.differences(theirs)
        return f"the actor's env does not match the learner's spec: {'; '.join(diff)}" if diff else None

    return check
