"""Runs that say when they measured nothing (issue 48): each guard trips on a case built to trip it and stays silent
on a healthy one. PPO's guards act before backward(): the recorded log-probabilities are checked at the actor's and
the minibatch's batch shape before any update, and a minibatch with an exploding ratio or a KL past target_kl is
skipped with its weights untouched. The learner's guards (robo_rl/algos/guards.py) read the algorithm's metrics and
the episodes: Q outside the return's range, an actor that never leaves its base, a learned reward that disagrees
with the simulator, a replay without a success."""

import json
import logging
import math
from types import SimpleNamespace

import pytest
import torch

from policies.chain import ChainPolicy
from policies.flow import ChunkGenerator
from robo_rl.algos.guards import TrainingGuards, guards_markdown, return_range, run_guards
from robo_rl.algos.ppo import LogProbMismatch, build_ppo
from robo_rl.configs.run import GuardsConfig
from robo_rl.envs import make_observation_space
from robo_rl.eval.episodes import write_report
from tests.test_ppo import bandit_batch

SPACE = make_observation_space(2, {})


class BatchShapedChain(ChainPolicy):
    """A chain whose features shift with the number of observations in the call (as a batch statistic or a padded
    batch would): its log-probability depends on the batch shape."""

    def features(self, obs):
        features, frozen = super().features(obs)
        return features + 0.1 * math.log(len(obs["state"])), frozen


def chain(cls=ChainPolicy, seed: int = 0) -> ChainPolicy:
    torch.manual_seed(seed)
    return cls(SPACE, 2, method="reinflow", generator=ChunkGenerator(2, 2, chunk_size=3, steps=4, hidden=[32]))


def acted(policy: ChainPolicy, n: int, per_call: int) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """`n` decisions sampled as an actor stepping `per_call` envs samples them: (obs, chains, log-probs)."""
    obs = {"state": torch.rand(n, 2) * 2 - 1, "images": {}}
    parts = []
    with torch.no_grad():
        for lo in range(0, n, per_call):
            parts.append(policy.sample_chain({"state": obs["state"][lo : lo + per_call], "images": {}}))
    return obs, torch.cat([c for c, _ in parts]), torch.cat([lp for _, lp in parts])


def ppo(policy, acting_batch: int = 1, **kw):
    keys = {"rollout_env_steps": 64, "batch_size": 32, "epochs": 2, "value_hidden": [8], "clip": 0.2, **kw}
    algo = build_ppo(policy, SPACE, 2, **keys)
    algo.acting_batch = acting_batch
    return algo


def weights(algo) -> dict:
    return {k: v.clone() for k, v in [*algo.policy.state_dict().items(), *algo.value.state_dict().items()]}


def unchanged(before: dict, algo) -> bool:
    return all(
        torch.equal(before[k], v) for k, v in [*algo.policy.state_dict().items(), *algo.value.state_dict().items()]
    )


# --- PPO: the recorded log-probabilities, at the actor's batch shape and the minibatch's -----------------------------
def test_ppo_refuses_log_probabilities_that_depend_on_the_batch_shape_before_any_update():
    """Recorded by an actor of 4 envs (4 observations per call), recomputed by PPO's minibatch of 32: a policy whose
    log π depends on the batch shape is named, with the difference and both shapes, before any weight moves."""
    policy = chain(BatchShapedChain)
    obs, chains, log_prob = acted(policy, 64, per_call=4)
    algo = ppo(policy, acting_batch=4)
    before = weights(algo)
    with pytest.raises(LogProbMismatch, match=r"depends on the batch shape.*32 observations per call.*4 per call"):
        algo.update([bandit_batch(obs, torch.rand(64), chains, log_prob, steps=3)])
    assert unchanged(before, algo)


def test_ppo_refuses_a_record_the_acting_weights_did_not_make():
    """Log-probabilities from other weights (a stale or corrupted record) differ at the actor's own batch shape too."""
    obs, chains, log_prob = acted(chain(seed=1), 64, per_call=1)
    algo = ppo(chain(seed=2))
    with pytest.raises(LogProbMismatch, match=r"actor's batch shape \(1 observations per call.*did not act"):
        algo.update([bandit_batch(obs, torch.rand(64), chains, log_prob, steps=3)])


