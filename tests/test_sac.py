"""SAC/RLPD details: TD-target clipping and its config check."""

import pytest
import torch
from omegaconf import OmegaConf

from policies.gaussian import TanhGaussianPolicy
from robo_rl.algos.sac import SAC, SACConfig
from robo_rl.envs import make_observation_space
from robo_rl.learner import sac_config


@pytest.mark.parametrize("clip, expected", [(None, 3.0), ((0.0, 1.0), 1.0)])
def test_td_targets_are_clipped_to_the_configured_range(clip, expected):
    torch.manual_seed(0)
    space = make_observation_space(3, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[32, 32])
    sac = SAC(policy, space, SACConfig(critic_hidden=(32, 32), lr_critic=3e-3, target_q_clip=clip,
                                       precision="float32"))  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):  # every step terminates with reward 3: Q → 3, or → 1 when targets are clipped to [0, 1]
        obs = {"state": torch.rand(64, 3, generator=gen), "images": {}}
        batch = {"obs": obs, "next_obs": obs, "action": torch.rand(64, 2, generator=gen) * 2 - 1,
                 "reward": torch.full((64,), 3.0), "discount": torch.zeros(64)}  # fmt: skip
        m = sac.update([batch])
    assert m["q_mean"] == pytest.approx(expected, abs=0.1)


@pytest.mark.parametrize("bad", [[1.0, 0.0], [0.0], [0.0, 1.0, 2.0]])
def test_a_malformed_target_clip_is_refused_by_name(bad):
    algo = OmegaConf.merge(OmegaConf.load("launch/conf/algo/sac.yaml"), {"target_q_clip": bad})
    with pytest.raises(ValueError, match=r"algo.target_q_clip must be \[low, high\] with low < high"):
        sac_config(algo)
    assert sac_config(OmegaConf.merge(algo, {"target_q_clip": [0, 1]})).target_q_clip == (0, 1)
