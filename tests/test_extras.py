"""Policy extras (a base action, a noise, a log-probability) travel in the record under `extra/<name>`, from the
actor's policy through the wire into the replay, and come back with the transitions that need them."""

import numpy as np
import torch

from policies.gaussian import TanhGaussianPolicy
from robo_rl.data.replay import ReplayBuffer
from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
from sim.point_reach import PointReachEnv
from tests.test_pipeline import run_pair, toy_config


class MeanReportingPolicy(TanhGaussianPolicy):
    """Acts like the usual policy and also reports the mean action of each decision as an extra."""

    def __init__(self, observation_space, action_dim, **kwargs):
        super().__init__(observation_space, action_dim, **kwargs)
        self.extras_spec = {"mean_action": ((action_dim,), np.float32)}

    def act_with_extras(self, obs: dict, deterministic: bool = False, slots: list[int] | None = None):
        with torch.no_grad():
            return self.act(obs, deterministic), {"mean_action": self.act(obs, deterministic=True)}


def test_gather_returns_the_extras_of_the_decision_at_obs_and_at_next_obs():
    env = PointReachEnv(max_episode_steps=6)
    spec = {"decided_at": ((), np.float32)}
    fields = fields_for_env(env, type("P", (), {"extras_spec": spec})())
    rec, records = EpisodeRecorder(2, spec), []
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        records.append(rec.reset(obs, episode))
        done = False
        while not done:  # the decision at obs_k says k: the record it leads to (k + 1) carries it
            decided_at = rec.step
            obs, r, term, trunc, info = env.step(np.zeros(2, np.float32))
            records.append(rec.record_step(obs, r, term, trunc, info, extras={"decided_at": decided_at}))
            done = term or trunc
    replay = ReplayBuffer(100, fields)
    replay.add(stack_records(records, fields), source="a")
    rows = np.flatnonzero(replay.data["step"][: replay.size] > 0)
    out = replay.gather(rows, 0.9, extras=("decided_at",))
    step = replay.data["step"][rows]
    np.testing.assert_array_equal(out["extras"]["decided_at"], step - 1)  # the decision that chose `action`
    last = replay.data["terminated"][rows] | replay.data["truncated"][rows]
    np.testing.assert_array_equal(out["next_extras_valid"], ~last)
    np.testing.assert_array_equal(out["next_extras"]["decided_at"], np.where(last, 0, step))
    assert "extras" not in replay.gather(rows, 0.9), "gathered only when an algorithm asks"


def test_extras_declared_by_the_acting_policy_reach_the_learners_replay_over_the_wire(tmp_path):
    cfg = toy_config(tmp_path, "policy._target_=tests.test_extras.MeanReportingPolicy", "train.total_env_steps=150")
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages, dict(learner.link.bad_messages)
    online = learner.replay.online
    stored = online.data["extra/mean_action"][: online.size]
    live = online.data["step"][: online.size] > 0
    assert np.abs(stored[live]).sum() > 0 and np.all(stored[~live] == 0), "each step carries its decision's mean"
    executed = online.data["action_executed"][: online.size][live]
    assert np.all(np.abs(stored[live]) <= 1) and not np.allclose(stored[live], executed), "the mean, not the sample"
    batch = learner.replay.sample(16, np.random.default_rng(0), 0.99, extras=("mean_action",))
    assert batch["extras"]["mean_action"].shape == (16, 2) and batch["next_extras"]["mean_action"].shape == (16, 2)


def test_a_non_finite_action_is_refused_counted_and_ends_the_episode_by_safety(tmp_path, monkeypatch):
    from robo_rl.data.schema import ENDED_BY_CODES

    calls = {"n": 0}
    act = TanhGaussianPolicy.act

    def sometimes_nan(self, obs, deterministic=False):
        calls["n"] += 1
        out = act(self, obs, deterministic)
        return out * float("nan") if calls["n"] % 7 == 0 else out

    monkeypatch.setattr(TanhGaussianPolicy, "act", sometimes_nan)
    cfg = toy_config(tmp_path, "train.total_env_steps=300", "actor.steps_per_message=3")
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages, "no NaN reached the wire"
    online = learner.replay.online
    ended = online.data["ended_by"][: online.size]
    assert (ended == ENDED_BY_CODES["safety"]).sum() >= 300 // 7 - 5, "each refused step ended its episode"
    assert np.all(np.isfinite(online.data["action_executed"][: online.size]))
    stats = [s for s in (i["stats"] for i in learner.link.actors.values()) if "refused_steps" in s]
    assert stats and stats[-1]["refused_steps"] > 0 and stats[-1]["inference_ms_p99"] > 0
