"""Demonstrations for a robot env: with no scripted expert, the learner and `robo-rl train` refuse by name before any
env is built (building a robot env opens the robot), and recorded demonstrations (`demos.path`) are checked against
the env's layout from its config alone."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

import robo_rl.data.demos as demos
from hardware.env import ArmEnv
from robo_rl.config import ConfigError, load_config
from robo_rl.data.datasets import Episode
from robo_rl.data.datasets.io import save_store
from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
from robo_rl.envs.spec import static_spec
from robo_rl.learner import Learner
from robo_rl.transport.link import free_ports

ROBOTS = ["so101", "franka", "ur5e"]


@pytest.fixture
def no_env_may_be_built(monkeypatch):
    def refuse(*args, **kwargs):
        pytest.fail("an env was built: on a robot that opens the hardware")

    monkeypatch.setattr(demos, "make_env", refuse)
    monkeypatch.setattr(ArmEnv, "__init__", refuse)


def robot_config(tmp_path, env: str, *extra: str):
    p = free_ports(3)
    return load_config(
        [
            f"env={env}",
            "experiment=rlpd",
            f"cache_dir={tmp_path / 'cache'}",
            f"transport.data_port={p[0]}",
            f"transport.weights_port={p[1]}",
            f"transport.ctrl_port={p[2]}",
            "logger.progress=false",
            "device=cpu",
            *extra,
        ]
    )


@pytest.mark.parametrize("env", ROBOTS)
def test_a_robot_env_with_no_demonstration_cache_is_refused_before_any_env_is_built(tmp_path, env, no_env_may_be_built):
    cfg = robot_config(tmp_path, env, "demos.num_episodes=5")
    with pytest.raises(ConfigError, match="no scripted expert") as refused:
        demos.load_or_make_demos(cfg, progress=False)
    assert "robo-rl record" in str(refused.value) and "demos.num_episodes=0" in str(refused.value)
    assert not (tmp_path / "cache").exists(), "nothing recorded, nothing cached"


def test_the_learner_of_a_robot_run_with_no_demonstrations_refuses_before_opening_the_robot(
    tmp_path, no_env_may_be_built
):
    (tmp_path / "run").mkdir()
    cfg = robot_config(tmp_path, "so101", "demos.num_episodes=5")
    with pytest.raises(ConfigError, match="no scripted expert"):
        Learner(cfg, tmp_path / "run", progress=False)


def one_episode(fields: dict, steps: int = 4) -> Episode:
    """A short successful episode in the layout `fields`, as `robo-rl record` would store it."""
    action_dim = fields["action_executed"][0][0]
    recorder = EpisodeRecorder(action_dim)
    obs = {"state": np.zeros(fields["state"][0], np.float32), "images": {}}
    zero = np.zeros(action_dim, np.float32)
    records = [recorder.reset(obs, 0)]
    for i in range(steps):
        info = {"action_executed": zero, "action_policy": zero, "success": i == steps - 1}
        records.append(recorder.record_step(obs, 1.0, i == steps - 1, False, info))
    return Episode(stack_records(records, fields), "demos", "test")


def test_recorded_robot_demonstrations_are_checked_against_the_env_config_without_opening_the_robot(
    tmp_path, no_env_may_be_built
):
    cfg = robot_config(tmp_path, "so101", f"demos.path={tmp_path / 'demos'}")
    spec = static_spec(OmegaConf.to_container(cfg.env, resolve=True))
    fields = fields_for_env(spec)
    save_store([one_episode(fields)], tmp_path / "demos", progress=False)
    batch, _, cached = demos.load_or_make_demos(cfg, progress=False)
    assert cached and len(batch["step"]) == 5 and batch["state"].shape[1] == spec.state_dim

    other = robot_config(tmp_path, "so101", f"demos.path={tmp_path / 'other'}")
    wider = {**fields, "state": ((spec.state_dim + 3,), np.float32)}
    save_store([one_episode(wider)], tmp_path / "other", progress=False)
    with pytest.raises(ConfigError, match="this env needs"):
        demos.load_or_make_demos(other, progress=False)
