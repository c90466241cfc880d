"""The arms' scripted reach expert (hardware/arm_experts.py): on the SO-101 twin it reaches the target through the
real driver code, with noise it still does, and an arm env without the reach task is refused by name."""

import numpy as np
import pytest

from robo_rl.config import load_config, make_env, make_expert


def rollout(env, expert, seed: int, steps: int = 50) -> bool:
    obs, _ = env.reset(seed=seed)
    expert.reset()
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        if terminated or truncated:
            break
    return bool(info["success"])


def test_the_reach_expert_reaches_the_twins_targets_and_an_idle_arm_does_not():
    cfg = load_config(["experiment=residual_so101_twin_reach", "env.twin_clock=virtual", "env.reset_mode=null"])
    env = make_env(cfg)
    try:
        noisy = make_expert(cfg, env, noise_std=0.1, seed=0)
        assert all(rollout(env, noisy, seed) for seed in range(5))
        obs, _ = env.reset(seed=7)
        idle = np.zeros(env.action_space.shape, np.float32)
        for _ in range(3):
            obs, _, _, _, info = env.step(idle)
        assert not info["success"]  # the targets are not where the arm starts: reaching them takes moves
    finally:
        env.close()


def test_an_arm_without_the_reach_task_is_refused_by_name():
    from hardware.arm_experts import ArmReachExpert

    cfg = load_config(["env=so101_twin", "env.twin_clock=virtual", "env.reach=null", "env.reset_mode=null"])
    env = make_env(cfg)
    try:
        with pytest.raises(ValueError, match="target_dx.*env.reach"):
            ArmReachExpert(env)
    finally:
        env.close()
