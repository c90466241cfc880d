"""RewardShaper: learned-reward-model scores → RL rewards and dones (robo_rl/rewards/shaper.py)."""

import numpy as np
import pytest

from robo_rl.rewards.base import Scores
from robo_rl.rewards.shaper import REASONS, RewardShaper, ShaperConfig


def run(shaper, progress=None, probs=None, first=None, **step_kwargs):
    """Steps through a sequence of progress / success_prob values until done; returns the ShapedSteps."""
    n = len(progress if progress is not None else probs)
    shaper.reset(first)
    out = []
    for t in range(n):
        scores = {}
        if progress is not None:
            scores["progress"] = progress[t]
        if probs is not None:
            scores["success_prob"] = probs[t]
        out.append(shaper.step(scores, env_reward=0.0, **step_kwargs))
        if out[-1].terminated or out[-1].truncated:
            break
    return out


def test_shaping_is_potential_based():
    shaper = RewardShaper(ShaperConfig(gamma=0.9, shaping_scale=1.0, success_bonus=2.0))
    steps = run(shaper, progress=[0.3, 0.7, 0.4], first={"progress": 0.1})
    phis = [0.1, 0.3, 0.7, 0.4]
    for t, step in enumerate(steps):
        assert step.potential == pytest.approx(phis[t + 1])
        assert step.shaping == pytest.approx(0.9 * phis[t + 1] - phis[t])
        assert step.reward == step.shaping


def test_oscillation_earns_nothing_and_monotone_progress_earns_its_net():
    oscillating = [0.75, 0.25, 0.75, 0.25, 0.75, 0.25]
    exact = RewardShaper(ShaperConfig(gamma=1.0, shaping_scale=1.0, success_bonus=2.5))
    assert sum(s.shaping for s in run(exact, progress=oscillating, first={"progress": 0.25})) == 0.0
    discounted = RewardShaper(ShaperConfig(gamma=0.99, shaping_scale=1.0, success_bonus=2.5))
    total = sum(s.shaping for s in run(discounted, progress=oscillating, first={"progress": 0.25}))
    assert total == pytest.approx((0.99 - 1) * sum(oscillating))  # small, and not positive
    assert total <= 0
    monotone = RewardShaper(ShaperConfig(gamma=1.0, shaping_scale=0.5, success_bonus=1.5))
    steps = run(monotone, progress=np.linspace(0.1, 1.0, 10), first={"progress": 0.0})
    assert sum(s.reward for s in steps) == pytest.approx(0.5 * 1.0)


def test_success_bonus_exceeds_any_step_shaping_and_config_refuses_a_smaller_one():
    config = ShaperConfig()
    rng = np.random.default_rng(0)
    shaper = RewardShaper(config)
    shaper.reset({"progress": rng.random()})
    for p in rng.random(200):
        assert abs(shaper.step({"progress": p}, 0.0).shaping) < config.success_bonus
    for p in (0.0, 1.0):  # the extremes: Φ 1 → 0 and 0 → 1
        shaper.reset({"progress": 1.0 - p})
        assert abs(shaper.step({"progress": p}, 0.0).shaping) < config.success_bonus
    with pytest.raises(ValueError, match=r"success_bonus 1\.0 .* = 1\.99"):
        ShaperConfig(success_bonus=1.0, shaping_scale=1.0, gamma=0.99)
    with pytest.raises(ValueError, match="unknown reward.shaper setting 'debounce'; did you mean 'debounce_k'"):
        RewardShaper({"debounce": 2})


def test_debounce_needs_k_consecutive_positives():
    shaper = RewardShaper({"debounce_k": 3, "success_threshold": 0.5})
    steps = run(shaper, probs=[0.9, 0.95, 0.2, 0.9, 0.9, 0.1, 0.8])  # spikes of 2, never 3
    assert len(steps) == 7 and not any(s.terminated or s.truncated or s.success for s in steps)
    steps = run(shaper, probs=[0.2, 0.5, 0.9, 0.99, 0.3])
    assert len(steps) == 4 and [s.terminated for s in steps] == [False, False, False, True]
    assert steps[-1].success and steps[-1].reason == "model_success"
    assert steps[-1].reward == pytest.approx(steps[-1].shaping + shaper.config.success_bonus)
    with pytest.raises(RuntimeError, match="reset"):
        shaper.step({"success_prob": 0.9}, 0.0)


