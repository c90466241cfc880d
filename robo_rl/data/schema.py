"""The step record: the one layout used on the wire, in demonstration files and in the replay.

Each record is one observation of an episode plus what led to it: record `t` holds obs_t and the
action, reward and end flags of the step from obs_{t-1} to obs_t (record 0 holds the reset
observation with zero actions). The learner rebuilds (obs, action, reward, next_obs) from
consecutive records of an episode, so each frame travels and is stored once.

A *step batch* is a dict `field name → array` whose first axis indexes records; images use the
field names `image/<camera>`, and an acting policy's extras (its base action, a DSRL noise, a log-probability:
whatever it says about the decision that chose this record's action) `extra/<name>`. `task` is 1 + the index of
the episode's instruction in the run's task table (0 where the task has none; see `tasks.py`).
"""

from __future__ import annotations

import numpy as np

from robo_rl.data.tasks import TaskTable, instruction_of
from robo_rl.envs.base import ENDED_BY

SCHEMA_VERSION = 2  # 2 added `task`, the episode's instruction as a code in the run's task table

# ended_by travels as a small integer: 0 while the episode runs, else 1 + its index in ENDED_BY
ENDED_BY_CODES = {name: i + 1 for i, name in enumerate(ENDED_BY)}
EXTRA = "extra/"


def step_fields(
    state_dim: int, action_dim: int, cameras: dict[str, tuple[int, int]], extras: dict[str, tuple] | None = None
) -> dict[str, tuple]:
    """`field → (per-record shape, dtype)` for an env with these observation and action sizes, and a policy with
    these extras (`name → (shape, dtype)`)."""
    fields = {
        "episode_id": ((), np.int64),
        "step": ((), np.int32),
        "state": ((state_dim,), np.float32),
        "action_executed": ((action_dim,), np.float32),
        "action_policy": ((action_dim,), np.float32),
        "action_base": ((action_dim,), np.float32),
        "reward": ((), np.float32),
        "terminated": ((), np.bool_),
        "truncated": ((), np.bool_),
        "intervention": ((), np.bool_),
        "success": ((), np.bool_),
        "ended_by": ((), np.int8),
        "policy_version": ((), np.int64),
        "timestamp": ((), np.float64),
        "task": ((), np.int32),
    }
    for name, (h, w) in cameras.items():
        fields[f"image/{name}"] = ((h, w, 3), np.uint8)
    for name, (shape, dtype) in (extras or {}).items():
        fields[f"{EXTRA}{name}"] = (tuple(shape), dtype)
    return fields


def fields_for_env(env, policy=None) -> dict[str, tuple]:
    """The record layout of an env (or an `EnvSpec`), with the extras its wrappers add (`env.record_extras`) and
    those the acting `policy` declares (`policy.extras_spec`)."""
    space = env.observation_space
    cams = {name: s.shape[:2] for name, s in space["images"].spaces.items()}
    extras = {**(getattr(env, "record_extras", None) or {}), **(getattr(policy, "extras_spec", None) or {})}
    return step_fields(space["state"].shape[0], env.action_space.shape[0], cams, extras)


def extras_of(fields: dict[str, tuple]) -> dict[str, tuple]:
    """`name → (shape, dtype)` of the policy extras in a record layout."""
    return {k[len(EXTRA) :]: v for k, v in fields.items() if k.startswith(EXTRA)}


