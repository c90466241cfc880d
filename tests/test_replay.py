"""Replay: frames stored once, next observations rebuilt by index, no bootstrapping across episodes."""

import numpy as np

from robo_rl.replay import ReplayBuffer
from robo_rl.schema import EpisodeRecorder, fields_for_env, stack_records
from sim.point_reach import PointReachEnv


def episode_batch(env, episode_id, n_steps, seed, terminate_last=False):
    rec = EpisodeRecorder(2)
    obs, _ = env.reset(seed=seed)
    records = [rec.reset(obs, episode_id)]
    for t in range(n_steps):
        obs, r, term, trunc, info = env.step(np.full(2, 0.1 * (t + 1), np.float32))
        records.append(rec.record_step(obs, r, term, trunc, info))
    if terminate_last:
        records[-1]["terminated"], records[-1]["truncated"] = True, False
    return stack_records(records, fields_for_env(env))


def test_transitions_pair_each_observation_with_the_next_one_of_the_same_episode():
    env = PointReachEnv(max_episode_steps=5, step_size=0.0)  # the point never moves: state identifies the episode
    buf = ReplayBuffer(100, fields_for_env(env))
    a, b = episode_batch(env, 0, 5, seed=1), episode_batch(env, 0, 5, seed=2)
    # two actors interleave their messages, using the same episode id
    buf.add({k: v[:3] for k, v in a.items()}, source="actor-a")
    buf.add({k: v[:3] for k, v in b.items()}, source="actor-b")
    buf.add({k: v[3:] for k, v in a.items()}, source="actor-a")
    buf.add({k: v[3:] for k, v in b.items()}, source="actor-b")
    assert buf.num_transitions == 10  # 12 records, two of them resets
    batch = buf.sample(256, np.random.default_rng(0), gamma=0.9)
    np.testing.assert_array_equal(batch["obs"]["state"][:, 2:], batch["next_obs"]["state"][:, 2:])
    # the action stored with obs_t is the one taken from obs_{t-1}
    assert set(np.round(batch["action"][:, 0].astype(float), 3).tolist()) == {0.1, 0.2, 0.3, 0.4, 0.5}


def test_discount_is_zero_after_termination_and_truncation_never_links_to_the_next_episode():
    env = PointReachEnv(max_episode_steps=3, step_size=0.0)
    buf = ReplayBuffer(100, fields_for_env(env))
    buf.add(episode_batch(env, 0, 3, seed=1, terminate_last=True), "a")  # ends terminated
    buf.add(episode_batch(env, 1, 3, seed=2), "a")  # ends by time limit
    buf.add(episode_batch(env, 2, 3, seed=3), "a")
    rows = np.arange(len(buf))
    valid = rows[buf._valid(rows)]
    assert len(valid) == 9
    b = buf.gather(valid, gamma=0.9)
    term = buf.data["terminated"][valid]
    np.testing.assert_allclose(b["discount"], np.where(term, 0.0, 0.9))
    # the time-limit step still bootstraps (discount γ), from its own episode's last frame
    trunc = buf.data["truncated"][valid]
    assert trunc.sum() == 2 and np.all(b["discount"][trunc] == np.float32(0.9))
    np.testing.assert_array_equal(b["obs"]["state"][:, 2:], b["next_obs"]["state"][:, 2:])


def test_overwritten_rows_never_form_a_transition():
    env = PointReachEnv(max_episode_steps=50, step_size=0.0)
    buf = ReplayBuffer(7, fields_for_env(env))
    buf.add(episode_batch(env, 0, 10, seed=1), "a")  # 11 records into 7 rows
    rows = np.arange(len(buf))
    valid = rows[buf._valid(rows)]
    assert len(valid) == 6  # the oldest surviving row lost its predecessor
    b = buf.gather(valid, gamma=0.9)
    np.testing.assert_array_equal(buf.data["step"][buf.prev[valid]] + 1, buf.data["step"][valid])
    assert b["obs"]["state"].shape == (6, 4)
