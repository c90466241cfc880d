"""A scripted expert for the arms' reach task (hardware/env.py's ReachTask), on metal or the twin.

It steps the tool straight toward the target, at most the env's end-effector step a control period, gripper open:
what a person with a spacemouse would do. It reads only the observation (the target minus the tool, the state's
`target_dx/dy/dz`), so it needs no simulator and runs the same on a real arm. It exists so that the recipes built on
a base policy (residual RL, DSRL) have demonstrations on an arm; `noise_std` spreads them as the pick expert's does.
"""

from __future__ import annotations

import numpy as np

from hardware.env import ReachTask


class ArmReachExpert:
    def __init__(self, env, noise_std: float = 0.0, seed: int | None = None, gain: float = 1.0) -> None:
        env = getattr(env, "unwrapped", env)
        names = list(env.state_names)
        missing = [n for n in ReachTask.state_names if n not in names]
        if missing:
            raise ValueError(f"the reach expert needs the reach task's state ({', '.join(missing)}): set env.reach")
        self._delta = [names.index(n) for n in ReachTask.state_names]
        self._step_m, self._actions = float(env.max_ee_step_m), len(env.action_names)
        self._gripper = "gripper" in env.action_names
        self.noise_std, self.gain = float(noise_std), float(gain)
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        delta = np.asarray(obs["state"], np.float64)[self._delta]  # target minus tool, m
        action = np.zeros(self._actions)
        action[:3] = np.clip(self.gain * delta / self._step_m, -1.0, 1.0)
        if self._gripper:
            action[-1] = -1.0  # open
        if self.noise_std > 0:
            action = action + self._rng.normal(0.0, self.noise_std, action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)
