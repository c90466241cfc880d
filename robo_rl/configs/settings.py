"""The allowed range of every setting, checked on the composed config before any process starts.

Every block (`algo`, `train`, `replay`, `env`, `policy`, `human`, ...) has a typed config in `robo_rl/configs/`:
each setting declared once, as a dataclass field with its default, range and meaning (`robo_rl/configs/typed.py`).
A composed block is checked against its dataclass, an unknown key refused by name. The keys outside every block (the
run's root keys: name, seed, device, ...; config.yaml holds their values) and a plugin spec's keys that the check
still bounds (env.driver.control_hz) keep their ranges in the table below. `SETTINGS` holds both, dotted key -> kind,
range and meaning, for `check_settings`, `robo-rl <command> --help` and the eval suite's own keys. A key that is
absent from a config (another env's or algorithm's setting) is skipped.
"""

from __future__ import annotations

import functools
from typing import Any

from robo_rl.configs.algo import ALGO_CONFIGS
from robo_rl.configs.env import BLOCKS as ENV_BLOCKS
from robo_rl.configs.eval import BLOCKS as EVAL_BLOCKS
from robo_rl.configs.gui import BLOCKS as GUI_BLOCKS
from robo_rl.configs.policy import BLOCKS as POLICY_BLOCKS
from robo_rl.configs.run import BLOCKS as RUN_BLOCKS
from robo_rl.configs.typed import INF, Setting, block_problem, settings_of, show
from robo_rl.configs.wrappers import BLOCKS as WRAPPER_BLOCKS

# Blocks checked against a typed config: prefix -> the block's `_target_` -> its dataclass. `FIXED` (None) is the
# dataclass of a block without a `_target_` (`train`, `replay`): a top-level one that no YAML writes is made from its
# defaults. A dotted prefix (`reward.shaper`) is a sub-block, completed where its parent's YAML has it.
TYPED_BLOCKS: dict[str, dict[str | None, type]] = {
    "algo": ALGO_CONFIGS,
    **RUN_BLOCKS,
    **EVAL_BLOCKS,
    **GUI_BLOCKS,
    **WRAPPER_BLOCKS,
    **POLICY_BLOCKS,
    **ENV_BLOCKS,
}


def _int(meaning, low=-INF, high=INF, **kw):
    return Setting("int", meaning, low, high, **kw)


def _pos(meaning, high=INF, **kw):  # a positive quantity: a duration, a rate, a length
    return Setting("float", meaning, 0.0, high, low_open=True, **kw)


SETTINGS: dict[str, Setting] = {
    "name": Setting("str", "run name, the suffix of the run folder"),
    "seed": _int("seed of the run (env, networks, exploration)", 0, 2**32 - 1),
    "device": Setting("str", "torch device of the learner: cpu | cuda | cuda:1 ..."),
    "torch_threads": _int("torch CPU threads per process", 1, 1024),
    "outputs_dir": Setting("str", "run folders go under this folder"),
    "cache_dir": Setting("str", "where scripted demonstrations are cached"),
    "run_dir": Setting("str", "use this run folder instead of a new one", nullable=True),
    "resume": Setting("str", "a run folder to continue from (its latest checkpoint)", nullable=True),
    "checkpoint": Setting("str", "eval: a checkpoint file or a run folder", nullable=True),
    "env_spec": Setting(
        "str", "an env spec file (an actor's env_spec.json) for a learner that cannot tell the spaces", nullable=True
    ),
    "env.driver.control_hz": _pos("the driver's command period (UR servoJ), Hz"),  # a plugin spec's: no dataclass
    "group_resets.size": _int("episodes the actor resets in a row from one env seed (robo_rl/envs/groups.py)", 2, 256),
}


def _typed_settings() -> dict[str, Setting]:
    """Every typed config's fields under its block's prefix; a field several algorithms share shows the first's
    meaning (SAC's), each block is still checked against its own dataclass."""
    table: dict[str, Setting] = {}
    for prefix, configs in TYPED_BLOCKS.items():
        for cls in configs.values():
            for name, s in settings_of(cls).items():
                table.setdefault(f"{prefix}.{name}", s)
    return table


SETTINGS.update(_typed_settings())

