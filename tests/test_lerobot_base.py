"""LeRobot policies as frozen bases (policies/lerobot_base.py): loaded by path through lerobot's own loading, run
in our env through ChunkedBase; features that do not fit the task are refused in one line. Nothing downloaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from policies.base import ChunkedBase, state_statistics
from policies.lerobot_base import LeRobotBase
from policies.residual import ResidualPolicy
from robo_rl.envs import make_observation_space
from sim.point_reach import PointReachEnv, PointReachExpert

STATE_DIM, ACTION_DIM, CHUNK = 4, 2, 5
# lerobot is imported by the tests, not at collection: importing its policies takes about 10 s on a small CPU, which
# every pytest worker would otherwise pay


def state_inputs() -> dict:
    from lerobot.configs.types import FeatureType, PolicyFeature

    return {
        "observation.state": PolicyFeature(FeatureType.STATE, (STATE_DIM,)),
        "observation.environment_state": PolicyFeature(FeatureType.ENV, (STATE_DIM,)),
    }


def action_output() -> dict:
    from lerobot.configs.types import FeatureType, PolicyFeature

    return {"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))}


def stats(dim: int, mean: float = 0.0, std: float = 1.0, low: float = -1.0, high: float = 1.0) -> dict:
    return {
        "mean": torch.full((dim,), mean),
        "std": torch.full((dim,), std),
        "min": torch.full((dim,), low),
        "max": torch.full((dim,), high),
    }


def save_tiny(cfg, folder: Path, action_stats: dict) -> Path:
    """A policy from a tiny config, saved as lerobot-train saves it: weights, config and its processors."""
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    torch.manual_seed(0)
    policy = get_policy_class(cfg.type)(cfg)
    pre, post = make_pre_post_processors(
        cfg,
        dataset_stats={
            "observation.state": stats(STATE_DIM, 0.2, 0.5),
            "observation.environment_state": stats(STATE_DIM),
            "action": action_stats,
        },
    )
    for part in (policy, pre, post):
        part.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_act(tmp_path_factory) -> Path:
    from lerobot.policies.act.configuration_act import ACTConfig

    cfg = ACTConfig(
        input_features=state_inputs(),
        output_features=action_output(),
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=8,
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        pretrained_backbone_weights=None,
        device="cpu",
        push_to_hub=False,
    )
    # wide action stats: un-normalised actions overshoot [-1, 1], so clipping is visible
    return save_tiny(cfg, tmp_path_factory.mktemp("act") / "pretrained_model", stats(ACTION_DIM, 0.5, 1.5, -0.5, 0.8))


def run_episode(env, chunked: ChunkedBase, seed: int = 0):
    """One episode acting with the base alone; the observations seen and the actions taken."""
    chunked.reset()
    obs, _ = env.reset(seed=seed)
    observations, actions = [], []
    while True:
        action = chunked.act(obs)
        observations.append(obs), actions.append(action)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return observations, np.stack(actions)


def test_act_checkpoint_acts_in_our_env_as_lerobot_runs_it(tiny_act):
    env = PointReachEnv(max_episode_steps=12, step_size=0.05)
    base = LeRobotBase.load(tiny_act, env.observation_space, ACTION_DIM)
    assert (base.action_dim, base.chunk_size) == (ACTION_DIM, CHUNK)
    # the dataset's action range, from its saved statistics: what a residual on this base is normalised by
    np.testing.assert_allclose(np.stack(base.action_range), [[-0.5] * ACTION_DIM, [0.8] * ACTION_DIM])
    # and its state statistics: what a residual's `policy.state_norm=base` normalises the state by
    np.testing.assert_allclose(np.stack(state_statistics(base)), [[0.2] * STATE_DIM, [0.5] * STATE_DIM])
    residual = ResidualPolicy(env.observation_space, ACTION_DIM, base, hidden=[8], state_norm="base")
    state = torch.tensor([[0.7, -0.3, 0.2, 1.2]])
    np.testing.assert_allclose(
        residual.encoder({"state": state, "images": {}}).numpy(), [[1.0, -1.0, 0.0, 2.0]], atol=1e-6
    )
    chunked = ChunkedBase(base)
    observations, actions = run_episode(env, chunked)
    assert actions.shape == (12, ACTION_DIM) and actions.dtype == np.float32
    assert np.all(np.abs(actions) <= 1.0) and np.any(np.abs(actions) == 1.0)  # clipped into the action space
    assert np.any(np.abs(actions) < 1.0)
    assert len(chunked.inference_ms) == 3  # the queue refilled at steps 0, 5 and 10 and nowhere else
    assert set(chunked.timing()) == {"base_inference_ms_p50", "base_inference_ms_p99"}

    # lerobot's own rollout path on the same observations: its select_action and queue, its processors
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.policies.utils import prepare_observation_for_inference

    policy = get_policy_class("act").from_pretrained(tiny_act)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(tiny_act))
    policy.reset()
    for obs, ours in zip(observations, actions, strict=True):
        raw = {"observation.state": obs["state"].copy(), "observation.environment_state": obs["state"].copy()}
        with torch.inference_mode():
            theirs = post(policy.select_action(pre(prepare_observation_for_inference(raw, torch.device("cpu")))))
        np.testing.assert_allclose(ours, np.clip(theirs[0].numpy(), -1, 1), atol=1e-5)

    # reset empties the queue: a new episode starts from a fresh inference on its own first observation
    chunked.reset()
    chunked.act(observations[0])
    assert len(chunked.queue) == CHUNK - 1
    chunked.reset()
    assert not chunked.queue
    np.testing.assert_allclose(chunked.act(observations[3]), base.predict_chunk(observations[3])[0], atol=1e-6)


def test_diffusion_from_tiny_config_runs_by_path(tmp_path):
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    env = PointReachEnv(max_episode_steps=6)
    for n_obs_steps, chunk in ((1, 4), (2, 1)):  # a history of observations runs closed-loop, through its queues
        cfg = DiffusionConfig(
            input_features=state_inputs(),
            output_features=action_output(),
            n_obs_steps=n_obs_steps,
            horizon=8,
            n_action_steps=4,
            down_dims=(16, 32),
            diffusion_step_embed_dim=16,
            n_groups=4,
            kernel_size=3,
            num_train_timesteps=4,
            num_inference_steps=2,
            pretrained_backbone_weights=None,
            device="cpu",
            push_to_hub=False,
        )
        folder = save_tiny(cfg, tmp_path / f"diffusion{n_obs_steps}", stats(ACTION_DIM))
        base = LeRobotBase.load(str(folder), env.observation_space, ACTION_DIM)
        assert base.chunk_size == chunk
        chunked = ChunkedBase(base)
        _, actions = run_episode(env, chunked)
        assert actions.shape == (6, ACTION_DIM) and np.all(np.abs(actions) <= 1.0)
        assert len(chunked.inference_ms) == -(-6 // chunk)  # a refill at every chunk start


def with_input(folder: Path, tmp_path: Path, key: str, feature: dict) -> Path:
    """A copy of a checkpoint whose config declares another input feature."""
    copy = tmp_path / f"edited_{len(list(tmp_path.iterdir()))}"
    shutil.copytree(folder, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["input_features"][key] = feature
    (copy / "config.json").write_text(json.dumps(cfg))
    return copy


def refusal(path, space, action_dim=ACTION_DIM) -> str:
    with pytest.raises(ValueError) as err:
        LeRobotBase.load(path, space, action_dim)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_features_that_do_not_fit_the_task_are_refused_in_one_line(tiny_act, tmp_path):
    state_only = make_observation_space(STATE_DIM, {})
    msg = refusal(tiny_act, make_observation_space(STATE_DIM + 1, {}))
    assert "'observation.state'" in msg and "(4,)" in msg and "(5,)" in msg
    msg = refusal(tiny_act, state_only, action_dim=3)
    assert "action dimension is 3" in msg and "(2,)" in msg
    camera = {"type": "VISUAL", "shape": [3, 32, 32]}
    msg = refusal(with_input(tiny_act, tmp_path, "observation.images.front", camera), state_only)
    assert "camera 'front'" in msg and "'observation.images.front'" in msg
    msg = refusal(
        with_input(tiny_act, tmp_path, "observation.images.top", camera),
        make_observation_space(STATE_DIM, {"top": (24, 32)}),
    )
    assert "(3, 32, 32)" in msg and "(3, 24, 32)" in msg
    tactile = {"type": "STATE", "shape": [12]}
    msg = refusal(with_input(tiny_act, tmp_path, "observation.tactile", tactile), state_only)
    assert "'observation.tactile'" in msg


def test_a_checkpoint_that_does_not_exist_is_refused_in_one_line(tmp_path):
    space = make_observation_space(STATE_DIM, {})
    assert "does not exist" in refusal(tmp_path / "outputs" / "pretrained_model", space)
    (tmp_path / "empty").mkdir()
    assert "no config.json" in refusal(tmp_path / "empty", space)
    # a hub id that is not cached: no network here (or no such repo): pass a local folder
    assert "pass a local pretrained_model folder" in refusal("robo-rl-tests/no-such-policy-a1b2c3", space)


def test_a_checkpoint_without_its_processors_is_refused_in_one_line(tiny_act, tmp_path):
    weights_only = shutil.copytree(tiny_act, tmp_path / "weights_only")
    for saved in weights_only.glob("policy_*processor*"):
        saved.unlink()
    msg = refusal(weights_only, make_observation_space(STATE_DIM, {}))
    assert "no saved processors (policy_preprocessor.json, policy_postprocessor.json)" in msg


def test_a_hub_id_in_the_local_cache_loads_without_network(tiny_act, tmp_path, monkeypatch):
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--act_point_reach"
    shutil.copytree(tiny_act, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    base = LeRobotBase.load("someone/act_point_reach", make_observation_space(STATE_DIM, {}), ACTION_DIM)
    obs = {"state": np.zeros(STATE_DIM, np.float32), "images": {}}
    assert base.predict_chunk(obs).shape == (CHUNK, ACTION_DIM)


class UpscaledCamera(gym.ObservationWrapper):
    """PointReach's 8x8 camera at 32x32 (the video encoder refuses frames below 32 px)."""

    def __init__(self, env, factor: int = 4) -> None:
        super().__init__(env)
        self.factor = factor
        size = env.observation_space["images"]["top"].shape[0] * factor
        self.observation_space = make_observation_space(STATE_DIM, {"top": (size, size)})

    def observation(self, obs):
        image = obs["images"]["top"].repeat(self.factor, 0).repeat(self.factor, 1)
        return {"state": obs["state"], "images": {"top": image}}


