"""SAC/RLPD details: TD-target clipping and its config check, the entropy backup, human actions in the actor loss."""

import pytest
import torch
from omegaconf import OmegaConf

from policies.gaussian import TanhGaussianPolicy
from robo_rl.algos.sac import SAC, SACConfig, build_sac
from robo_rl.envs import make_observation_space


@pytest.mark.parametrize("clip, expected", [(None, 3.0), ((0.0, 1.0), 1.0)])
def test_td_targets_are_clipped_to_the_configured_range(clip, expected):
    torch.manual_seed(0)
    space = make_observation_space(3, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[32, 32])
    sac = SAC(policy, space, SACConfig(critic_hidden=(32, 32), lr_critic=3e-3, target_q_clip=clip, precision="float32"))
    gen = torch.Generator().manual_seed(0)
    for _ in range(100):  # every step terminates with reward 3: Q → 3, or → 1 when clipped to [0, 1] (±0.005, 5 seeds)
        obs = {"state": torch.rand(64, 3, generator=gen), "images": {}}
        batch = {
            "obs": obs,
            "next_obs": obs,
            "action": torch.rand(64, 2, generator=gen) * 2 - 1,
            "reward": torch.full((64,), 3.0),
            "discount": torch.zeros(64),
        }
        m = sac.update([batch])
    assert m["q_mean"] == pytest.approx(expected, abs=0.1)


@pytest.mark.parametrize("bad", [[1.0, 0.0], [0.0], [0.0, 1.0, 2.0]])
def test_a_malformed_target_clip_is_refused_by_name(bad):
    keys = OmegaConf.to_container(OmegaConf.load("launch/conf/algo/sac.yaml"))
    keys.pop("_target_")
    space = make_observation_space(3, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[32])
    refused = r"algo.target_q_clip(=\S+ is not allowed: must be a list of 2 values| must be \[low, high\] with low < )"
    with pytest.raises(ValueError, match=refused):
        build_sac(policy, space, 2, **{**keys, "target_q_clip": bad})
    assert build_sac(policy, space, 2, **{**keys, "target_q_clip": [0, 1]}).cfg.target_q_clip == (0, 1)


def test_human_actions_pull_the_mean_action_only_with_the_intervention_weight():
    """algo.intervention_bc_weight: on intervention rows the deterministic action is regressed on the human's, so on
    a flat critic (reward 0 for every action) the policy ends where the human steered; at 0 it does not."""
    space = make_observation_space(3, {})
    wanted = torch.tensor([0.5, -0.4])
    moved = {}
    for weight in (0.0, 5.0):
        torch.manual_seed(0)
        policy = TanhGaussianPolicy(space, 2, hidden=[32, 32])
        sac = SAC(
            policy,
            space,
            SACConfig(critic_hidden=(32,), lr_actor=3e-3, intervention_bc_weight=weight, precision="float32"),
        )
        gen = torch.Generator().manual_seed(0)
        for _ in range(200):
            obs = {"state": torch.rand(64, 3, generator=gen) * 2 - 1, "images": {}}
            human = torch.arange(64) % 2 == 0
            action = torch.rand(64, 2, generator=gen) * 2 - 1
            action[human] = wanted
            m = sac.update(
                [
                    {
                        "obs": obs,
                        "next_obs": obs,
                        "action": action,
                        "reward": torch.zeros(64),
                        "discount": torch.zeros(64),
                        "intervention": human,
                    }
                ]
            )
        moved[weight] = policy.act({"state": torch.zeros(1, 3), "images": {}}, deterministic=True)[0]
        assert ("intervention_bc_loss" in m) == (weight > 0)
    assert torch.allclose(moved[5.0], wanted, atol=0.05), moved[5.0]
    assert (moved[0.0] - wanted).abs().max() > 0.2, "without the weight, human steps teach only through the critic"


@pytest.mark.parametrize("backup_entropy", [True, False])
def test_without_the_entropy_backup_a_rewardless_task_is_worth_nothing(backup_entropy):
    """algo.backup_entropy: with reward 0 everywhere and no end, the soft value is the discounted entropy bonus
    (positive here: a tanh-Gaussian in 2 dims at init has log-prob below 0, alpha 0.5); without the backup Q stays 0."""
    torch.manual_seed(0)
    space = make_observation_space(3, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[32, 32])
    cfg = SACConfig(
        critic_hidden=(32, 32),
        lr_critic=3e-3,
        tau=0.05,
        gamma=0.9,
        init_temperature=0.5,
        lr_alpha=1e-9,
        lr_actor=1e-9,
        backup_entropy=backup_entropy,
        precision="float32",
    )
    sac = SAC(policy, space, cfg)
    gen = torch.Generator().manual_seed(0)
    for _ in range(150):
        obs = {"state": torch.rand(64, 3, generator=gen), "images": {}}
        batch = {
            "obs": obs,
            "next_obs": obs,
            "action": torch.rand(64, 2, generator=gen) * 2 - 1,
            "reward": torch.zeros(64),
            "discount": torch.full((64,), 0.9),
        }
        m = sac.update([batch])
    if backup_entropy:
        assert m["q_mean"] > 0.5  # heading for 0.5 x entropy (about 1) / (1 - 0.9): about 2 after 150 updates
    else:
        assert abs(m["q_mean"]) < 0.1  # about 0.02 after 150 updates
