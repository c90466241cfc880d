"""The learned reward a run trained on, watching its evaluation: it scores each step's frames and says nothing else.

Evaluation is judged by the env's own success (or a person), never by the reward model (robo_rl/configs/eval.py), and
this wrapper keeps it so: it changes no reward, ending or success. It records the model's success probability
(`info["success_prob"]` and the episode's highest, `episode_prob_max`) beside the simulator's verdict, so that
robo_rl/eval/behaviour.py can count episodes where the policy farmed the learned reward: the probability above the
threshold the shaper declared success at during training, the task not done. Only a local model that gives a success
probability (a success classifier) is watched; a remote critic or a progress model is not.
"""

from __future__ import annotations

import numpy as np

from robo_rl.envs.base import RobotWrapper


class LearnedRewardWatch(RobotWrapper):
    def __init__(self, env, model, task, success_threshold: float) -> None:
        super().__init__(env)
        self.model, self.task, self.success_threshold = model, task, float(success_threshold)
        self.episode_prob_max: float | None = None

    def reset(self, **kwargs):
        self.episode_prob_max = None
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        frames = {c: np.asarray(obs["images"][c])[None] for c in self.model.cameras}
        prob = self.model.score(frames, self.task).success_prob
        if prob is not None and len(prob):
            p = float(prob[0])
            self.episode_prob_max = p if self.episode_prob_max is None else max(self.episode_prob_max, p)
            info = {**info, "success_prob": p}
        return obs, reward, terminated, truncated, info


def watch_learned_reward(env, cfg):
    """`env` watched by the run's learned reward (`reward.model`) where it has a local one giving a success
    probability; else `env` itself."""
    from robo_rl.configs.wrappers import ShaperConfig
    from robo_rl.rewards.base import Task, load_model, shaper_settings
    from robo_rl.rewards.relabel import instruction_of, model_target, uses_learned_reward

    if not uses_learned_reward(cfg) or not cfg.reward.get("model") or str(cfg.reward.model).startswith("tcp://"):
        return env
    model = load_model(cfg.reward.model, model_target(cfg.reward))
    if "success_prob" not in model.provides:
        return env
    settings = shaper_settings(dict(cfg.reward.get("shaper") or {}), model)
    threshold = ShaperConfig.from_dict(settings).success_threshold
    return LearnedRewardWatch(env, model, Task(instruction_of(cfg)), threshold)


def watched(env) -> LearnedRewardWatch | None:
    """The watch in `env`'s wrapper chain, if any."""
    while env is not None:
        if isinstance(env, LearnedRewardWatch):
            return env
        env = getattr(env, "env", None)
    return None