# Settings whose range depends on another setting: (key, other, test, what it must be).
RELATIONS = (
    ("algo.critic_subsample", "algo.num_critics", lambda a, b: a <= b, "at most algo.num_critics"),
    ("policy.log_std_min", "policy.log_std_max", lambda a, b: a < b, "below policy.log_std_max"),
    ("policy.sigma_min", "policy.sigma_max", lambda a, b: a <= b, "at most policy.sigma_max"),
    (
        "algo.target_q_clip",
        "reward.takeover_reward",
        lambda clip, penalty: clip[0] <= penalty,
        "reaching down to the takeover penalty (reward=intervention: a TD target clipped above it cannot learn "
        "from it); set algo.target_q_clip=null",
    ),
    ("group_resets.size", "algo.group_size", lambda a, b: a == b, "algo.group_size: the groups the learner compares"),
    (
        "algo.rollout_env_steps",
        "train.total_env_steps",
        lambda a, b: a < b,
        "below train.total_env_steps, or the run ends before its first PPO iteration: set train.total_env_steps a "
        "little above N × algo.rollout_env_steps for N iterations, or a smaller algo.rollout_env_steps",
    ),
)


def unused_rollout_note(total_env_steps: int, rollout_env_steps: int) -> str | None:
    """What an on-policy run's last partial rollout costs, where the run ends before updating on more than a tenth of
    a rollout (None: it does not). A rollout completes a little after each multiple of `rollout_env_steps` (steps
    acted on older weights do not count), and the run stops at `total_env_steps`, so an update at the very end never
    runs."""
    if not rollout_env_steps or rollout_env_steps >= total_env_steps:
        return None  # off-policy; or refused by RELATIONS
    iterations = -(-total_env_steps // rollout_env_steps) - 1
    unused = total_env_steps - iterations * rollout_env_steps
    if unused <= rollout_env_steps // 10:
        return None
    suggest = [n * rollout_env_steps + rollout_env_steps // 10 for n in (iterations, iterations + 1)]
    return (
        f"train.total_env_steps={total_env_steps} with algo.rollout_env_steps={rollout_env_steps}: about "
        f"{iterations} PPO iterations; the last {unused} env steps fill a rollout that the run ends before using "
        f"(train.total_env_steps={suggest[0]} gives the same iterations, {suggest[1]} one more)"
    )


def typed_config(prefix: str, target: Any) -> type | None:
    """The dataclass a block (`algo`) with this `_target_` is checked against and built into (None: untyped)."""
    return TYPED_BLOCKS.get(prefix, {}).get(target)


@functools.lru_cache(maxsize=4096)  # asked for each setting at each check: matched against the blocks once per key
def typed_prefix(key: str) -> str | None:
    """The longest typed block `key` lies in (`reward.shaper.clip` -> `reward.shaper`; None: in none)."""
    found = [p for p in TYPED_BLOCKS if key.startswith(p + ".")]
    return max(found, key=len) if found else None


def problem(key: str, value: Any) -> str | None:
    """What is wrong with `value` for `key` (None: fine, or a key without a known range)."""
    s = SETTINGS.get(key)
    return None if s is None else s.problem(value)


def check_settings(get) -> None:
    """Raise ValueError naming the first unknown key of a typed block or setting out of range; `get(key)` returns a
    value (a block as a dict) or `MISSING`."""
    typed = set()
    for prefix in TYPED_BLOCKS:
        block = get(prefix)
        cls = typed_config(prefix, block.get("_target_")) if isinstance(block, dict) else None
        if cls is not None:
            text = block_problem(prefix, cls, block)
            if text:
                raise ValueError(text)
            typed.add(prefix)
    for key in SETTINGS:
        prefix = typed_prefix(key)
        if prefix in typed and "." not in key[len(prefix) + 1 :]:  # checked against its own dataclass above
            continue
        value = get(key)
        if value is MISSING:
            continue
        text = problem(key, value)
        if text:
            raise ValueError(f"{key}={show(value)} is not allowed: {text} ({SETTINGS[key].meaning})")
    for key, other, ok, what in RELATIONS:
        a, b = get(key), get(other)
        if a is not MISSING and b is not MISSING and a is not None and b is not None and not ok(a, b):
            raise ValueError(f"{key}={show(a)} must be {what} ({other}={show(b)})")


MISSING = object()
