"""Meta-World's own scripted policies (`metaworld.policies`) as robo_rl's expert for `sim.metaworld_tasks.MetaWorldEnv`.

Each reads Meta-World's 39-d observation with the goal in it (`MetaWorldEnv.benchmark_observation`, also where the
env hides the goal from the policy) and returns the 4-d action; in a group the policy follows the episode's task.
Their success per task in our setup: bench/metaworld_experts.py (bench/results/metaworld_experts.json).
"""

from __future__ import annotations

import warnings

import numpy as np

from sim.metaworld_tasks import MetaWorldEnv


class MetaWorldExpert:
    """The scripted policy of the current episode's task; `noise_std` adds Gaussian noise (clipped to [-1, 1])."""

    def __init__(self, env: MetaWorldEnv, noise_std: float = 0.0, seed: int | None = None) -> None:
        env = getattr(env, "unwrapped", env)
        if not isinstance(env, MetaWorldEnv):
            raise ValueError(f"MetaWorldExpert drives a MetaWorldEnv, not {type(env).__name__}")
        from metaworld.policies import ENV_POLICY_MAP

        self.env = env
        self._policies = {task: ENV_POLICY_MAP[task]() for task in env.tasks}
        self.noise_std = float(noise_std)
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """Meta-World's policies keep no state between steps."""

    def act(self, obs: dict) -> np.ndarray:
        with warnings.catch_warnings():  # its gains saturate by design: "Constant(s) may be too high" on every task
            warnings.filterwarnings("ignore", "Constant", UserWarning)
            action = self._policies[self.env.task_name].get_action(self.env.benchmark_observation)
        action = np.asarray(action, np.float64)
        if self.noise_std > 0:
            action = action + self._rng.normal(0.0, self.noise_std, action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)
