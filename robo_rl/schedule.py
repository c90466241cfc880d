"""When the learner updates, on what, when new weights go out, and how far actors may run ahead: the algorithm's
schedule, chosen by its `BatchSpec` (`robo_rl/algos/base.py`), so that the learner's loop names no algorithm kind.

- `UpdateToData` (off-policy): `train.utd` updates owed per online env step past `train.learning_starts` (and past
  the end of a WSRL warm-up, `replay.warmup_episodes`: no update before it, actors run freely through it), each on
  fresh batches sampled from the replay; weights go out every `train.weights_every_updates` updates; actors may run
  `actor.max_lead_steps` ahead of the env steps the updates done have paid for. Its metrics say how many prior
  (offline) rows the update's batches held (`batch_prior_rows`, a mean over its batches).
- `RolloutThenUpdate` (on-policy, `spec.rollout_env_steps` > 0): the current policy version's decisions are
  collected in a `Rollout`; once it holds that many env steps, one update runs on it and its weights go out at
  once; actors act what the rollout still lacks (and finish a chunk), then wait for the new weights.

A schedule keeps no state a checkpoint needs: a resumed on-policy run starts an empty rollout, and its first
published version makes every older decision stale.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Protocol

import numpy as np
from omegaconf import DictConfig

from policies.acting import acting_policy
from robo_rl.algos.base import BatchSpec
from robo_rl.configs.settings import unused_rollout_note
from robo_rl.data.group_rollout import GROUP, GroupRollout
from robo_rl.data.rollout import Rollout

log = logging.getLogger(__name__)


class Progress(Protocol):
    """The learner's counters a schedule reads (the learner itself)."""

    env_steps: int  # online env steps received
    updates: int  # updates done, one per batch
    version: int  # the newest published policy version
    steps_base: int  # where this process's update-to-data count began (a resume with an empty replay restarts it)
    updates_base: int

    @property
    def learning_steps(self) -> int: ...  # online env steps past `learning_starts`, counted from `steps_base`


class Schedule(Protocol):
    def add(self, actor: str, arrays: dict) -> None:
        """Every stored message's records."""

    def due(self, progress: Progress) -> bool:
        """Whether an update is due now."""

    def batches(self) -> Iterator[dict]:
        """The numpy batches of one update (each counts as one update), drawn one at a time."""

    def report(self, metrics: dict, progress: Progress) -> None:
        """After an update: the schedule's own figures, added to its metrics."""

    def publish_due(self, progress: Progress) -> bool:
        """After an update: whether the new weights go out now."""

    def published(self, version: int) -> None:
        """The learner published `version`."""

    def allowed_env_steps(self, progress: Progress) -> float:
        """How far actors may run (in received env steps) before they wait for the learner."""


class UpdateToData:
    """Off-policy: an update-to-data budget over the replay."""

    def __init__(self, spec: BatchSpec, cfg: DictConfig, replay, rng: np.random.Generator) -> None:
        self.spec, self.replay, self.rng = spec, replay, rng
        self.utd, self.learning_starts = cfg.train.utd, cfg.train.learning_starts
        self.weights_every_updates, self.max_lead_steps = cfg.train.weights_every_updates, cfg.actor.max_lead_steps

    def start(self, progress: Progress) -> int | None:
        """The env step from which updates are owed: past `learning_starts` and a warm-up's end (None: warming up)."""
        warm = getattr(self.replay, "warmup_steps", 0)
        return None if warm is None else progress.steps_base + max(self.learning_starts, warm)

    def budget(self, progress: Progress) -> float:
        """Updates owed for the data received: UTD × online steps past `start`."""
        start = self.start(progress)
        return -1.0 if start is None else progress.updates_base + self.utd * (progress.env_steps - start)

    def add(self, actor: str, arrays: dict) -> None:
        pass  # the replay holds it already

    def due(self, progress: Progress) -> bool:
        return progress.updates < self.budget(progress) and self.replay.can_sample()  # disk: once written

    def batches(self) -> Iterator[dict]:
        s = self.spec
        self._prior_rows = []
        for _ in range(s.batches):
            batch = self.replay.sample(
                s.batch_size, self.rng, s.gamma, s.n_step, s.chunk, s.extras, s.where, settled=s.settled
            )
            self._prior_rows.append(getattr(self.replay, "last_prior_rows", 0))
            yield batch

    def report(self, metrics: dict, progress: Progress) -> None:
        if getattr(self, "_prior_rows", None):
            metrics["batch_prior_rows"] = float(np.mean(self._prior_rows))

    def publish_due(self, progress: Progress) -> bool:
        return progress.updates % self.weights_every_updates < self.spec.batches

    def published(self, version: int) -> None:
        pass  # every version's data counts

    def allowed_env_steps(self, progress: Progress) -> float:
        start = self.start(progress)
        if start is None:  # the warm-up's episodes are the initial policy's: nothing to wait for
            return progress.env_steps + self.max_lead_steps
        return start + (progress.updates - progress.updates_base) / self.utd + self.max_lead_steps