class EpisodeRecorder:
    """Turns env resets and steps into step records, one dict of scalars/arrays per record; an observation's
    instruction becomes its code in `tasks` (the recorder's own table unless one is shared)."""

    def __init__(
        self, action_dim: int, extras_spec: dict[str, tuple] | None = None, tasks: TaskTable | None = None
    ) -> None:
        self.tasks = TaskTable() if tasks is None else tasks
        self.zero_action = np.zeros(action_dim, np.float32)
        self.zero_extras = {name: np.zeros(shape, dtype) for name, (shape, dtype) in (extras_spec or {}).items()}
        self.episode_id = -1
        self.step = 0

    def reset(self, obs: dict, episode_id: int, policy_version: int = 0, timestamp: float = 0.0) -> dict:
        self.episode_id, self.step = episode_id, 0
        z = self.zero_action
        return self._record(obs, z, z, z, 0.0, False, False, False, False, None, policy_version, timestamp)

    def record_step(
        self,
        obs,
        reward,
        terminated,
        truncated,
        info,
        policy_version: int = 0,
        timestamp=0.0,
        extras: dict | None = None,
    ) -> dict:
        """The record of a step; `extras` are what the policy said about the decision that chose its action
        (declared extras it does not give are zero, as on a reset record or a random step)."""
        rec = self._step_record(obs, reward, terminated, truncated, info, policy_version, timestamp)
        for name, value in {**info.get("record_extras", {}), **(extras or {})}.items():  # the wrappers', the policy's
            if name not in self.zero_extras:
                raise ValueError(f"extra '{name}' is not declared (policy.extras_spec, or env.record_extras)")
            zero = self.zero_extras[name]
            rec[f"{EXTRA}{name}"] = np.asarray(value, zero.dtype).reshape(zero.shape)
        return rec

    def _step_record(self, obs, reward, terminated, truncated, info, policy_version, timestamp) -> dict:
        self.step += 1
        executed = np.asarray(info["action_executed"], np.float32)
        proposed = np.asarray(info["action_policy"], np.float32)
        base = info.get("action_base")
        base = self.zero_action if base is None else np.asarray(base, np.float32)
        return self._record(
            obs,
            executed,
            proposed,
            base,
            reward,
            terminated,
            truncated,
            bool(info.get("intervention", False)),
            bool(info.get("success", False)),
            info.get("ended_by"),
            policy_version,
            timestamp,
        )

    def _record(
        self,
        obs,
        executed,
        proposed,
        base,
        reward,
        terminated,
        truncated,
        intervention,
        success,
        ended_by,
        policy_version,
        timestamp,
    ) -> dict:
        rec = {
            "episode_id": self.episode_id,
            "step": self.step,
            "state": obs["state"],
            "action_executed": executed,
            "action_policy": proposed,
            "action_base": base,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "intervention": intervention,
            "success": success,
            "ended_by": 0 if ended_by is None else ENDED_BY_CODES[ended_by],
            "policy_version": policy_version,
            "timestamp": timestamp,
            "task": self.tasks.code(instruction_of(obs)),
        }
        for name, img in obs["images"].items():
            rec[f"image/{name}"] = img
        for name, zero in self.zero_extras.items():
            rec[f"{EXTRA}{name}"] = zero
        return rec


def stack_records(records: list[dict], fields: dict[str, tuple]) -> dict[str, np.ndarray]:
    """A list of record dicts → a step batch with the declared dtypes."""
    return {name: np.asarray([r[name] for r in records], dtype=dtype) for name, (_, dtype) in fields.items()}


def check_step_batch(batch: dict[str, np.ndarray], fields: dict[str, tuple]) -> int:
    """Validate a step batch against the declared fields; return its record count or raise ValueError."""
    missing = set(fields) - set(batch)
    if missing:
        raise ValueError(f"step batch lacks fields {sorted(missing)}")
    n = None
    for name, (shape, dtype) in fields.items():
        a = batch[name]
        if (
            not isinstance(a, np.ndarray)
            or a.dtype != np.dtype(dtype)
            or a.shape[1:] != tuple(shape)
            or (a.ndim != 1 + len(shape))
        ):
            got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(
                f"field '{name}' is {got}, expected {np.dtype(dtype)}[n, {', '.join(map(str, shape))}]".replace(
                    ", ]", "]"
                )
            )
        if n is None:
            n = a.shape[0]
        elif a.shape[0] != n:
            raise ValueError(f"field '{name}' has {a.shape[0]} records, others have {n}")
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise ValueError(f"field '{name}' contains NaN or inf")
    return int(n or 0)
