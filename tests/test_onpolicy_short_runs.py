"""A short on-policy run: one that would end before its first PPO iteration is refused before any work, naming both
settings and what to set; one whose last partial rollout is never used says so before training starts."""

from __future__ import annotations

import logging

import pytest

from robo_rl.cli import main
from robo_rl.config import ConfigError, load_config
from robo_rl.configs.settings import unused_rollout_note

REINFLOW = "experiment=reinflow_lift_critic"


def test_a_run_shorter_than_one_rollout_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a run folder would appear under outputs/ here
    assert main(["train", REINFLOW, "train.total_env_steps=2000", "logger.progress=false"]) == 2
    err = capsys.readouterr().err
    assert "algo.rollout_env_steps=2000" in err and "train.total_env_steps=2000" in err, err
    assert "before its first PPO iteration" in err and "N × algo.rollout_env_steps" in err, err
    assert not list(tmp_path.iterdir()), "no run folder, no demonstrations: refused before any work"
    with pytest.raises(ConfigError, match="algo.rollout_env_steps=500 must be below train.total_env_steps"):
        load_config([REINFLOW, "train.total_env_steps=400", "algo.rollout_env_steps=500"])
    cfg = load_config([REINFLOW, "train.total_env_steps=2001"])  # one iteration: allowed
    assert cfg.algo.rollout_env_steps == 2000
    assert load_config(["train.total_env_steps=100"]).train.total_env_steps == 100  # off-policy: no rollout


def test_the_last_partial_rollout_is_named_where_it_goes_unused():
    note = unused_rollout_note(5000, 2000)
    assert note is not None and "about 2 PPO iterations" in note and "the last 1000 env steps" in note, note
    assert "train.total_env_steps=4200" in note and "6200 one more" in note, note
    assert "the last 2000 env steps" in unused_rollout_note(50000, 2000)  # a whole rollout lost at a multiple
    assert unused_rollout_note(4200, 2000) is None  # a tenth of a rollout past a multiple: every rollout used
    assert unused_rollout_note(20000, 0) is None  # off-policy


@pytest.mark.parametrize("name", ["reinflow_lift", "reinflow_lift_critic", "reinflow_pick_cube", "dppo_pick_cube"])
def test_a_shipped_on_policy_experiment_uses_every_rollout_it_collects(name):
    cfg = load_config([f"experiment={name}"])
    assert cfg.algo.rollout_env_steps > 0, "an on-policy experiment"
    assert unused_rollout_note(cfg.train.total_env_steps, cfg.algo.rollout_env_steps) is None, name


def test_the_training_bar_and_the_learner_warn_before_training(capsys, caplog):
    from robo_rl.progress import TrainingBar

    cfg = load_config([REINFLOW, "train.total_env_steps=5000"])
    TrainingBar(cfg, None, enabled=False).finish(done=False)
    assert "warning: train.total_env_steps=5000 with algo.rollout_env_steps=2000" in capsys.readouterr().out
    import numpy as np

    from robo_rl.algos.base import BatchSpec
    from robo_rl.schedule import make_schedule

    class Chunked:  # the acting policy's chunk length is all the on-policy schedule reads of it
        execute_steps = 1

    with caplog.at_level(logging.WARNING, logger="robo_rl.schedule"):
        make_schedule(BatchSpec(batch_size=64, rollout_env_steps=2000), cfg, None, np.random.default_rng(0), Chunked())
    assert "the last 1000 env steps fill a rollout" in caplog.text
