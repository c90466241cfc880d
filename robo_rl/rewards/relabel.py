"""Learned rewards on the learner (`reward.where=learner`): each received message is scored in one batched call and
its rewards replaced before it is stored, per (actor, episode) through its own `RewardShaper`.

The actor runs no model (a robot workstation without a GPU; the learner's machine has it), at the price that the
model cannot end an episode: the actor has already gone on. So success pays its bonus once and the episode runs to
the env's own end (a human label or the time limit); stagnation and regression are not applied here. The env's own
reward and the success probability go into every record (`extra/reward_env`, `extra/success_prob`), as on the actor.
A learner restarted mid-episode starts those episodes' shapers afresh (Φ = 0 until their next reset).
"""

from __future__ import annotations

import logging

import numpy as np

from robo_rl.configs.wrappers import INTERVENTION_REWARD
from robo_rl.envs.base import ENDED_BY
from robo_rl.rewards.base import OUTPUTS, RewardModel, Scores, Task, load_model, shaper_settings
from robo_rl.rewards.intervention import relabel_prior_for_interventions
from robo_rl.rewards.shaper import RewardShaper, ShaperConfig
from robo_rl.rewards.wrapper import EXTRAS

log = logging.getLogger(__name__)
HUMAN_LABELS = {ENDED_BY.index(name) + 1: name for name in ("human_success", "human_failure")}


def relabel_records(
    model: RewardModel, shaper: RewardShaper, task: Task, records: dict, demonstration: bool = False
) -> dict:
    """One stored episode's records with the model's shaped rewards (0 on its reset record and after the shaper's
    first done; the episode ends where it ended), the env's reward in `extra/reward_env` (kept from an earlier
    relabelling) and the success probability in `extra/success_prob` (−1 where the model gives none). A
    `demonstration` that ended in success carries that as a person's label on its last step (its success bonus):
    a demonstration is a success by what it is, whatever the model makes of its last frames."""
    env_reward = records.get("extra/reward_env", records["reward"]).astype(np.float32)
    scores = model.score_episode({c: records[f"image/{c}"] for c in model.cameras}, task)
    given = {k: getattr(scores, k) for k in OUTPUTS if getattr(scores, k) is not None}
    first, rest = {k: v[:1] for k, v in given.items()}, {k: v[1:] for k, v in given.items()}  # reset, steps
    labels = [None] * (len(env_reward) - 1)
    if demonstration and labels and records["success"][-1] and records["terminated"][-1]:
        labels[-1] = "success"
    shaped = shaper.episode(rest, env_reward[1:], records["success"][1:], labels, first=first)
    reward = np.zeros(len(env_reward), np.float32)
    reward[1:] = np.where(shaped["valid"], shaped["reward"], 0.0)
    prob = np.full(len(env_reward), -1.0, np.float32)
    if scores.success_prob is not None:
        prob[:] = scores.success_prob
    return {**records, "reward": reward, "extra/reward_env": env_reward, "extra/success_prob": prob}


def relabel_prior(cfg, batch: dict) -> dict:
    """The prior data (demonstrations) under the run's learned reward, so that every batch mixes one reward: the
    demos' env rewards would otherwise sit beside the model's. A step batch in, a step batch out."""
    from robo_rl.data.datasets import join_episodes, split_episodes

    r = cfg.reward
    if r.get("_target_") == INTERVENTION_REWARD:  # RLIF: the demonstrations pay no task reward either
        return relabel_prior_for_interventions(batch, float(r.get("step_cost", 0.0)))
    if str(r.model).startswith("tcp://"):
        log.error(
            "the prior data is not relabelled through a remote critic (%s): the demonstrations keep the env's "
            "reward; give the learner the model folder (reward.model) or run without demos",
            r.model,
        )
        return batch
    model = load_model(r.model, model_target(r))
    instruction = instruction_of(cfg)
    shaper = RewardShaper(
        ShaperConfig.from_dict({**shaper_settings(dict(r.shaper), model), "terminate_on_success": False})
    )
    episodes = split_episodes(batch)
    log.info("relabelling %d prior episodes with the learned reward %s", len(episodes), r.model)
    return join_episodes(
        [
            type(e)(
                relabel_records(model, shaper, Task(instruction), e.records, demonstration=True),
                e.partition,
                e.source,
                e.instruction,
            )
            for e in episodes
        ]
    )


