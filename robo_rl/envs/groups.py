"""Episodes reset in groups from one initial state: the data group-relative PPO (GRPO, `algo.advantage=group`) asks
for, where an episode's advantage is its outcome against those of the other episodes that started where it did.

`GroupedResets` sits innermost in the actor's chain (`actor.wrappers: [group_resets, ...]`). The first reset's seed
(the one the actor gives each env: `seed + i * ENV_SEED_STRIDE`) starts the first group and seeds the wrapper's own
generator; every later reset reuses the group's seed until `size` episodes have started from it, then draws the next
group's. Each step record carries its group (`extra/group`, the group's env seed, which is what its episodes share),
so the learner can put the episodes of one group together again. `regroup()` makes the next reset start a new group:
the actor calls it when new weights arrive, because a group is only a fair comparison when one policy acted in all of
its episodes (the learner drops groups that mix versions).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robo_rl.envs.base import RobotWrapper

GROUP_EXTRA = "group"  # the record field `extra/group`
EXTRAS = {GROUP_EXTRA: ((), np.int64)}
SEED_HIGH = 2**31 - 1  # group seeds are drawn below this (any env's reset takes them)


class GroupedResets(RobotWrapper):
    @classmethod
    def record_extras_from_config(cls, **_) -> dict:
        return dict(EXTRAS)

    def __init__(self, env: gym.Env, size: int) -> None:
        super().__init__(env)
        if int(size) < 2:
            raise ValueError(f"group_resets.size={size}: a group compares at least 2 episodes from one initial state")
        self.size = int(size)
        self._rng: np.random.Generator | None = None  # seeded by the first reset's seed
        self.group_seed: int | None = None
        self.started = 0  # episodes started from the current group's seed
        self.groups = 0  # groups started so far

    @property
    def record_extras(self) -> dict:
        return {**(getattr(self.env, "record_extras", None) or {}), **EXTRAS}

    def regroup(self) -> None:
        """The next reset starts a new group (the current one is left incomplete)."""
        self.started = self.size

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:  # the actor's seed for this env: the first group, and where the next groups' come from
            self._rng = np.random.default_rng(seed)
            self._new_group(int(seed))
        elif self._rng is None:  # never seeded: a seed of its own (an env built and reset in Python without one)
            self._rng = np.random.default_rng()
            self._new_group(int(self._rng.integers(SEED_HIGH)))
        elif self.started >= self.size:
            self._new_group(int(self._rng.integers(SEED_HIGH)))
        self.started += 1
        return self.env.reset(seed=self.group_seed, options=options)

    def _new_group(self, seed: int) -> None:
        self.group_seed, self.started = seed, 0
        self.groups += 1

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["record_extras"] = {**info.get("record_extras", {}), GROUP_EXTRA: self.group_seed}
        return obs, reward, terminated, truncated, info