def test_success_without_termination_pays_the_bonus_once():
    shaper = RewardShaper({"debounce_k": 1, "terminate_on_success": False})
    steps = run(shaper, probs=[0.9, 0.9, 0.9])
    assert [s.success for s in steps] == [True, False, False]
    assert not any(s.terminated for s in steps)


def test_human_label_beats_model_and_sim():
    shaper = RewardShaper({"debounce_k": 1, "use_sim_success": True})
    shaper.reset()
    step = shaper.step({"progress": 1.0, "success_prob": 1.0}, 0.0, env_success=True, human_label="failure")
    assert step.terminated and not step.success and step.reason == "human_failure"
    assert step.reward == step.shaping  # no bonus
    for label in ("success", "human_success"):
        shaper.reset()
        step = shaper.step({"progress": 0.0, "success_prob": 0.0}, 0.0, human_label=label)
        assert step.terminated and step.success and step.reason == "human_success"
        assert step.reward == pytest.approx(shaper.config.success_bonus)
    shaper.reset()
    with pytest.raises(ValueError, match="unknown human label 'yes'"):
        shaper.step({"progress": 0.5}, 0.0, human_label="yes")


def test_sim_success_beats_the_model_only_when_configured():
    sim = RewardShaper({"debounce_k": 1, "use_sim_success": True})
    sim.reset()
    step = sim.step({"progress": 0.2, "success_prob": 1.0}, 0.0, env_success=False)
    assert not step.terminated and not step.success  # the model's success_prob is ignored
    step = sim.step({"progress": 0.4, "success_prob": 0.0}, 1.0, env_success=True)
    assert step.terminated and step.success and step.reason == "sim_success"
    assert step.shaping == pytest.approx(0.5 * (0.99 * 0.4 - 0.2))  # shaping from progress still applies
    model = RewardShaper({"debounce_k": 1})
    model.reset()
    step = model.step({"progress": 0.4, "success_prob": 0.0}, 1.0, env_success=True)
    assert not step.terminated and not step.success


def test_stagnation_and_regression_truncate():
    shaper = RewardShaper({"stagnation_steps": 3, "stagnation_eps": 0.05})
    steps = run(shaper, progress=[0.2, 0.22, 0.24, 0.26, 0.5], first={"progress": 0.2})
    assert len(steps) == 3  # 0.2 → 0.22 → 0.24: never more than 0.05 above 0.2
    assert steps[-1].truncated and not steps[-1].terminated and steps[-1].reason == "stagnation"
    steps = run(shaper, progress=[0.2, 0.3, 0.4, 0.5, 0.55, 0.6])  # steady progress: never stagnates
    assert len(steps) == 6 and not any(s.truncated for s in steps)
    shaper = RewardShaper({"regression_drop": 0.3})
    steps = run(shaper, progress=[0.4, 0.7, 0.5, 0.45, 0.4, 0.1])
    assert len(steps) == 5  # 0.7 → 0.4 is a drop of 0.3
    assert steps[-1].truncated and not steps[-1].terminated and steps[-1].reason == "regression"


def test_clipping_bounds_each_step_shaping():
    shaper = RewardShaper({"clip": 0.1, "shaping_scale": 1.0, "success_bonus": 2.0})
    steps = run(shaper, progress=[1.0, 0.0, 0.55], first={"progress": 0.0})
    assert [s.shaping for s in steps] == pytest.approx([0.1, -0.1, 0.1])