def test_a_healthy_rollout_passes_the_log_probability_check_and_learns():
    policy = chain()
    obs, chains, log_prob = acted(policy, 64, per_call=4)
    algo = ppo(policy, acting_batch=4, lr_policy=1e-3)
    before = weights(algo)
    metrics = algo.update([bandit_batch(obs, torch.rand(64), chains, log_prob, steps=3)])
    assert metrics["log_prob_recorded_diff"] < 1e-5 and metrics["start_log_ratio"] < 1e-5, metrics
    assert metrics["minibatches_skipped_ratio"] == metrics["minibatches_skipped_kl"] == 0
    assert not unchanged(before, algo)


# --- PPO: the ratio and KL guards act before backward() --------------------------------------------------------------
def test_an_exploding_ratio_is_skipped_before_backward_and_counted(caplog):
    """One decision's recorded log π 52 nats below the weights' (a ratio of e^52, the community study's): its
    minibatch is skipped in every epoch, the weights bit for bit unchanged, the count and the ratio in the metrics,
    and a warning names it. The other minibatch learns."""
    policy = chain()
    obs, chains, log_prob = acted(policy, 64, per_call=1)
    algo = ppo(policy, log_prob_tolerance=None, batch_size=64, lr_policy=1e-3)
    before = weights(algo)
    shifted = log_prob.clone()
    shifted[5] -= 52.0
    with caplog.at_level(logging.WARNING, logger="robo_rl.algos.ppo"):
        metrics = algo.update([bandit_batch(obs, torch.rand(64), chains, shifted, steps=3)])
    assert unchanged(before, algo)
    assert metrics["minibatches_skipped_ratio"] == 2 and metrics["max_abs_log_ratio"] == pytest.approx(52.0, abs=1e-3)
    assert "skip_log_ratio=5.0" in caplog.text and "52" in caplog.text
    algo = ppo(policy, log_prob_tolerance=None, batch_size=32, lr_policy=1e-3)
    order = torch.argsort(torch.arange(64) != 5)  # decision 5 first: one minibatch of two per epoch holds it
    torch.manual_seed(0)
    metrics = algo.update([bandit_batch(obs, torch.rand(64), chains[order], shifted[order], steps=3)])
    assert 1 <= metrics["minibatches_skipped_ratio"] <= 2 and not unchanged(before, algo)


def test_a_kl_past_target_kl_is_skipped_before_backward_and_ends_the_epochs():
    """A recorded log π 0.5 nats off on every decision: the KL is past target_kl before any step, so the first
    minibatch is skipped (the old guard ran after backward() and took that step) and the epochs end."""
    policy = chain()
    obs, chains, log_prob = acted(policy, 64, per_call=1)
    algo = ppo(policy, log_prob_tolerance=None, target_kl=0.01, lr_policy=1e-3)
    before = weights(algo)
    metrics = algo.update([bandit_batch(obs, torch.rand(64), chains, log_prob - 0.5, steps=3)])
    assert unchanged(before, algo)
    assert metrics["minibatches_skipped_kl"] == 1 and metrics["minibatches_skipped_ratio"] == 0


# --- the learner's guards --------------------------------------------------------------------------------------------
class Records(list):
    def write(self, record: dict) -> None:
        self.append(record)


def guards(gamma: float = 0.99, **settings) -> TrainingGuards:
    return TrainingGuards(GuardsConfig(**settings), gamma, Records())


def test_q_outside_the_returns_range_is_flagged_once():
    g = guards()
    g.rewards(torch.tensor([0.0, 1.0, 0.0]).numpy())  # a 0/1 task: the return is in [0, 100]
    assert return_range(0.0, 1.0, 0.99) == pytest.approx((0.0, 100.0))
    for q in (0.0, 60.0, 140.0, -40.0):  # inside, or within the margin (half the width)
        assert g.update({"q_mean": q})["guard_q_range"] == 0.0
    assert g.update({"q_mean": 200.0, "alpha": 0.1, "entropy": 5.0})["guard_q_range"] == 0.0  # SAC's bonus 0.5/step
    assert g.update({"q_mean": 1e4})["guard_q_range"] == 1.0
    assert g.update({"q_mean": 1e6})["guard_q_range"] == 1.0
    assert [r["guard"] for r in g.writer] == ["q_range"] and g.writer[0]["q_mean"] == 1e4
    low = guards()
    low.rewards(torch.tensor([0.0, 1.0]).numpy())
    assert low.update({"q_mean": -60.0})["guard_q_range"] == 1.0


