"""Replay: frames stored once, next observations rebuilt by index, no bootstrapping across episodes."""

import numpy as np
import pytest

from robo_rl.data.replay import ReplayBuffer
from robo_rl.data.schema import ENDED_BY_CODES, EpisodeRecorder, fields_for_env, stack_records, step_fields
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


# --- TD targets, n-step returns and action chunks at episode ends ---------------------------------
FIELDS = step_fields(3, 2, {})


def synthetic_episode(episode_id, length, end="terminated", reward=1.0, intervention_steps=()):
    """Records 0..length; state[0] = step, action = (episode_id, step), reward `reward` per step."""
    n = length + 1
    rec = {name: np.zeros((n, *shape), dtype) for name, (shape, dtype) in FIELDS.items()}
    rec["episode_id"][:] = episode_id
    rec["step"][:] = np.arange(n)
    rec["state"][:, 0] = np.arange(n)
    rec["state"][:, 1] = episode_id
    rec["action_executed"][1:, 0] = episode_id
    rec["action_executed"][1:, 1] = np.arange(1, n)
    rec["reward"][1:] = reward
    rec["intervention"][list(intervention_steps)] = True
    if end == "terminated":
        rec["terminated"][-1], rec["ended_by"][-1] = True, ENDED_BY_CODES["env"]
    elif end == "time_limit":
        rec["truncated"][-1], rec["ended_by"][-1] = True, ENDED_BY_CODES["time_limit"]
    elif end == "human_abort":  # a person stops the episode: not a true end, bootstrapping continues
        rec["truncated"][-1], rec["ended_by"][-1] = True, ENDED_BY_CODES["human_failure"]
    return rec


def rows_by_step(buf, episode_id):
    out = {}
    for r in range(buf.size):
        if buf.data["episode_id"][r] == episode_id:
            out[int(buf.data["step"][r])] = r
    return out


@pytest.mark.parametrize("end", ["terminated", "time_limit", "human_abort"])
def test_the_td_target_of_the_last_step_stops_only_at_a_true_termination(end):
    buf = ReplayBuffer(64, FIELDS)
    buf.add(synthetic_episode(0, 3, end), "a")
    buf.add(synthetic_episode(1, 3, "terminated"), "a")  # the next episode, right behind it in the ring
    last = rows_by_step(buf, 0)[3]
    b = buf.gather(np.array([last]), gamma=0.9)
    assert b["discount"][0] == (0.0 if end == "terminated" else np.float32(0.9))
    assert b["next_obs"]["state"][0, :2].tolist() == [3, 0]  # its own episode's last frame, never the next reset
    assert b["obs"]["state"][0, :2].tolist() == [2, 0]
    # SAC's target: r + discount · V(next_obs)
    v_next = 10.0
    target = b["reward"][0] + b["discount"][0] * v_next
    assert target == pytest.approx(1.0 if end == "terminated" else 1.0 + 0.9 * v_next)


@pytest.mark.parametrize("end", ["terminated", "time_limit"])
def test_n_step_returns_are_cut_at_the_episode_end(end):
    buf = ReplayBuffer(64, FIELDS)
    buf.add(synthetic_episode(0, 5, end, reward=1.0), "a")
    buf.add(synthetic_episode(1, 5, "terminated", reward=100.0), "a")  # must never leak into episode 0
    g = 0.5
    steps = rows_by_step(buf, 0)
    b = buf.gather(np.array([steps[1], steps[3], steps[4], steps[5]]), gamma=g, n_step=3)
    # from obs_0: 3 full steps; from obs_2: steps 3,4,5 (the last); from obs_3: 2 steps; from obs_4: 1 step
    np.testing.assert_allclose(b["reward"], [1 + g + g**2, 1 + g + g**2, 1 + g, 1.0])
    taken = np.array([3, 3, 2, 1])
    ends = np.array([False, True, True, True])  # whether the last step taken is the episode's last
    expected = g**taken * np.where(ends & (end == "terminated"), 0.0, 1.0)
    np.testing.assert_allclose(b["discount"], expected)
    assert b["next_obs"]["state"][:, 0].tolist() == [3, 5, 5, 5]
    assert b["obs"]["state"][:, 0].tolist() == [0, 2, 3, 4]