class RolloutThenUpdate:
    """On-policy: one update per rollout of the current policy version's decisions."""

    def __init__(
        self, spec: BatchSpec, max_lead_steps: int, execute_steps: int, instructions: list[str] | None = None
    ) -> None:
        if spec.group_size:  # whole episodes by the group they reset in (GRPO)
            self.rollout = GroupRollout(
                spec.gamma, spec.rollout_env_steps, spec.group_size, spec.group_outcome, instructions
            )
        else:
            self.rollout = Rollout(spec.gamma, spec.rollout_env_steps, instructions)  # the run's task table's names
        self.extras = spec.extras
        self.lead_steps = min(max_lead_steps, 2 * execute_steps)  # room to finish the chunk under way

    def add(self, actor: str, arrays: dict) -> None:
        self.rollout.add(actor, arrays)  # the current version's decisions; older ones are counted and dropped

    def due(self, progress: Progress) -> bool:
        return self.rollout.env_steps >= self.rollout.wanted

    def batches(self) -> Iterator[dict]:
        yield self.rollout.take(self.extras)

    def report(self, metrics: dict, progress: Progress) -> None:
        stale = self.rollout.stale_steps
        metrics.update(self.rollout.stats())  # dropped steps; with groups, the groups kept and dropped
        log.info(
            "on-policy iteration %d: %d decisions (%d env steps) of version %d; %d env steps of older "
            "weights dropped so far",
            progress.updates,
            metrics.get("decisions", 0),
            metrics.get("rollout_env_steps", 0),
            progress.version,
            stale,
        )
        if "groups_kept" in metrics:  # GRPO: what dynamic sampling and version changes cost so far
            log.info(
                "groups so far: %d kept, %d dropped with all outcomes equal (%d env steps), %d incomplete or of "
                "older weights (%d env steps)",
                metrics["groups_kept"],
                metrics["groups_dropped_equal"],
                metrics["group_steps_dropped_equal"],
                metrics["groups_dropped_incomplete"],
                metrics["group_steps_dropped_incomplete"],
            )

    def publish_due(self, progress: Progress) -> bool:
        return True  # the next rollout is the new version's

    def published(self, version: int) -> None:
        self.rollout.version = version  # from now on, only this version's decisions count

    def allowed_env_steps(self, progress: Progress) -> float:
        # steps an actor took with older weights do not count towards the rollout
        return progress.env_steps + max(0, self.rollout.wanted - self.rollout.env_steps) + self.lead_steps


def make_schedule(spec: BatchSpec, cfg: DictConfig, replay, rng: np.random.Generator, policy) -> Schedule:
    """The schedule the algorithm's batch spec asks for."""
    if spec.rollout_env_steps:
        if getattr(replay, "warmup_episodes", 0):
            from robo_rl.config import ConfigError

            raise ConfigError(
                f"replay.warmup_episodes={replay.warmup_episodes} is WSRL's warm-up of an off-policy learner's replay; "
                "an on-policy algorithm updates on each rollout of its current policy: leave it 0"
            )
        total = cfg.get("train", {}).get("total_env_steps")  # a schedule built for a test may have no budget
        if total and (note := unused_rollout_note(int(total), spec.rollout_env_steps)):
            log.warning(note)
        names = replay.tasks.names if hasattr(replay, "tasks") else None
        fields = getattr(replay, "fields", None)
        if spec.group_size and fields is not None and GROUP not in fields:
            from robo_rl.config import ConfigError

            raise ConfigError(
                f"group-relative advantages compare episodes reset from one initial state: the actor's records carry "
                f"no group ({GROUP}); add group_resets to actor.wrappers (experiment=grpo_pick_cube does)"
            )
        return RolloutThenUpdate(spec, cfg.actor.max_lead_steps, acting_policy(policy).execute_steps, names)
    return UpdateToData(spec, cfg, replay, rng)
