"""Intervention as the reward (RLIF, `reward=intervention`, robo_rl/rewards/intervention.py): with the simulated human
on the pick task, the reward is negative exactly on the steps a human takes over and zero otherwise (no task reward,
which is kept beside it), a step cost and ending on takeover work as set, the prior data is relabelled the same way,
and a run without a human or with a non-negative penalty is refused in one line."""

import numpy as np
import pytest

from robo_rl.config import ConfigError, load_config
from robo_rl.envs.wrappers import find_wrapper, make_actor_env, wrapper_extras
from robo_rl.rewards.intervention import InterventionReward
from robo_rl.rewards.relabel import relabel_prior

DRIFT = np.array([0.0, 0.0, 1.0, 1.0], np.float32)  # straight up with the gripper shut: the expert soon steps in


def _rlif_env(*overrides):
    return make_actor_env(load_config(["human=sim", "reward=intervention", "experiment=rlpd", *overrides]))


def _run(env, episodes: int, seed: int = 0) -> list[list[tuple]]:
    """Each episode's steps as (reward, intervention, env reward, terminated, truncated, ended_by)."""
    out = []
    env.reset(seed=seed)
    for _ in range(episodes):
        steps, done = [], False
        while not done:
            _, reward, terminated, truncated, info = env.step(DRIFT)
            env_reward = info["record_extras"]["reward_env"]
            steps.append((reward, info["intervention"], env_reward, terminated, truncated, info["ended_by"]))
            done = terminated or truncated
        out.append(steps)
        env.reset()
    return out


def test_the_reward_is_negative_exactly_on_the_simulated_humans_takeover_steps_and_zero_otherwise():
    env = _rlif_env()
    try:
        episodes = _run(env, 3)
        takeovers = 0
        for steps in episodes:
            before = False
            for reward, human, *_ in steps:
                expected = -1.0 if human and not before else 0.0
                assert reward == expected
                takeovers += expected < 0
                before = human
        assert takeovers >= 3  # the drifting policy is taken over in every episode
        env_rewards = [s[2] for steps in episodes for s in steps]
        assert max(env_rewards) == 1.0  # the human's corrections succeed: the task's reward, kept but not paid
        assert find_wrapper(env, InterventionReward).stats()["rlif_takeovers"] == takeovers
    finally:
        env.close()


def test_a_step_cost_is_paid_every_step_and_a_takeover_can_end_the_episode():
    env = _rlif_env("reward.step_cost=0.01", "reward.end_on_takeover=true")
    try:
        for steps in _run(env, 2, seed=1):
            *before, last = steps
            assert all(s[0] == pytest.approx(-0.01) and not s[1] for s in before)
            assert last[0] == pytest.approx(-1.01) and last[1]
            assert last[3] and not last[4] and last[5] == "human_failure"  # terminated: the penalty is the value
    finally:
        env.close()


def test_the_records_keep_the_env_reward_and_the_demonstrations_are_relabelled_without_a_task_reward():
    cfg = load_config(["human=sim", "reward=intervention", "reward.step_cost=0.02", "experiment=rlpd"])
    assert set(wrapper_extras(cfg)) == {"reward_env", "success_prob"}
    demos = {"step": np.array([0, 1, 2, 0, 1]), "reward": np.array([0.0, 0.0, 1.0, 0.0, 1.0], np.float32)}
    out = relabel_prior(cfg, demos)
    np.testing.assert_allclose(out["reward"], [0.0, -0.02, -0.02, 0.0, -0.02])
    np.testing.assert_allclose(out["extra/reward_env"], demos["reward"])


def test_intervention_reward_without_a_human_is_refused_in_one_line():
    with pytest.raises(ConfigError) as e:
        make_actor_env(load_config(["reward=intervention", "experiment=rlpd"]))
    assert "reward=intervention pays only for a human's takeovers" in str(e.value) and "\n" not in str(e.value)


def test_a_takeover_reward_that_is_no_penalty_is_refused():
    with pytest.raises(
        ConfigError, match=r"reward.takeover_reward=0.5 is not allowed: must be a number in \(-inf, 0\)"
    ):
        load_config(["human=sim", "reward=intervention", "reward.takeover_reward=0.5"])


def test_a_td_target_clip_that_cannot_hold_the_penalty_is_refused_naming_the_fix():
    with pytest.raises(ConfigError) as e:  # the default experiment clips to the sparse success's [0, 1]
        load_config(["human=sim", "reward=intervention"])
    assert "algo.target_q_clip=[0.0,1.0] must be reaching down to the takeover penalty" in str(e.value)
    assert "set algo.target_q_clip=null" in str(e.value) and "\n" not in str(e.value)
    assert load_config(["human=sim", "reward=intervention", "algo.target_q_clip=null"]).algo.target_q_clip is None


def test_a_takeover_is_learned_as_the_policys_rejected_action_ending_there_and_the_corrections_as_they_ran():
    # RLIF's labelling: the person stepped in against the policy's proposal at the takeover step, so that proposal
    # (action_policy) carries the penalty, and nothing after it is bootstrapped from; the person's correction steps
    # after it stay ordinary transitions. `penalize: executed` pays it on the person's first correction instead.
    from robo_rl.data.replay import ReplayBuffer
    from tests.test_replay import FIELDS, rows_by_step, synthetic_episode

    rec = synthetic_episode(0, 6, end="time_limit", reward=0.0, intervention_steps=(3, 4))
    rec["reward"][3] = -1.0
    rec["action_policy"][1:] = 9.0  # what the policy proposed at each step
    buf = ReplayBuffer(50, FIELDS)
    buf.add(rec, "actor-0")
    rows = rows_by_step(buf, 0)
    takeover, correction, before = rows[3], rows[4], rows[2]
    got = buf.gather(np.array([takeover, correction, before]), gamma=0.9, n_step=3, rejected=True)
    np.testing.assert_allclose(got["action"][0], [9.0, 9.0])  # the rejected proposal
    np.testing.assert_allclose(got["action"][1], rec["action_executed"][4])  # the person's correction
    np.testing.assert_allclose(got["reward"], [-1.0, 0.0, 0.9 * -1.0])  # the step before still sees the penalty
    np.testing.assert_allclose(got["discount"], [0.0, 0.9**3, 0.9**3], rtol=1e-6)  # the takeover ends; n-step elsewhere
    assert got["intervention"].tolist() == [False, True, False]  # the proposal is no person's action to imitate
    plain = buf.gather(np.array([takeover]), gamma=0.9, n_step=3)
    np.testing.assert_allclose(plain["action"][0], rec["action_executed"][3])
    assert plain["reward"][0] == pytest.approx(-1.0) and plain["discount"][0] == pytest.approx(0.9**3)


def test_the_learner_samples_rejected_actions_only_under_intervention_as_the_reward_penalizing_them():
    from robo_rl.rewards.relabel import rlif_rejects

    base = ["human=sim", "reward=intervention", "algo.target_q_clip=null"]
    assert rlif_rejects(load_config(base))  # the default
    assert not rlif_rejects(load_config([*base, "reward.penalize=executed"]))
    assert not rlif_rejects(load_config(["human=sim"]))
    with pytest.raises(ConfigError, match="reward.penalize"):
        load_config([*base, "reward.penalize=human"])