def test_n_step_uses_the_steps_received_so_far_of_a_running_episode():
    buf = ReplayBuffer(64, FIELDS)
    ep = synthetic_episode(0, 6, "terminated")
    buf.add({k: v[:4] for k, v in ep.items()}, "a")  # records 0..3 so far
    b = buf.gather(np.array([rows_by_step(buf, 0)[2]]), gamma=0.5, n_step=3)
    assert b["reward"][0] == pytest.approx(1.5) and b["discount"][0] == pytest.approx(0.25)
    assert b["next_obs"]["state"][0, 0] == 3


def test_a_settled_batch_never_holds_a_transition_ending_at_a_running_episodes_newest_step():
    """`settled` (residual RL asks it): a transition whose next decision is still to come (it ends at the newest
    record of an episode still going: its next extras are unknown) is not sampled; an episode's end is settled
    however it ended, and the rows become sampleable once the next records arrive."""
    fields = {**FIELDS, "extra/base_action": ((2,), np.float32)}

    def episode(*args):
        rec = synthetic_episode(*args)
        return {**rec, "extra/base_action": rec["action_executed"].copy()}

    buf = ReplayBuffer(64, fields)
    running = episode(0, 8, "terminated")
    buf.add(episode(1, 4, "time_limit"), "a")
    buf.add({k: v[:6] for k, v in running.items()}, "b")  # records 0..5 so far
    steps = rows_by_step(buf, 0)
    rng = np.random.default_rng(0)
    for n_step in (1, 3):
        rows = np.arange(buf.size)
        pending = buf.pending(rows, n_step)
        # 1-step: the transition into step 5 (its next decision unknown); 3-step: those into steps 3, 4 and 5
        assert sorted(int(buf.data["step"][r]) for r in rows[pending]) == list(range(6 - n_step, 6))
        assert not pending[[r for r in rows if buf.data["episode_id"][r] == 1]].any()  # ended: settled
        drawn = buf.sample(2000, rng, gamma=0.9, n_step=n_step, extras=("base_action",), settled=True)
        assert drawn["next_extras_valid"][drawn["obs"]["state"][:, 1] == 0].all()
        starts = drawn["obs"]["state"][drawn["obs"]["state"][:, 1] == 0, 0]
        assert starts.max() == 4 - n_step  # the last settled start of the running episode
        everything = buf.sample(2000, rng, gamma=0.9, n_step=n_step, extras=("base_action",))
        assert not everything["next_extras_valid"][everything["obs"]["state"][:, 1] == 0].all()  # the default
    buf.add({k: v[6:] for k, v in running.items()}, "b")  # the episode goes on and ends
    assert not buf.pending(np.array(list(steps.values())), 3).any()


def test_action_chunks_are_padded_and_masked_past_the_episode_end():
    buf = ReplayBuffer(64, FIELDS)
    buf.add(synthetic_episode(0, 4, "terminated"), "a")
    buf.add(synthetic_episode(1, 4, "terminated", reward=100.0), "a")
    steps = rows_by_step(buf, 0)
    b = buf.gather(np.array([steps[1], steps[3]]), gamma=0.5, chunk=3)
    assert b["action"].shape == (2, 3, 2)
    assert b["action"][0, :, 1].tolist() == [1, 2, 3] and b["action_mask"][0].all()
    # from obs_2: actions 3, 4, then the episode is over: padded with the last one, masked out
    assert b["action"][1, :, 1].tolist() == [3, 4, 4] and b["action_mask"][1].tolist() == [True, True, False]
    assert b["action"][:, :, 0].tolist() == [[0, 0, 0], [0, 0, 0]]  # all from episode 0
    np.testing.assert_allclose(b["reward"], [1 + 0.5 + 0.25, 1 + 0.5])
    np.testing.assert_allclose(b["discount"], [0.125, 0.0])
    with pytest.raises(ValueError, match="n_step"):
        buf.gather(np.array([steps[1]]), gamma=0.5, n_step=2, chunk=3)


