"""`policy.action_history`: the residual and its critic see the last k actions the policy sent. Under a delay the
arm still executes some of them, which the observation cannot show (issue 50: a policy that holds under delay)."""

import numpy as np
import pytest
import torch

from policies.residual import ResidualPolicy
from robo_rl.algos.residual import build_residual
from robo_rl.envs import make_observation_space
from robo_rl.policy_io import policy_step
from tests.test_residual import LinearBase, one_step_algo, one_step_batch


def history_policy(k: int, state_dim: int = 3, action_dim: int = 2, scale: float = 0.3) -> ResidualPolicy:
    base = LinearBase(np.full((action_dim, state_dim), 0.1, np.float32))
    return ResidualPolicy(
        make_observation_space(state_dim, {}), action_dim, base, scale=scale, hidden=[32], action_history=k
    )


def test_each_record_carries_the_actions_sent_before_its_decision_and_an_episode_starts_with_none():
    policy = history_policy(2)
    obs = {"state": np.array([0.4, -0.2, 0.9], np.float32), "images": {}}
    sent, recorded = [], []
    for _ in range(4):
        action, extras = policy_step(policy, obs, deterministic=False)  # with exploration noise: actions differ
        sent.append(action)
        recorded.append(extras["prev_actions"])
    np.testing.assert_allclose(recorded[0], np.zeros(4))
    np.testing.assert_allclose(recorded[1], np.concatenate([np.zeros(2), sent[0]]), atol=1e-6)
    np.testing.assert_allclose(recorded[3], np.concatenate([sent[1], sent[2]]), atol=1e-6)
    policy.reset()
    np.testing.assert_allclose(policy_step(policy, obs, True)[1]["prev_actions"], np.zeros(4))
    assert "prev_actions" not in history_policy(0).extras_spec, "no history, nothing extra recorded"
    with pytest.raises(ValueError, match="action_history must be >= 0"):
        history_policy(-1)


def test_demonstrations_get_the_history_an_actor_would_have_recorded():
    """Record i + 1 holds the decision at obs_i, which came after records i-k+1 .. i's actions (record 0's zero
    action included), never an earlier episode's."""
    policy = history_policy(2, action_dim=1)
    algo = build_residual(policy, make_observation_space(3, {}), 1, batch_size=8, precision="float32")
    steps = np.array([0, 1, 2, 3, 0, 1, 2])
    actions = np.array([0.0, 0.1, 0.2, 0.3, 0.0, 0.5, 0.6], np.float32)[:, None]
    batch = {
        "step": steps,
        "state": np.zeros((7, 3), np.float32),
        "action_executed": actions,
        "terminated": np.array([0, 0, 0, 1, 0, 0, 0], bool),
        "truncated": np.zeros(7, bool),
    }
    history = algo.relabel_prior(batch)["extra/prev_actions"]
    expected = [[0, 0], [0, 0.0], [0.0, 0.1], [0.1, 0.2], [0.2, 0.3], [0, 0.0], [0.0, 0.5]]
    np.testing.assert_allclose(history, expected, atol=1e-6)


def test_the_learner_takes_the_next_history_the_actor_recorded_and_shifts_where_the_episode_ended():
    policy = history_policy(2, action_dim=1)
    algo = build_residual(policy, make_observation_space(3, {}), 1, batch_size=8, precision="float32")
    batch = {
        "action": torch.tensor([[0.5], [0.7]]),
        "extras": {"prev_actions": torch.tensor([[0.1, 0.2], [0.3, 0.4]])},
        "next_extras": {"prev_actions": torch.tensor([[0.2, 0.5], [9.0, 9.0]])},
        "next_extras_valid": torch.tensor([True, False]),
    }
    out = algo.histories(batch)
    torch.testing.assert_close(out["history"], batch["extras"]["prev_actions"])
    torch.testing.assert_close(out["next_history"], torch.tensor([[0.2, 0.5], [0.4, 0.7]]))
    assert algo.critic(
        {"state": torch.zeros(2, 3), "images": {}}, algo.scored(batch["action"], out["history"])
    ).shape == (2, 2), "the critic scores the action with its history"


def test_with_the_history_the_residual_learns_what_a_delay_needs_and_without_it_cannot():
    """A one-step task whose best action cancels the previous one (a* = -a_prev, as a correction that must allow
    for the command still in flight): the observation says nothing of it, the history all of it."""

    def learn(k: int) -> float:
        torch.manual_seed(0)
        torch.set_num_threads(1)
        policy = history_policy(k, action_dim=1, scale=0.5)
        policy.exploration_std = 0.0
        algo = one_step_algo(policy, 1)
        gen = torch.Generator().manual_seed(0)

        def batch():
            prev = torch.rand(128, 1, generator=gen) - 0.5
            a = torch.rand(128, 1, generator=gen) - 0.5
            extras = {"base_action": torch.zeros(128, 1), **({"prev_actions": prev} if k else {})}
            return one_step_batch({"state": torch.zeros(128, 3), "images": {}}, a, -((a + prev) ** 2).sum(-1), extras)

        for _ in range(150):
            algo.update([batch(), batch()])
        prev = torch.linspace(-0.4, 0.4, 9)[:, None]
        with torch.no_grad():
            history = prev if k else None
            residual = policy.residual(policy.encoder({"state": torch.zeros(9, 3), "images": {}}), prev * 0, history)
        return float((policy.compose(torch.zeros(9, 1), residual) + prev).abs().max())

    assert learn(1) < 0.1, "with the history: the action cancels the one in flight"
    assert learn(0) > 0.3, "without it the residual can only average over what was sent"