def test_an_actor_that_never_leaves_its_base_is_flagged(caplog):
    still, moving = guards(base_updates=50), guards(base_updates=50)
    with caplog.at_level(logging.WARNING, logger="robo_rl.algos.guards"):
        for i in range(60):
            still.update({"residual_abs_mean": 0.0})
            moving.update({"residual_abs_mean": 0.002 * (i + 1)})
    assert still.update({})["guard_unmoved_actor"] == 1.0 and moving.update({})["guard_unmoved_actor"] == 0.0
    assert caplog.text.count("never left its base") == 1  # warned once


def test_a_dsrl_noise_actor_that_never_moves_is_flagged_and_a_learning_one_is_not():
    """DSRL's actor starts at its base's prior: the real algorithm reports how far its weights moved, and the guard
    trips on an actor whose updates change next to nothing (a learning rate of 1e-12), not on a learning one."""
    from robo_rl.algos.dsrl import build_dsrl
    from tests.test_dsrl import SPACE, flow_base, noise_policy

    def batch(gen):
        s, w = torch.rand(32, 2, generator=gen) * 2 - 1, torch.rand(32, 4, generator=gen) * 2 - 1
        obs = {"state": s, "images": {}}
        return {
            "obs": obs,
            "next_obs": obs,
            "action": torch.zeros(32, 2, 2),
            "reward": -(w**2).sum(-1),
            "discount": torch.zeros(32),
            "extras": {"noise": w},
            "next_extras": {"noise": w},
            "intervention": torch.zeros(32, dtype=torch.bool),
            "next_extras_valid": torch.ones(32, dtype=torch.bool),
        }

    flags = {}
    for lr in (1e-12, 3e-3):
        base = flow_base(chunk=2, seed=3)
        algo = build_dsrl(
            noise_policy(base, execute_steps=2), SPACE, 2, batch_size=32, lr_actor=lr, precision="float32"
        )
        g, gen = guards(base_updates=5), torch.Generator().manual_seed(0)
        for _ in range(6):
            flags[lr] = g.update(algo.update([batch(gen)]))
    assert flags[1e-12]["actor_moved"] < 1e-6 and flags[1e-12]["guard_unmoved_actor"] == 1.0, flags[1e-12]
    assert flags[3e-3]["actor_moved"] > 1e-3 and flags[3e-3]["guard_unmoved_actor"] == 0.0, flags[3e-3]


def test_a_farmed_learned_reward_is_flagged_and_an_agreeing_one_is_not():
    """Per episode the model's best success probability against the simulator's success: 40% scored successes the
    simulator calls failures trips the 30% bar; 10% disagreement does not; episodes without a probability are left
    out."""
    farmed, agreeing = guards(reward_episodes=50), guards(reward_episodes=50)
    for i in range(50):
        farmed.episode(i % 5 == 0, {"success_prob_max": 0.9 if i % 5 < 3 else 0.1})
        agreeing.episode(i % 2 == 0, {"success_prob_max": (0.9 if i % 2 == 0 else 0.1) if i % 10 else 0.9})
        agreeing.episode(False, {"success_prob_max": -1.0})  # the model gave no probability
    assert farmed.update({})["guard_reward_disagrees"] == 1.0
    record = farmed.tripped["reward_disagrees"]
    assert record["farmed"] == 20 and record["missed"] == 0 and record["share"] == pytest.approx(0.4)
    assert agreeing.update({})["guard_reward_disagrees"] == 0.0 and len(agreeing.verdicts) == 50


def test_a_replay_without_a_success_is_flagged():
    none, one = guards(success_within_episodes=100), guards(success_within_episodes=100)
    for i in range(120):
        none.episode(False)
        one.episode(i == 80)
    assert none.update({})["guard_no_success"] == 1.0 and none.tripped["no_success"]["episodes"] == 100
    assert one.update({})["guard_no_success"] == 0.0


def test_demonstrations_seed_the_reward_range_and_ppo_skips_are_flagged():
    demos = {"reward": torch.tensor([0.0, 0.0, 1.0]).numpy(), "step": torch.tensor([0, 1, 2]).numpy()}
    g = TrainingGuards(GuardsConfig(), 0.9, None, demos)
    assert (g.r_min, g.r_max) == (0.0, 1.0)
    assert g.update({"q_mean": 30.0})["guard_q_range"] == 1.0  # past 10 + 5
    assert g.update({"minibatches_skipped_ratio": 0, "minibatches_skipped_kl": 0})["guard_ppo_skipped"] == 0.0
    assert g.update({"minibatches_skipped_ratio": 2, "max_abs_log_ratio": 52.0})["guard_ppo_skipped"] == 1.0