def test_vectorised_add_matches_record_by_record_add_with_interleaved_actors():
    eps = [synthetic_episode(i, 5 + i % 3, "time_limit" if i % 2 else "terminated") for i in range(6)]
    whole, single = ReplayBuffer(20, FIELDS), ReplayBuffer(20, FIELDS)
    for i in range(0, 6, 2):  # two actors, each message a few records, interleaved; the ring wraps
        a, b = eps[i], eps[i + 1]
        for lo in range(0, 9, 3):
            for src, ep in (("a", a), ("b", b)):
                part = {k: v[lo : lo + 3] for k, v in ep.items()}
                whole.add(part, src)
                for j in range(len(part["step"])):
                    single.add({k: v[j : j + 1] for k, v in part.items()}, src)
    for name in ("prev", "next", "row_uid", "prev_uid", "next_uid"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(single, name))
    rows = np.arange(whole.size)
    valid = rows[whole._valid(rows)]
    b = whole.gather(valid, 0.9, n_step=2)
    assert np.all(b["next_obs"]["state"][:, 1] == b["obs"]["state"][:, 1])  # never across episodes


# --- the interventions partition: an index kept on every write ----------------------------------------------------
def test_the_intervention_index_matches_a_scan_of_the_ring_through_wrap_around():
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(23, FIELDS)
    for i in range(60):  # messages shorter and longer than the ring, from two actors; it wraps many times
        ep = synthetic_episode(i, int(rng.integers(1, 30)), "time_limit")
        ep["intervention"][:] = rng.random(len(ep["step"])) < rng.choice([0.0, 0.3, 1.0])
        buf.add(ep, "a" if i % 2 else "b")
        scan = np.flatnonzero(buf.data["intervention"][: buf.size])  # what every batch used to compute
        np.testing.assert_array_equal(buf.intervention_rows(), scan)
        assert len(buf.interventions) == len(scan)
        ranks = np.arange(len(scan))
        np.testing.assert_array_equal(buf.interventions[ranks], scan)  # rank k is the same row: the same draws


def test_an_overwritten_intervention_row_leaves_the_index_and_a_new_one_joins_it():
    buf = ReplayBuffer(6, FIELDS)
    buf.add(synthetic_episode(0, 5, "time_limit", intervention_steps=(1, 2, 3)), "a")  # rows 0-5
    assert buf.intervention_rows().tolist() == [1, 2, 3]
    buf.add(synthetic_episode(1, 2, "time_limit", intervention_steps=(2,)), "a")  # rows 0-2: 1 and 2 overwritten
    assert buf.intervention_rows().tolist() == [2, 3]  # row 2 holds the new episode's human step
    assert buf.data["episode_id"][2] == 1
    buf.add(synthetic_episode(2, 2, "time_limit"), "a")  # rows 3-5, no human step
    assert buf.intervention_rows().tolist() == [2]


def test_sampling_the_interventions_never_returns_another_row_and_draws_as_the_scan_did():
    rng = np.random.default_rng(1)
    buf = ReplayBuffer(50, FIELDS)
    for i in range(37):  # the ring wraps, its cursor mid-ring; about a fifth of the steps are a human's
        ep = synthetic_episode(i, 9, "time_limit")
        ep["intervention"][1:] = rng.random(9) < 0.2
        buf.add(ep, "a")
    scan = np.flatnonzero(buf.data["intervention"][: buf.size])
    assert 0 < len(scan) < buf.size
    for seed in range(20):
        rows = buf.sample_rows(64, np.random.default_rng(seed), among=buf.interventions)
        assert buf.data["intervention"][rows].all()
        np.testing.assert_array_equal(rows, buf.sample_rows(64, np.random.default_rng(seed), among=scan))
    batch = buf.sample(256, rng, 0.9, among=buf.interventions)
    assert batch["intervention"].all()