@pytest.mark.slow
def test_act_trained_by_lerobot_train_on_our_export_acts_in_our_env(tmp_path):
    """lerobot-train (a subprocess: its own CLI and training code) on a dataset robo_rl exported, then our env."""
    from robo_rl.data.datasets import Episode
    from robo_rl.data.datasets.lerobot_v3 import export_lerobot
    from robo_rl.data.demos import rollout_episode
    from robo_rl.data.schema import fields_for_env, stack_records

    env = UpscaledCamera(PointReachEnv(max_episode_steps=10, camera=True))
    expert = PointReachExpert(env.unwrapped, noise_std=0.1, seed=0)
    episodes = [
        Episode(stack_records(rollout_episode(env, expert.act, seed, seed)[0], fields_for_env(env)), "demos")
        for seed in range(3)
    ]
    root = export_lerobot(episodes, tmp_path / "dataset", fps=10, progress=False)
    tiny = [
        "--policy.dim_model=32",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=64",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.latent_dim=8",
        f"--policy.chunk_size={CHUNK}",
        f"--policy.n_action_steps={CHUNK}",
        "--policy.pretrained_backbone_weights=null",
    ]
    train = Path(sys.executable).with_name("lerobot-train")
    subprocess.run(
        [
            str(train),
            "--dataset.repo_id=local/robo_rl",
            f"--dataset.root={root}",
            "--policy.type=act",
            "--policy.device=cpu",
            "--policy.push_to_hub=false",
            *tiny,
            "--steps=2",
            "--batch_size=4",
            "--num_workers=0",
            "--save_freq=2",
            "--wandb.enable=false",
            f"--output_dir={tmp_path / 'train'}",
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    folder = tmp_path / "train" / "checkpoints" / "last" / "pretrained_model"

    base = LeRobotBase.load(folder, env.observation_space, ACTION_DIM)
    assert base.inputs == {"observation.state": "state", "observation.images.top": "images/top"}
    chunked = ChunkedBase(base)
    _, actions = run_episode(env, chunked)
    assert actions.shape == (10, ACTION_DIM) and np.all(np.abs(actions) <= 1.0)
    assert len(chunked.inference_ms) == 2  # steps 0 and 5
    chunked.reset()
    assert not chunked.queue
    msg = refusal(folder, PointReachEnv(camera=True).observation_space)  # its camera is 8x8, the policy's 32x32
    assert "(3, 32, 32)" in msg and "(3, 8, 8)" in msg
