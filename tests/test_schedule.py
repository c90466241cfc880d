"""The learner's schedule is chosen by the algorithm's batch spec: an update-to-data budget off-policy (updates owed
per env step, weights every few updates, actors a bounded lead ahead), rollout-then-update on-policy (one update per
full rollout of the current version, weights at once, actors act only what the rollout lacks)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from omegaconf import OmegaConf

from robo_rl.algos.base import BatchSpec
from robo_rl.schedule import RolloutThenUpdate, UpdateToData, make_schedule

CFG = OmegaConf.create(
    {"train": {"utd": 2, "learning_starts": 10, "weights_every_updates": 4}, "actor": {"max_lead_steps": 100}}
)


def progress(env_steps, updates, version=1, steps_base=0, updates_base=0):
    learning = env_steps - steps_base - CFG.train.learning_starts
    return SimpleNamespace(
        env_steps=env_steps,
        updates=updates,
        version=version,
        steps_base=steps_base,
        updates_base=updates_base,
        learning_steps=learning,
    )


class Replay:
    def __init__(self):
        self.drawn = []

    def can_sample(self):
        return True

    def sample(self, batch_size, rng, gamma, n_step, chunk, extras, where, settled=False):
        self.drawn.append(batch_size)
        return {"reward": np.zeros(batch_size, np.float32)}


def test_off_policy_owes_utd_updates_per_env_step_past_learning_starts_and_bounds_the_actors_lead():
    replay = Replay()
    schedule = make_schedule(BatchSpec(batch_size=8, batches=2), CFG, replay, np.random.default_rng(0), policy=None)
    assert isinstance(schedule, UpdateToData)
    assert not schedule.due(progress(env_steps=10, updates=0)), "nothing owed before learning_starts"
    assert schedule.due(progress(env_steps=13, updates=5)) and not schedule.due(progress(env_steps=13, updates=6))
    assert [b["reward"].shape for b in schedule.batches()] == [(8,), (8,)] and replay.drawn == [8, 8]
    assert [schedule.publish_due(progress(20, u)) for u in (2, 4, 6, 8, 9)] == [False, True, False, True, True]
    # the updates done pay for env steps at 1/utd each, past learning_starts, plus the lead
    assert schedule.allowed_env_steps(progress(env_steps=50, updates=30)) == 10 + 30 / 2 + 100
    assert schedule.allowed_env_steps(progress(50, 30, steps_base=40, updates_base=20)) == 40 + 10 + 10 / 2 + 100


def test_on_policy_updates_once_per_full_rollout_of_the_current_version_and_publishes_at_once():
    policy = SimpleNamespace(execute_steps=3)
    schedule = make_schedule(BatchSpec(batch_size=1, rollout_env_steps=6), CFG, Replay(), None, policy)
    assert isinstance(schedule, RolloutThenUpdate)
    assert not schedule.due(progress(0, 0))
    assert schedule.allowed_env_steps(progress(env_steps=40, updates=0)) == 40 + 6 + 2 * 3, "the rollout and a chunk"
    schedule.published(4)
    assert schedule.rollout.version == 4, "from now on only version 4's decisions count"
    schedule.rollout.env_steps = 6  # as if version 4 had acted the whole rollout
    assert schedule.due(progress(46, 0)) and schedule.publish_due(progress(46, 1))
    assert schedule.allowed_env_steps(progress(env_steps=46, updates=0)) == 46 + 0 + 6
