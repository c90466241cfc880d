"""A simulated human: the task's scripted expert watching the policy and taking over when it drifts.

It is a teleop device (`_target_: sim.simulated_human.SimulatedHuman`), so everything a person's intervention goes
through (arbitration, records, the interventions partition, the metrics) is measured in sim before a person sits down:
  - each step it computes the expert's action on the observation the policy saw; when the policy's proposal differs
    from it by more than `drift_threshold` (max over action dimensions) for `patience` steps in a row, it decides to
    take over with probability p, and does so `reaction_delay` steps later (a person reacts late); on an env with a
    discrete gripper both are compared as they would act ('stay' is the command the gripper holds);
  - in control it commands the expert's action for `hold_steps` steps, then hands back;
  - p starts at `takeover_prob` and is multiplied by `decay` at each episode (a person intervenes less as the policy
    improves, and tires), never below `min_prob`.
"""

from __future__ import annotations

import numpy as np

from robo_rl.teleop.base import TeleopDevice


class SimulatedHuman(TeleopDevice):
    name = "sim_human"
    needs_env = True

    def __init__(
        self,
        env,
        expert: dict | None = None,
        drift_threshold: float = 0.5,
        patience: int = 3,
        reaction_delay: int = 2,
        hold_steps: int = 15,
        takeover_prob: float = 1.0,
        decay: float = 1.0,
        min_prob: float = 0.0,
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if expert is None or "_target_" not in expert:
            raise ValueError("sim_human needs the task's scripted expert (expert: ${env.expert}); this env has none")
        if not (0 <= takeover_prob <= 1 and 0 < decay <= 1 and 0 <= min_prob <= 1):
            raise ValueError("sim_human: takeover_prob and min_prob must be in [0, 1], decay in (0, 1]")
        from hydra.utils import instantiate

        self.expert = instantiate({**expert, "noise_std": 0.0}, env=env)
        self._absolute_gripper = getattr(env, "absolute_gripper", None)  # envs with a discrete gripper option
        self.drift_threshold, self.patience, self.delay = float(drift_threshold), int(patience), int(reaction_delay)
        self.hold_steps, self.prob, self.decay, self.min_prob = int(hold_steps), float(takeover_prob), decay, min_prob
        self.rng = np.random.default_rng(seed)
        self.episodes = 0
        self._reset_episode()

    def _reset_episode(self) -> None:
        self._drift_steps = 0
        self._countdown: int | None = None  # steps until a decided takeover happens
        self._holding = 0  # steps left in control
        self._noticed = False  # this drift episode already had its takeover draw

    def episode_start(self) -> None:
        if self.episodes > 0:
            self.prob = max(self.min_prob, self.prob * self.decay)
        self.episodes += 1
        self.expert.reset()
        self._reset_episode()
        self._update(is_intervention=False, action=None)

    def _comparable(self, action: np.ndarray) -> np.ndarray:
        """The action as it would act: on an env with a discrete gripper (open / stay / close), 'stay' and a
        command the gripper already holds are the same thing, so the gripper entry becomes its absolute command."""
        action = np.array(action, np.float32)
        if self._absolute_gripper is not None:
            action[-1] = self._absolute_gripper(float(action[-1]))
        return action

    def observe(self, obs: dict | None, policy_action: np.ndarray) -> None:
        if obs is None:
            return
        expert_action = self.expert.act(obs)  # every step: the expert's own state (its phase) follows the episode
        if self._holding == 0 and self._countdown is None:
            drift = float(np.max(np.abs(self._comparable(policy_action) - self._comparable(expert_action))))
            self._drift_steps = self._drift_steps + 1 if drift > self.drift_threshold else 0
            if self._drift_steps == 0:
                self._noticed = False
            elif self._drift_steps >= self.patience and not self._noticed:
                self._noticed = True  # one draw per stretch of drift
                if self.rng.random() < self.prob:
                    self._countdown = self.delay
        if self._countdown is not None:
            if self._countdown == 0:
                self._countdown, self._holding = None, self.hold_steps
            else:
                self._countdown -= 1
        if self._holding > 0:
            self._holding -= 1
            self._update(is_intervention=True, action=expert_action)
        elif self._state.is_intervention:  # the hold is over: hand back and watch afresh
            self._drift_steps, self._noticed = 0, False
            self._update(is_intervention=False, action=None)
