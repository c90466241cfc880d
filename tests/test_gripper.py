"""The discrete gripper critic (HIL-SERL style): it learns which command pays, gripper changes cost,
and the hybrid policy trains, checkpoints and resumes through the learner."""

import numpy as np
import pytest
import torch

from policies.hybrid import HybridGripperPolicy, gripper_choice
from robo_rl.algos.gripper import GripperConfig, GripperLearner
from robo_rl.envs import make_observation_space


def bandit_batch(n, rng_state, gripper_closed=None):
    """One-step episodes: state[0] = +1 → 'close' pays 1, -1 → 'open' pays 1; state[1] = gripper opening."""
    s0 = torch.randint(0, 2, (n,)).float() * 2 - 1
    choice = torch.randint(0, 3, (n,))
    value = torch.tensor([-1.0, 0.0, 1.0])[choice]
    reward = (((s0 > 0) & (choice == 2)) | ((s0 < 0) & (choice == 0))).float()
    closed = torch.zeros(n) if gripper_closed is None else gripper_closed
    state = torch.stack([s0, closed], 1)
    obs = {"state": state, "images": {}}
    return {
        "obs": obs,
        "next_obs": obs,
        "action": torch.stack([torch.zeros(n), value], 1),
        "reward": reward,
        "discount": torch.zeros(n),
    }


def test_executed_gripper_values_map_to_open_stay_close():
    assert gripper_choice(torch.tensor([-1.0, -0.6, -0.2, 0.0, 0.4, 0.51, 1.0])).tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_the_gripper_critic_learns_which_command_pays():
    torch.manual_seed(0)
    policy = HybridGripperPolicy(make_observation_space(2, {}), 2, hidden=[32], gripper_hidden=[32], epsilon=0.0)
    learner = GripperLearner(policy.gripper, GripperConfig(lr=3e-3, penalty=0.0))
    for _ in range(300):
        learner.update(bandit_batch(64, None))
    obs = {"state": torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), "images": {}}
    assert policy.gripper.choose(obs).tolist() == [2, 0]
    assert policy.act(obs, deterministic=True)[:, -1].tolist() == [1.0, -1.0]


def test_a_gripper_change_penalty_makes_an_unrewarded_change_worse_than_staying():
    torch.manual_seed(0)
    policy = HybridGripperPolicy(make_observation_space(2, {}), 2, hidden=[32], gripper_hidden=[32], epsilon=0.0)
    learner = GripperLearner(policy.gripper, GripperConfig(lr=3e-3, penalty=-0.5, gripper_state_index=1))
    for _ in range(300):
        b = bandit_batch(64, None, gripper_closed=torch.ones(64))  # already closed: 'close' changes nothing
        b["reward"] = torch.zeros(64)  # nothing pays
        learner.update(b)
    q = policy.gripper({"state": torch.tensor([[1.0, 1.0]]), "images": {}}).mean(0)[0]
    assert q[0] < -0.3 and abs(q[1]) < 0.1 and abs(q[2]) < 0.1  # opening a closed gripper costs; staying/closing not


def test_exploration_picks_random_gripper_commands_only_when_not_deterministic():
    torch.manual_seed(0)
    policy = HybridGripperPolicy(make_observation_space(2, {}), 3, hidden=[16], gripper_hidden=[16], epsilon=1.0)
    obs = {"state": torch.zeros(500, 2), "images": {}}
    assert set(policy.act(obs)[:, -1].tolist()) == {-1.0, 0.0, 1.0}
    assert len(set(policy.act(obs, deterministic=True)[:, -1].tolist())) == 1
    with pytest.raises(ValueError, match="at least one arm dimension"):
        HybridGripperPolicy(make_observation_space(2, {}), 1)


def test_the_learner_trains_checkpoints_and_resumes_a_hybrid_policy(tmp_path):
    from robo_rl.config import load_config, save_config
    from robo_rl.learner import Learner
    from tests.test_pipeline import toy_config

    cfg = toy_config(
        tmp_path,
        "experiment=pick_cube_gripper",
        "env=pick_cube",
        "env.gripper=discrete",
        "train.learning_starts=10",
        "algo.batch_size=16",
        "demos.num_episodes=2",
    )
    run = tmp_path / "run"
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    learner = Learner(cfg, run, progress=False)
    assert learner.algo.gripper.cfg.gripper_state_index == 3, "sac_gripper: SAC for the arm + the gripper critic"
    demos = learner.replay.demos.data
    learner.ingest("actor-0", {k: v[:40].copy() for k, v in demos.items()}, 1, 1)
    before = [p.clone() for p in learner.policy.gripper.parameters()]
    metrics = learner.update()
    assert "gripper_loss" in metrics and "critic_loss" in metrics
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.policy.gripper.parameters(), strict=True))
    learner.checkpoint()
    learner.close()
    resumed = Learner(load_config([f"resume={run}", *[o for o in toy_config_ports(tmp_path)]]), run, progress=False)
    for name, p in learner.policy.state_dict().items():
        assert torch.equal(p, resumed.policy.state_dict()[name]), name
    assert torch.equal(
        next(iter(resumed.algo.gripper.target.parameters())), next(iter(learner.algo.gripper.target.parameters()))
    )
    resumed.close()
    np.testing.assert_array_equal(learner.rng.random(3), resumed.rng.random(3))


def toy_config_ports(tmp_path):
    from tests.test_resume import toy_config_ports as ports

    return ports(tmp_path)
