"""On-policy data in groups (GRPO, `algo.advantage=group`): whole episodes of the current policy version, gathered by
the group their actor reset them in (`extra/group`, written by `robo_rl/envs/groups.py`), handed over only when a
group has all of its episodes.

An episode counts when every one of its decisions is of the current version and none is missing (its kept chunks
cover every step); otherwise it is dropped, and with it the rest of its group. A complete group whose outcomes are
all equal (all succeeded, all failed) gives every decision an advantage of 0: it is dropped and counted (dynamic
sampling, SimpleVLA-RL and DAPO), and its env steps do not count towards `rollout_env_steps`, so the learner keeps
collecting until that many steps of informative groups are in. Each handed-over row carries its episode's `outcome`
(the episode's success, or its return), its `group` and its `episode` (indices within the batch).
"""

from __future__ import annotations

import logging

import numpy as np

from robo_rl.data.rollout import Rollout
from robo_rl.data.schema import EXTRA

log = logging.getLogger(__name__)
GROUP = f"{EXTRA}group"
OUTCOMES = ("success", "return")
WARN_EQUAL_EVERY = 20  # all-equal groups in a row between warnings (a policy that always or never succeeds)


class GroupRollout(Rollout):
    def __init__(
        self, gamma: float, env_steps: int, group_size: int, outcome: str, instructions: list[str] | None = None
    ) -> None:
        super().__init__(gamma, env_steps, instructions)
        if outcome not in OUTCOMES:
            raise ValueError(f"group outcome '{outcome}': one of {', '.join(OUTCOMES)}")
        self.group_size, self.outcome = int(group_size), outcome
        self.running: dict[tuple, dict] = {}  # (actor, episode) → {"rows": [...], "clean": bool, "group": id}
        self.groups: dict[tuple, dict] = {}  # (actor, group) → {"version": v, "episodes": [[rows], ...]}
        self.kept_groups = self.equal_groups = self.broken_groups = 0
        self.equal_steps = self.broken_steps = 0  # env steps dropped: all-equal groups; incomplete or mixed ones
        self._equal_in_a_row = 0

    def _episode(self, key: tuple, chunk: list[dict]) -> dict:
        if key not in self.running:  # its group: the one the actor's grouped resets wrote into its records
            group = int(np.asarray(chunk[0][GROUP]).reshape(-1)[0])
            self.running[key] = {"rows": [], "clean": True, "group": (key[0], group)}
        return self.running[key]

    def _drop(self, key: tuple, chunk: list[dict]) -> None:
        super()._drop(key, chunk)
        self._episode(key, chunk)["clean"] = False
        if chunk[-1]["terminated"] or chunk[-1]["truncated"]:
            self._finish(key, chunk[-1])

    def _keep(self, key: tuple, before: dict, chunk: list[dict]) -> None:
        self._episode(key, chunk)["rows"].append(self._row(key, before, chunk))
        if chunk[-1]["terminated"] or chunk[-1]["truncated"]:
            self._finish(key, chunk[-1])

    def _finish(self, key: tuple, last: dict) -> None:
        """An episode ended: into its group if it is whole and of the current version, else dropped with its group."""
        episode = self.running.pop(key)
        rows, group_key = episode["rows"], episode["group"]
        steps = sum(r["n"] for r in rows)
        self._forget_old_groups()
        whole = episode["clean"] and steps == int(last["step"])  # every step of it came, in kept decisions
        if not whole:
            self.broken_steps += steps
            dropped = self.groups.pop(group_key, None)
            if dropped is not None:
                self._break(dropped)
            return
        outcome = float(last["success"]) if self.outcome == "success" else float(sum(r["return"] for r in rows))
        for r in rows:
            r["outcome"], r["group"] = outcome, group_key
        group = self.groups.setdefault(group_key, {"version": self.version, "episodes": []})
        group["episodes"].append(rows)
        if len(group["episodes"]) == self.group_size:
            self._complete(self.groups.pop(group_key))

    def _complete(self, group: dict) -> None:
        outcomes = [episode[0]["outcome"] for episode in group["episodes"]]
        steps = sum(r["n"] for episode in group["episodes"] for r in episode)
        if max(outcomes) == min(outcomes):  # every advantage would be 0: nothing to learn, dropped and counted
            self.equal_groups += 1
            self.equal_steps += steps
            self._equal_in_a_row += 1
            if self._equal_in_a_row % WARN_EQUAL_EVERY == 0:
                log.warning(
                    "GRPO: the last %d groups all had equal outcomes (%s %.3g in each episode): dropped, no update "
                    "until a group's episodes differ (%d dropped so far, %d env steps)",
                    self._equal_in_a_row,
                    self.outcome,
                    outcomes[0],
                    self.equal_groups,
                    self.equal_steps,
                )
            return
        self._equal_in_a_row = 0
        self.kept_groups += 1
        for episode in group["episodes"]:
            self.ready.extend(episode)
        self.env_steps += steps

    def _forget_old_groups(self) -> None:
        """Groups begun under an older version can no longer complete with this one's episodes: dropped."""
        for key in [k for k, g in self.groups.items() if g["version"] != self.version]:
            self._break(self.groups.pop(key))

    def _break(self, group: dict) -> None:
        self.broken_groups += 1
        self.broken_steps += sum(r["n"] for episode in group["episodes"] for r in episode)

    def take(self, extras: tuple[str, ...]) -> dict:
        rows = self.ready  # whole groups, each episode's decisions together and in order: `Rollout.take`'s order
        groups: dict[tuple, int] = {}
        episodes: dict[tuple, int] = {}
        group = np.array([groups.setdefault(r["group"], len(groups)) for r in rows], np.int64)
        episode = np.array([episodes.setdefault(r["key"], len(episodes)) for r in rows], np.int64)
        outcome = np.array([r["outcome"] for r in rows], np.float32)
        batch = super().take(extras)
        batch.update(outcome=outcome, group=group, episode=episode)
        return batch

    def stats(self) -> dict:
        return {
            **super().stats(),
            "groups_kept": self.kept_groups,
            "groups_dropped_equal": self.equal_groups,
            "group_steps_dropped_equal": self.equal_steps,
            "groups_dropped_incomplete": self.broken_groups,
            "group_steps_dropped_incomplete": self.broken_steps,
        }
