"""Intervention as the reward (RLIF: Luo et al., "RLIF: Interactive Imitation Learning as Reinforcement Learning",
ICLR 2024): the only reward is that a person had to step in. For a task with no reward function at all, and for a
person who corrects well without being an expert the policy should copy (RLIF beats DAgger-like methods there).

`reward=intervention` puts `InterventionReward` outside the human's arbitration (`actor.wrappers: [safety, human,
reward]`). Each step's reward is `takeover_reward` (negative) on the step a human takes over (the step whose action is
the human's while the previous one was not), minus `step_cost` on every step (0: none), and nothing else: no task
reward, no success bonus (a human's success label still ends the episode, paying 0). With `end_on_takeover` the
takeover ends the episode there (`terminated`, ended_by human_failure: the value of where the policy led is that
penalty); without it the human's correction goes on in the episode, as in RLIF's own runs.
Which action pays: the takeover step's record holds both the person's executed action and the policy's proposal they
stepped in against (`action_policy`). With `penalize: rejected` (the default, RLIF's labelling) the learner samples that
step as the policy's proposal, paid the penalty, ending there (`ReplayBuffer.gather(rejected=True)`): the critic learns
that what the policy wanted there is bad, not the person's correction. `executed` penalizes the executed action, the
person's first correction (what this wrapper did before: on the pick task the critic then preferred the person's
correction at a takeover 0-0.7% of the time, and RLIF did not learn; BENCHMARKS "Intervention as the reward"). The env's
own reward is kept beside it in every record (`extra/reward_env`, as a learned reward keeps it), so a run can be
compared with the task reward and relabelled later; the demonstrations of the prior data are relabelled the same way
(`relabel_prior_for_interventions`): a demonstration had no takeover, its steps pay the step cost alone.
"""

from __future__ import annotations

import collections

import numpy as np

from robo_rl.configs.wrappers import InterventionRewardConfig
from robo_rl.envs.base import RobotWrapper

EXTRAS = {"reward_env": ((), np.float32), "success_prob": ((), np.float32)}  # as the learned reward's records
NO_PROBABILITY = -1.0  # `extra/success_prob` of a reward that scores no success
RLIF = InterventionRewardConfig()  # the block's defaults (robo_rl/configs/wrappers.py), for wrappers built in Python


class InterventionReward(RobotWrapper):
    @classmethod
    def record_extras_from_config(cls, **_) -> dict:
        return dict(EXTRAS)

    def __init__(
        self,
        env,
        takeover_reward: float = RLIF.takeover_reward,
        step_cost: float = RLIF.step_cost,
        end_on_takeover: bool = RLIF.end_on_takeover,
        penalize: str = RLIF.penalize,
    ) -> None:
        super().__init__(env)
        if not takeover_reward < 0:
            raise ValueError(f"reward.takeover_reward={takeover_reward}: a takeover is a penalty, below 0")
        if step_cost < 0:
            raise ValueError(f"reward.step_cost={step_cost}: a cost, 0 or more")
        if penalize not in ("rejected", "executed"):
            raise ValueError(f"reward.penalize={penalize!r}: 'rejected' (the policy's action) or 'executed'")
        if not _has_a_human(env):
            raise ValueError(
                "reward=intervention pays only for a human's takeovers: give a human who can take over (human=sim, "
                "keyboard, ...) inside it in actor.wrappers"
            )
        self.takeover_reward, self.step_cost = float(takeover_reward), float(step_cost)
        self.end_on_takeover, self.penalize = bool(end_on_takeover), penalize
        self.counts: collections.Counter = collections.Counter()
        self._human_before = False

    @property
    def record_extras(self) -> dict:
        return {**(getattr(self.env, "record_extras", None) or {}), **EXTRAS}

    def reset(self, **kwargs):
        self._human_before = False
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        human = bool(info.get("intervention", False))
        takeover = human and not self._human_before
        self._human_before = human
        reward = -self.step_cost
        if takeover:
            reward += self.takeover_reward
            self.counts["takeovers"] += 1
            info["takeover"] = True
            if self.end_on_takeover and not (terminated or truncated):
                terminated, truncated = True, False
                info["ended_by"] = "human_failure"
        self.counts["steps"] += 1
        info["record_extras"] = {
            **info.get("record_extras", {}),
            "reward_env": float(env_reward),
            "success_prob": NO_PROBABILITY,
        }
        return obs, float(reward), terminated, truncated, info

    def stats(self) -> dict:
        return {f"rlif_{k}": int(v) for k, v in self.counts.items()}


def _has_a_human(env) -> bool:
    """Whether the chain inside holds a human's arbitration (a wrapper with teleop `devices`)."""
    while env is not None:
        if hasattr(env, "devices") and hasattr(type(env), "poll"):
            return True
        env = getattr(env, "env", None)
    return False


def relabel_prior_for_interventions(batch: dict, step_cost: float) -> dict:
    """Demonstrations under the intervention reward: no takeover, so each step pays `-step_cost` (its reset record
    0); the env's reward is kept in `extra/reward_env`. A step batch in, a step batch out."""
    env_reward = np.asarray(batch.get("extra/reward_env", batch["reward"]), np.float32)
    reward = np.where(np.asarray(batch["step"]) > 0, -float(step_cost), 0.0).astype(np.float32)
    prob = np.full(len(reward), NO_PROBABILITY, np.float32)
    return {**batch, "reward": reward, "extra/reward_env": env_reward, "extra/success_prob": prob}
