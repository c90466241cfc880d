"""Learner and actor together (threads of one process, real ZeroMQ sockets) on the toy env."""

import os
import signal
import threading

import numpy as np
import pytest

from robo_rl.actor import Actor
from robo_rl.config import load_config, make_env, make_policy, save_config
from robo_rl.eval.episodes import evaluate_policy
from robo_rl.learner import Learner
from robo_rl.runs import load_checkpoint, read_metrics
from robo_rl.transport.link import free_ports

TOY = ["env=point_reach", "experiment=rlpd"]  # SAC/RLPD; the default experiment is residual RL
# the learner's device in every toy run: `ROBO_RL_TEST_DEVICE=cuda pytest ...` runs the learner tests on a GPU
TEST_DEVICE = os.environ.get("ROBO_RL_TEST_DEVICE", "cpu")


SMALL_NETS = ["policy.hidden=[32,32]", "algo.critic_hidden=[32,32]"]  # for runs that check plumbing, not learning


def toy_config(tmp_path, *extra):
    p = free_ports(3)
    chosen = any(e.startswith("experiment=") for e in extra)  # it replaces TOY's
    toy = [t for t in TOY if not (chosen and t.startswith("experiment="))]
    return load_config(
        [
            *toy,
            f"cache_dir={tmp_path / 'cache'}",
            f"transport.data_port={p[0]}",
            f"transport.weights_port={p[1]}",
            f"transport.ctrl_port={p[2]}",
            "logger.progress=false",
            "logger.log_every_s=0.2",
            "demos.num_episodes=5",
            "train.learning_starts=100",
            "algo.batch_size=64",
            "eval.episodes=20",
            f"device={TEST_DEVICE}",
            *extra,
        ]
    )


def run_pair(cfg, run_dir):
    learner, _, reason = run_pair_with_actor(cfg, run_dir)
    return learner, reason


def run_pair_with_actor(cfg, run_dir):
    """A learner on a thread and an actor in this one, run to the end: (learner, actor, the actor's end reason)."""
    learner = Learner(cfg, run_dir, progress=False)
    t = threading.Thread(target=learner.run)
    t.start()
    actor = Actor(cfg, progress=False)
    reason = actor.run()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the actor's shutdown ignores Ctrl-C; undo for pytest
    t.join(timeout=120)
    assert not t.is_alive()
    return learner, actor, reason


# fast copy (same loops; learning, UTD, staleness): test_cli.py::test_train_runs_learner_and_actor_processes_and_...
@pytest.mark.slow
def test_actor_and_learner_train_a_policy_that_beats_the_untrained_one(tmp_path):
    cfg = toy_config(tmp_path, "train.total_env_steps=1500")
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done"
    assert learner.env_steps >= 1500
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert any(m["kind"] == "episode" for m in metrics) and metrics[-1]["kind"] == "end"
    learner_lines = [m for m in metrics if m["kind"] == "learner"]
    assert 0.5 < learner_lines[-1]["realised_utd"] < 1.5, "the learner enforces the configured UTD of 1"
    # staleness of the acting weights: published every 50 updates, so a few versions behind at most
    stale = [m for m in learner_lines if "staleness_versions_max" in m]
    assert stale and all(0 <= m["staleness_versions_max"] <= 10 for m in stale)
    assert any(0.0 < m.get("staleness_s_mean", -1) < 5.0 for m in stale)

    env = make_env(cfg)
    untrained = make_policy(cfg, env)
    trained = make_policy(cfg, env)
    trained.load_state_dict(load_checkpoint(tmp_path / "run")["algo"]["policy"])
    before = evaluate_policy(env, untrained, 20, seed=123)
    after = evaluate_policy(env, trained, 20, seed=123)
    assert after["success_rate"] >= before["success_rate"] + 0.4, (before["success_rate"], after["success_rate"])


def test_a_malformed_step_batch_is_counted_and_dropped_without_stopping_the_learner(tmp_path):
    cfg = toy_config(tmp_path, "train.total_env_steps=300", "transport.max_held_mb=3")
    (tmp_path / "run").mkdir()
    learner = Learner(cfg, tmp_path / "run", progress=False)
    assert learner.link.max_held_bytes == 3 * 2**20  # the setting reaches the link
    good = learner.replay.demos.data
    bad = {k: v[:3].copy() for k, v in good.items()}
    bad["state"][1, 0] = np.nan
    learner.ingest("actor-x", bad)
    assert learner.link.bad_messages == {"invalid step batch": 1} and len(learner.replay.online) == 0
    learner.ingest("actor-x", {k: v[:3].copy() for k, v in good.items()})
    assert len(learner.replay.online) == 3
    learner.close()


@pytest.mark.parametrize("key", ["env", "eval"])
def test_unknown_keys_are_refused_by_name(key):
    from robo_rl.config import ConfigError

    with pytest.raises(ConfigError, match=f"unknown config key '{key}.nope'"):
        load_config([f"{key}.nope=1"])


def test_resume_continues_from_the_checkpoint_counters_and_weights(tmp_path):
    cfg = toy_config(tmp_path, "train.total_env_steps=250", "train.utd=0.25", *SMALL_NETS)  # counters, not learning
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(cfg, run_dir / "config.yaml")
    first, _ = run_pair(cfg, run_dir)
    ckpt = load_checkpoint(run_dir)
    assert ckpt["counters"]["env_steps"] == first.env_steps and ckpt["counters"]["updates"] == first.updates > 0

    resumed_cfg = load_config([f"resume={run_dir}", "train.total_env_steps=400"])  # the run's own config as base
    assert resumed_cfg.env._target_ == "sim.point_reach.PointReachEnv"
    resumed = Learner(resumed_cfg, run_dir, progress=False)
    assert (resumed.env_steps, resumed.updates) == (first.env_steps, first.updates)
    for name, p in resumed.policy.state_dict().items():
        assert (p == first.policy.state_dict()[name]).all()
    assert resumed.replay.online.writes == first.replay.online.writes  # the replay came back too
    resumed.close()
    second, reason = run_pair(resumed_cfg, run_dir)
    assert reason == "done" and second.env_steps >= 400 and second.updates > first.updates


@pytest.mark.parametrize("mode", ["step", "episode"])
def test_new_weights_are_applied_between_steps_or_only_at_episode_boundaries(tmp_path, mode):
    cfg = toy_config(tmp_path, f"actor.apply_weights={mode}")
    actor = Actor(cfg, progress=False)
    newer = object()

    class Ready:  # a transport with version 7 loaded and waiting
        error, stop_reason = None, None

        def take_policy(self, current):
            return (7, newer)

    actor.transport.link.close(0)
    actor.transport = Ready()
    actor._sync(episode_boundary=False)
    assert (actor.policy is newer) == (mode == "step")
    actor._sync(episode_boundary=True)
    assert actor.policy is newer and actor.policy_version == 7


def test_the_learner_trains_from_a_disk_backed_replay(tmp_path):
    steps, starts, lead = 300, 50, 20
    cfg = toy_config(
        tmp_path,
        f"train.total_env_steps={steps}",
        f"train.learning_starts={starts}",
        f"actor.max_lead_steps={lead}",  # the actor runs at most this far ahead of the updates paid for
        "replay.storage=disk",
        "replay.flush_every_s=0.2",
        *SMALL_NETS,
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    # UTD 1 kept while sampling from disk: (steps - starts - lead) = 230 updates owed at the end, less a message's
    assert reason == "done" and learner.updates > 200
    assert learner.replay.online.size == learner.replay.store.num_records >= steps  # every record came from disk