def test_the_learner_tells_ppo_the_actors_batch_shape():
    algo = ppo(chain())
    cfg = SimpleNamespace(guards=GuardsConfig(), actor=SimpleNamespace(num_envs=8))
    g = TrainingGuards.for_learner(cfg, algo, None, None)
    assert algo.acting_batch == 8 and g.gamma == algo.batch_spec.gamma


def test_tripped_guards_reach_the_run_report(tmp_path):
    """The guard records in metrics.jsonl are what the run's evaluation report lists (report.json and report.md), as
    `robo-rl train` writes it at the end of a run."""
    from robo_rl.runs import MetricsWriter

    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    g = TrainingGuards(GuardsConfig(success_within_episodes=3), 0.99, writer)
    for _ in range(3):
        g.episode(False)
    writer.write({"kind": "episode", "env_steps": 10, "episode": 1, "success": False, "return": 0.0, "length": 10})
    writer.close()
    records = run_guards(tmp_path / "metrics.jsonl")
    assert [r["guard"] for r in records] == ["no_success"] and run_guards(tmp_path / "absent.jsonl") == []
    assert "no successful episode in the first 3" in guards_markdown(records) and guards_markdown([]) == ""
    result = {"episodes": 2, "successes": 0, "success_rate": 0.0, "success_ci95": [0.0, 0.66]}
    result.update(mean_length=10.0, mean_return=0.0)
    write_report(tmp_path / "eval", result, "ckpt.pt", 30, tmp_path / "metrics.jsonl")
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert [r["guard"] for r in report["guards"]] == ["no_success"] and report["guards"][0]["episodes"] == 3
    assert "no successful episode in the first 3" in (tmp_path / "eval" / "report.md").read_text()


def test_a_real_residual_actor_that_cannot_move_is_flagged_and_a_learning_one_is_not():
    """The residual algorithm's own metrics feed the guard: on a one-step task whose best action is not the base's,
    an actor with a learning rate of 1e-12 stays at the base for 8 actor updates (flagged); at 3e-3 it moves (not
    flagged); Q stays inside the return's range in both (the rewards are -|a - a*|², one step)."""
    import numpy as np

    from robo_rl.algos.residual import build_residual
    from tests.test_residual import LinearBase, residual_policy

    target = torch.tensor([[0.2, -0.1, 0.0], [0.0, 0.0, 0.9]])
    gen = torch.Generator().manual_seed(0)

    def batch():
        s = torch.rand(64, 3, generator=gen) * 2 - 1
        a = (torch.rand(64, 2, generator=gen) * 2 - 1) * 0.4
        zeros, obs = torch.zeros(64, 2), {"state": s, "images": {}}
        return {
            "obs": obs,
            "next_obs": obs,
            "action": a,
            "reward": -((a - s @ target.T) ** 2).sum(-1),
            "discount": torch.zeros(64),
            "extras": {"base_action": zeros},
            "next_extras": {"base_action": zeros},
            "next_extras_valid": torch.ones(64, dtype=torch.bool),
            "intervention": torch.zeros(64, dtype=torch.bool),
        }

    flags = {}
    for lr in (1e-12, 3e-3):
        torch.manual_seed(0)
        policy = residual_policy(LinearBase(np.zeros((2, 3), np.float32)))
        keys = {"batch_size": 64, "n_step": 1, "critic_updates_per_actor": 1, "critic_hidden": [32, 32]}
        algo = build_residual(policy, make_observation_space(3, {}), 2, lr_actor=lr, precision="float32", **keys)
        g = guards(base_updates=8)
        for _ in range(8):
            b = batch()
            g.rewards(b["reward"].numpy())
            metrics = g.update(algo.update([b]))
        flags[lr] = metrics
    assert flags[1e-12]["guard_unmoved_actor"] == 1.0 and flags[3e-3]["guard_unmoved_actor"] == 0.0, flags
    assert flags[1e-12]["guard_q_range"] == flags[3e-3]["guard_q_range"] == 0.0