def test_raw_reward_is_kept_unchanged():
    shaper = RewardShaper({"debounce_k": 1})
    for raw in (0.0, -3.25, 7.5):
        shaper.reset()
        step = shaper.step({"progress": 0.5, "success_prob": 0.9}, raw)
        assert step.raw_reward == raw and step.reward != raw
        assert step.reward == pytest.approx(0.5 * 0.99 * 0.5 + 1.0)


@pytest.mark.parametrize(
    "config",
    [
        {"stagnation_steps": 6, "regression_drop": 0.4, "debounce_k": 2},
        {"use_sim_success": True, "terminate_on_success": False},
        {"debounce_k": 30},
    ],
)
def test_episode_equals_step_by_step(config):
    rng = np.random.default_rng(7)
    n = 40
    scores = Scores(
        progress=np.clip(np.cumsum(rng.normal(0.03, 0.08, n)), 0, 1).astype(np.float32),
        success_prob=rng.random(n).astype(np.float32),
    )
    env_rewards, env_success = rng.normal(size=n), rng.random(n) > 0.8
    labels = [None] * n
    labels[35] = "failure"
    first = Scores(progress=np.array([0.05], np.float32), success_prob=np.array([0.1], np.float32))
    shaper = RewardShaper(config)
    batch = shaper.episode(scores, env_rewards, env_success, labels, first=first)

    shaper.reset(first)
    for t in range(n):
        one = Scores(progress=scores.progress[t : t + 1], success_prob=scores.success_prob[t : t + 1])
        step = shaper.step(one, env_rewards[t], bool(env_success[t]), labels[t])
        assert batch["valid"][t]
        for key in ("reward", "shaping", "potential", "terminated", "truncated", "success", "raw_reward"):
            assert batch[key][t] == getattr(step, key), (key, t)
        assert REASONS[batch["reason"][t]] == step.reason
        assert batch["success_prob"][t] == step.success_prob
        if step.terminated or step.truncated:
            break
    end = t + 1
    assert end < n  # every configuration here stops early
    assert not batch["valid"][end:].any() and not batch["reward"][end:].any()
    assert not (batch["terminated"][end:] | batch["truncated"][end:] | batch["success"][end:]).any()
    assert (batch["raw_reward"] == env_rewards).all()


def test_non_finite_outputs_raise_naming_the_output():
    shaper = RewardShaper()
    with pytest.raises(ValueError, match="success_prob is nan"):
        shaper.step({"progress": 0.5, "success_prob": float("nan")}, 0.0)
    with pytest.raises(ValueError, match="progress is inf"):
        shaper.step(Scores(progress=np.array([np.inf], np.float32)), 0.0)
    with pytest.raises(ValueError, match="delta is nan"):
        shaper.episode({"delta": [0.1, np.nan]}, [0.0, 0.0])
    with pytest.raises(ValueError, match="none of progress"):
        shaper.step({}, 0.0)


def test_delta_only_and_success_only_scores():
    shaper = RewardShaper({"gamma": 1.0, "shaping_scale": 1.0, "success_bonus": 2.5})
    out = shaper.episode(Scores(delta=np.array([0.3, 0.5, 0.4, -0.2, -2.0, 0.25])), np.zeros(6))
    assert out["potential"] == pytest.approx([0.3, 0.8, 1.0, 0.8, 0.0, 0.25])  # running sum, clipped to [0, 1]
    assert out["shaping"] == pytest.approx([0.3, 0.5, 0.2, -0.2, -0.8, 0.25])
    assert np.isnan(out["success_prob"]).all() and not out["success"].any()
    out = shaper.episode({"success_prob": [0.2, 0.6, 0.7, 0.9]}, np.zeros(4), first={"success_prob": 0.1})
    assert out["potential"] == pytest.approx([0.2, 0.6, 0.7, 0.9])
    assert out["shaping"] == pytest.approx([0.1, 0.4, 0.1, 0.2])
    assert out["success"].tolist() == [False, False, False, True]  # debounce_k 3: the 3rd positive
    assert out["reward"][3] == pytest.approx(0.2 + 2.5)
