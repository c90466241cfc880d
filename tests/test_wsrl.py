"""WSRL (`replay.warmup_episodes`, experiment=wsrl_pick_cube): no update until the pretrained policy's warm-up
episodes are in the online replay, then updates at the UTD counted from there, on batches with no offline row (the
metrics say how many each batch had); the warm-up's end is recounted exactly on resume; bad settings refused."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from robo_rl.algos.base import BatchSpec
from robo_rl.config import ConfigError
from robo_rl.data.learner_replay import LearnerReplay
from robo_rl.data.replay import concat_batches
from robo_rl.schedule import UpdateToData, make_schedule
from tests.test_storage import FIELDS, episode, replay_cfg

SCHEDULE = OmegaConf.create(
    {"train": {"utd": 1.0, "learning_starts": 0, "weights_every_updates": 1}, "actor": {"max_lead_steps": 10}}
)


def _progress(env_steps=0):
    return SimpleNamespace(env_steps=env_steps, updates=0, steps_base=0, updates_base=0)


def _warm_replay(tmp_path, online_fraction=1.0, warmup_episodes=3, **kw):
    return LearnerReplay(
        replay_cfg(online_fraction=online_fraction, warmup_episodes=warmup_episodes, **kw),
        FIELDS,
        tmp_path,
        demos=episode(100, 40),
    )


def test_no_update_until_the_warm_up_episodes_are_in_then_batches_hold_none_of_the_offline_rows(tmp_path):
    replay = _warm_replay(tmp_path / "wsrl", persist=False)
    schedule = UpdateToData(BatchSpec(batch_size=64), SCHEDULE, replay, np.random.default_rng(0))
    progress = _progress()
    for i, length in enumerate([5, 7]):  # two of the three warm-up episodes: no update owed, actors run on
        replay.add("a", episode(i, length))
        progress.env_steps += length
        assert replay.warmup_steps is None and not schedule.due(progress)
        assert schedule.allowed_env_steps(progress) == progress.env_steps + 10
    # the third ends inside a message that also starts a fourth: the warm-up ends at the third's last step
    fourth = episode(3, 4)
    replay.add("a", concat_batches([episode(2, 6), {k: v[:3] for k, v in fourth.items()}]))
    progress.env_steps += 6 + 2
    assert replay.warmup_steps == 5 + 7 + 6 and replay.online_episodes == 3
    assert schedule.budget(progress) == 2 and schedule.due(progress)  # the UTD counts from the warm-up's end
    assert schedule.allowed_env_steps(progress) == 18 + 0 + 10
    batch = next(schedule.batches())
    metrics = {}
    schedule.report(metrics, progress)
    origin = set(batch["obs"]["state"][:, 1].tolist())
    assert metrics["batch_prior_rows"] == 0 and 100 not in origin  # the demonstrations are loaded, never sampled
    assert {0.0, 1.0, 2.0} <= origin  # the warm-up rollouts are what it learns from first
    rlpd = _warm_replay(tmp_path / "rlpd", online_fraction=0.5, warmup_episodes=0, persist=False)
    rlpd.add("a", episode(0, 5))
    mixed = UpdateToData(BatchSpec(batch_size=64), SCHEDULE, rlpd, np.random.default_rng(0))
    batch = next(mixed.batches())
    mixed.report(metrics, progress)
    assert metrics["batch_prior_rows"] == 32 and (batch["obs"]["state"][:, 1] == 100).sum() == 32


@pytest.mark.parametrize("checkpoint_after", [1, 4])
def test_the_warm_up_is_recounted_exactly_on_resume(tmp_path, checkpoint_after):
    """The checkpoint before or after the warm-up's end: the restored replay puts its end at the same env step,
    owes the same updates and draws the same batches."""
    live = _warm_replay(tmp_path)
    for i in range(6):
        live.add("a", episode(i, 3 + i), session=1, seq=i + 1)
        if i == checkpoint_after:
            live.flush()
            state = live.state()
    live.flush()
    live.close()
    again = _warm_replay(tmp_path)
    again.restore(state)
    assert again.warmup_steps == live.warmup_steps == 3 + 4 + 5
    assert (again.online_episodes, again.online_steps) == (live.online_episodes, live.online_steps) == (6, 33)
    batches = []
    for replay in (live, again):
        schedule = UpdateToData(BatchSpec(batch_size=32), SCHEDULE, replay, np.random.default_rng(5))
        assert schedule.budget(_progress(33)) == 33 - 12
        batches.append(next(schedule.batches()))
    np.testing.assert_array_equal(batches[0]["obs"]["state"], batches[1]["obs"]["state"])
    np.testing.assert_array_equal(batches[0]["action"], batches[1]["action"])
    again.close()


def test_bad_warm_up_settings_are_refused_in_one_line(tmp_path):
    from robo_rl.config import load_config

    with pytest.raises(ConfigError, match=r"replay.warmup_episodes=-1 is not allowed") as e:
        load_config(["replay.warmup_episodes=-1"])
    assert "\n" not in str(e.value)
    replay = _warm_replay(tmp_path, persist=False)
    cfg = OmegaConf.merge(SCHEDULE, {"train": {"total_env_steps": 1000}})
    with pytest.raises(ConfigError, match="an on-policy algorithm updates on each rollout"):
        make_schedule(BatchSpec(batch_size=8, rollout_env_steps=100), cfg, replay, np.random.default_rng(0), None)


def test_an_actor_and_a_learner_warm_up_then_train_on_online_rows_only(tmp_path):
    from tests.test_pipeline import SMALL_NETS, run_pair, toy_config

    cfg = toy_config(
        tmp_path,
        *SMALL_NETS,
        "replay.warmup_episodes=3",
        "replay.online_fraction=1.0",
        "train.learning_starts=0",
        "train.total_env_steps=240",
        "train.weights_every_updates=10",
        "actor.max_lead_steps=5",  # the updates keep up with the data: their start shows
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and learner.replay.demos is not None  # the demonstrations were there to take
    data, n = learner.replay.online.data, learner.replay.online.size
    live = data["step"][:n] > 0
    ends = np.flatnonzero(live & (data["terminated"][:n] | data["truncated"][:n]))
    warm = int(live[: ends[2] + 1].sum())  # env steps up to the third episode's end
    assert learner.replay.warmup_steps == warm
    assert learner.env_steps - warm - 30 <= learner.updates <= learner.env_steps - warm  # UTD 1 from the warm-up's end
    # no update before it, so no new weights: the warm-up episodes are all the initial policy's (version 1)
    assert data["policy_version"][:n][live][:warm].max() == 1 and data["policy_version"][:n].max() > 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    updating = [x for x in lines if x.get("kind") == "learner" and "batch_prior_rows" in x]
    assert updating and all(x["batch_prior_rows"] == 0 for x in updating)
    assert all(x["env_steps"] >= warm for x in updating)


@pytest.mark.slow  # a BC base, a residual's warm-up and updates on the pick task and an evaluation: about 65 s
def test_robo_rl_train_runs_wsrl_on_the_pick_task_to_the_end(tmp_path):
    from tests.test_cli import ROOT, isolated, only_run_dir, robo_rl

    out = robo_rl(
        "train",
        *isolated(tmp_path, "wsrl_pick_cube"),
        "demos.num_episodes=6",
        "bc.epochs=5",
        "bc.eval_episodes=0",
        "train.total_env_steps=600",
        "replay.warmup_episodes=3",
        "algo.actor_start_updates=50",
        "eval.episodes=4",
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run = only_run_dir(tmp_path)
    assert "WSRL warm-up done: 3 online episodes" in (run / "learner.log").read_text()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    updating = [x for x in lines if "batch_prior_rows" in x]
    assert updating and all(x["batch_prior_rows"] == 0 for x in updating)
    assert lines[-1]["kind"] == "end" and lines[-1]["reason"] == "done"
