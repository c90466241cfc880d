"""The data contracts: observations, actions, step records, info keys."""

import numpy as np
import pytest

from robo_rl.data.schema import ENDED_BY_CODES, EpisodeRecorder, check_step_batch, fields_for_env, stack_records
from robo_rl.envs import INFO_KEYS, check_observation
from sim.point_reach import PointReachEnv


def test_step_fills_every_info_key_and_keeps_terminated_apart_from_truncated():
    env = PointReachEnv(max_episode_steps=3)
    obs, _ = env.reset(seed=0)
    check_observation(obs, env.observation_space)
    for _ in range(3):
        obs, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
        assert set(INFO_KEYS) <= info.keys()
    assert truncated and not terminated and info["ended_by"] == "time_limit"


@pytest.mark.parametrize("bad", [[np.nan, 0.0], [2.0, 0.0], [0.0, 0.0, 0.0]])
def test_bad_action_is_refused_with_a_clear_error(bad):
    env = PointReachEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="NaN|range|shape"):
        env.step(np.array(bad, np.float32))


def test_missing_camera_is_named():
    env = PointReachEnv(camera=True)
    obs, _ = env.reset(seed=0)
    obs["images"].pop("top")
    with pytest.raises(ValueError, match="camera 'top' is missing"):
        check_observation(obs, env.observation_space)


def test_records_hold_each_observation_once_with_the_step_that_led_to_it():
    env = PointReachEnv(max_episode_steps=4, camera=True)
    rec = EpisodeRecorder(2)
    obs, _ = env.reset(seed=1)
    records = [rec.reset(obs, episode_id=7)]
    actions = [np.array([0.5, -0.5], np.float32)] * 4
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        records.append(rec.record_step(obs, r, term, trunc, info))
    batch = stack_records(records, fields_for_env(env))
    assert check_step_batch(batch, fields_for_env(env)) == 5
    assert batch["step"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(batch["action_executed"][1:], np.stack(actions))
    assert batch["image/top"].dtype == np.uint8
    assert batch["truncated"][-1] and batch["ended_by"][-1] == ENDED_BY_CODES["time_limit"]


def test_check_step_batch_names_the_bad_field():
    env = PointReachEnv()
    fields = fields_for_env(env)
    rec = EpisodeRecorder(2)
    obs, _ = env.reset(seed=0)
    batch = stack_records([rec.reset(obs, 0)], fields)
    batch["reward"] = np.array([np.nan], np.float32)
    with pytest.raises(ValueError, match="'reward' contains NaN"):
        check_step_batch(batch, fields)
    batch["reward"] = np.zeros(1, np.float64)
    with pytest.raises(ValueError, match="'reward'"):
        check_step_batch(batch, fields)


def test_wilson_interval_matches_the_closed_form_and_stays_inside_0_1():
    from robo_rl.eval.episodes import wilson_interval

    low, high = wilson_interval(15, 20)
    assert abs(low - 0.5313) < 1e-3 and abs(high - 0.8881) < 1e-3
    low, high = wilson_interval(20, 20)
    assert abs(low - 0.8389) < 1e-3 and high <= 1.0
    assert wilson_interval(0, 20)[0] == 0.0