def instruction_of(cfg) -> str:
    """The learned reward's instruction: `reward.instruction`, else the env class's `task_description`."""
    from hydra.utils import get_class

    given = cfg.get("reward", {}).get("instruction")
    return given if given is not None else getattr(get_class(cfg.env._target_), "task_description", "")


def model_target(reward) -> str | None:
    """The reward model class the config expects: `reward.model_target` (a run config saved before it: its `kind`)."""
    return reward.get("model_target") or reward.get("kind")


def uses_learned_reward(cfg) -> bool:
    reward = cfg.get("reward")
    return bool(reward) and "_target_" in reward


def rlif_rejects(cfg) -> bool:
    """Whether the run's reward is intervention as the reward with the penalty on the policy's rejected action (the
    learner then samples each takeover step as that action: `ReplayBuffer.gather(rejected=True)`)."""
    reward = cfg.get("reward")
    return bool(reward) and reward.get("_target_") == INTERVENTION_REWARD and reward.get("penalize") == "rejected"


def learner_side(cfg) -> bool:
    return uses_learned_reward(cfg) and cfg.reward.get("where", "actor") == "learner"


def make_relabeller(cfg) -> IngestRelabeller | None:
    """The learner's relabeller when `reward.where=learner`, else None."""
    if not learner_side(cfg):
        return None
    r = cfg.reward
    instruction = instruction_of(cfg)
    shaper = {k: v for k, v in dict(r.shaper).items()}
    return IngestRelabeller(r.model, instruction, shaper, model_target(r))


class IngestRelabeller:
    extras = EXTRAS

    def __init__(
        self,
        model: str | RewardModel,
        instruction: str = "",
        shaper: dict | None = None,
        model_target: str | None = None,
    ) -> None:
        self.model = model if isinstance(model, RewardModel) else load_model(model, model_target)
        self.task = Task(instruction)
        settings = {
            **shaper_settings(shaper, self.model),
            "terminate_on_success": False,
            "stagnation_steps": 0,
            "regression_drop": 0.0,
        }
        self.config = ShaperConfig.from_dict(settings)
        self.shapers: dict[tuple, RewardShaper] = {}
        self.errors = 0

    def __call__(self, actor: str, arrays: dict) -> dict:
        frames = {c: arrays[f"image/{c}"] for c in self.model.cameras}
        missing = [c for c in self.model.cameras if f"image/{c}" not in arrays]
        if missing:
            raise ValueError(f"the learner's reward model scores cameras {missing} that the records do not carry")
        n = len(arrays["step"])
        env_reward = arrays["reward"].astype(np.float32).copy()
        try:
            scores = self.model.score(frames, self.task)
        except Exception as e:  # noqa: BLE001 - the data is kept, with the env's reward, said and counted
            self.errors += 1
            if self.errors == 1:
                log.error("the learner's reward model failed (%s): messages keep the env's reward", e)
            failed = {"extra/reward_env": env_reward, "extra/success_prob": np.full(n, -1.0, np.float32)}
            return {**arrays, **failed, "extra/reward_model_version": np.zeros(n, np.int32)}
        reward = np.zeros(n, np.float32)
        prob = np.full(n, -1.0, np.float32)
        for i in range(n):
            key = (actor, int(arrays["episode_id"][i]))
            one = Scores(**{k: getattr(scores, k)[i : i + 1] for k in OUTPUTS if getattr(scores, k) is not None})
            if one.success_prob is not None:
                prob[i] = float(one.success_prob[0])
            if arrays["step"][i] == 0:  # the reset record: Φ(s0), no reward
                self.shapers[key] = RewardShaper(self.config)
                self.shapers[key].reset(one)
                continue
            shaper = self.shapers.get(key)
            if shaper is None:  # its reset came before this learner started
                shaper = self.shapers[key] = RewardShaper(self.config)
                shaper.reset(None)
            label = HUMAN_LABELS.get(int(arrays["ended_by"][i]))
            reward[i] = shaper.step(one, float(env_reward[i]), bool(arrays["success"][i]), label).reward
            if arrays["terminated"][i] or arrays["truncated"][i]:
                del self.shapers[key]
        version = np.zeros(n, np.int32)  # the learner's model is the run's first: hot swaps are the actor's
        scored = {"reward": reward, "extra/reward_env": env_reward, "extra/success_prob": prob}
        return {**arrays, **scored, "extra/reward_model_version": version}
