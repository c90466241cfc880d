"""Learned rewards on the actor: the wrapper's shaped rewards and dones, its never-blocking scoring, the raw env
reward kept in every record, the learner's record layout from the config, and a human label above the model."""

import time

import numpy as np
import pytest

from robo_rl.rewards.base import RewardModel, RewardModelError, Scores
from robo_rl.rewards.shaper import RewardShaper
from robo_rl.rewards.wrapper import EXTRAS, RewardWrapper
from robo_rl.teleop.base import FakeDevice
from robo_rl.teleop.intervention import InterventionWrapper
from sim.point_reach import PointReachEnv

TOWARDS_CORNER = np.array([1.0, 1.0], np.float32)  # +x, +y: the point's pixel goes to the bottom-right corner


class CornerModel(RewardModel):
    """Progress = how near the bright pixel of point_reach's 8x8 camera is to the bottom-right corner."""

    kind, provides = "corner", ("progress", "success_prob")

    def __init__(self, delay_s: float = 0.0):
        super().__init__(("top",))
        self.delay_s, self.calls = delay_s, 0

    def score(self, frames, task, previous=None):
        self.calls += 1
        time.sleep(self.delay_s)
        n = self.check_frames(frames)
        progress = np.zeros(n, np.float32)
        for i, img in enumerate(frames["top"]):
            r, c = np.unravel_index(img[..., 0].argmax(), img.shape[:2])
            progress[i] = (r + c) / 14
        return Scores(progress=progress, success_prob=(progress > 0.9).astype(np.float32))


def env_with(model, **kw):
    env = RewardWrapper(PointReachEnv(camera=True, max_episode_steps=30, step_size=0.3), model, **kw)
    env.reset(seed=0)
    return env


def test_the_shaped_reward_is_the_shapers_and_the_model_decides_when_the_task_is_done():
    env = env_with(CornerModel(), asynchronous=False, shaper={"debounce_k": 2})
    reference = RewardShaper({"debounce_k": 2})
    obs, _ = env.env.reset(seed=0)  # the same start, scored by hand
    reference.reset(env.model.score({"top": obs["images"]["top"][None]}, env.task))
    env.reset(seed=0)
    for _ in range(30):
        obs, reward, terminated, truncated, info = env.step(TOWARDS_CORNER)
        expected = reference.step(
            env.model.score({"top": obs["images"]["top"][None]}, env.task), info["record_extras"]["reward_env"]
        )
        assert reward == pytest.approx(expected.reward)
        assert info["record_extras"]["reward_env"] < 0  # point_reach's own reward (−distance), kept beside
        if terminated or truncated:
            break
    assert terminated and info["ended_by"] == "reward_success" and reward > 1.0 - 1e-6
    assert info["success_prob"] == 1.0 and info["record_extras"]["success_prob"] == 1.0


class NeverDone(RewardModel):
    kind, provides = "never", ("progress", "success_prob")

    def __init__(self):
        super().__init__(("top",))

    def score(self, frames, task, previous=None):
        n = self.check_frames(frames)
        return Scores(progress=np.zeros(n, np.float32), success_prob=np.zeros(n, np.float32))


class SucceedsAtOnce(PointReachEnv):
    """A simulator whose success check fires on every step (the env ends each episode at its first step)."""

    def _step(self, action):
        obs, reward, _, info = super()._step(action)
        return obs, reward, True, {**info, "success": True}


def test_an_episode_whose_sim_success_the_model_overrules_still_ends_at_the_time_limit():
    """The wrapper ignores the simulator's success; the env, having said terminated, never says truncated: the
    episode must still end at the env's time limit (Meta-World's own env raised at its 500th step)."""
    env = RewardWrapper(SucceedsAtOnce(camera=True, max_episode_steps=30), NeverDone(), asynchronous=False)
    env.reset(seed=0)
    for step in range(1, 31):
        _, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
        assert not terminated and truncated == (step == 30), step
    assert info["ended_by"] == "time_limit"


def test_scoring_never_blocks_the_control_loop_and_a_stale_score_falls_back_to_the_env_reward():
    model = CornerModel(delay_s=0.3)
    env = env_with(model, max_staleness_steps=1, fallback="env")
    times = []
    for _ in range(10):
        start = time.perf_counter()
        _, reward, terminated, truncated, info = env.step(np.zeros(2, np.float32))
        times.append(time.perf_counter() - start)
        if info["success_prob"] is None:  # no fresh score: the env's reward for this step
            assert reward == info["record_extras"]["reward_env"] and info["record_extras"]["success_prob"] == -1.0
    assert max(times) < 0.25, f"a step waited {max(times) * 1e3:.0f} ms for the model (it takes 300 ms)"
    assert env.counts["fallback_steps"] >= 5 and env.counts["scores_skipped"] >= 1
    time.sleep(0.35)
    stats = env.stats()  # what the actor's heartbeat carries
    assert stats["reward_fallback_steps"] >= 5 and stats["reward_score_ms_p50"] >= 300
    env.close()


def test_a_human_failure_label_beats_a_model_that_says_success():
    pad = FakeDevice("pad")
    human = InterventionWrapper(PointReachEnv(camera=True, max_episode_steps=30), [pad])
    env = RewardWrapper(human, CornerModel(), asynchronous=False, shaper={"debounce_k": 3})
    env.reset(seed=0)
    for _ in range(10):  # to the corner: the model is sure of success from there on
        _, _, terminated, _, info = env.step(TOWARDS_CORNER)
        if info["success_prob"] == 1.0:
            break
    assert info["success_prob"] == 1.0 and not terminated  # one positive: not yet debounced
    pad.push(["failure"])
    _, reward, terminated, _, info = env.step(TOWARDS_CORNER)
    assert terminated and info["ended_by"] == "human_failure" and reward < 1.0


def test_the_learner_knows_the_records_layout_from_the_config_and_the_actor_agrees(tmp_path):
    from robo_rl.data.schema import fields_for_env
    from robo_rl.envs.spec import spec_of, static_spec
    from robo_rl.envs.wrappers import make_actor_env, wrapper_extras
    from robo_rl.rewards.classifier import SuccessClassifier
    from tests.test_pipeline import toy_config

    SuccessClassifier(("top",), resize=[32, 32], channels=4, features=8, hidden=8).save(tmp_path / "clf")
    cfg = toy_config(tmp_path, "env.camera=true", "reward=model", f"reward.model={tmp_path / 'clf'}")
    from omegaconf import OmegaConf

    learner_view = static_spec(OmegaConf.to_container(cfg.env, resolve=True), wrapper_extras(cfg))
    env = make_actor_env(cfg)
    try:
        assert isinstance(env, RewardWrapper)
        assert env.shaper.config.success_threshold == 0.5  # null: the classifier's own threshold (0.5 untrained)
        assert spec_of(env) == learner_view and set(learner_view.extras) == set(EXTRAS)
        assert {"extra/reward_env", "extra/success_prob"} <= set(fields_for_env(learner_view))
    finally:
        env.close()


CLASSIFIER, PROGRESS = "robo_rl.rewards.classifier.SuccessClassifier", "robo_rl.rewards.progress.ProgressCritic"


def test_the_config_names_the_reward_model_by_its_class_and_a_run_saved_before_by_its_kind(tmp_path):
    from omegaconf import OmegaConf

    from robo_rl.config import ConfigError, load_saved_config, save_config
    from robo_rl.envs.wrappers import make_actor_env
    from robo_rl.rewards.classifier import SuccessClassifier
    from robo_rl.rewards.relabel import make_relabeller
    from tests.test_pipeline import toy_config

    SuccessClassifier(("top",), resize=[32, 32], channels=4, features=8, hidden=8).save(tmp_path / "clf")
    given = ("env.camera=true", "reward=model", f"reward.model={tmp_path / 'clf'}")
    env = make_actor_env(toy_config(tmp_path, *given, f"reward.model_target={CLASSIFIER}"))
    try:
        assert isinstance(env.model, SuccessClassifier)
    finally:
        env.close()
    with pytest.raises(ConfigError, match=f"holds a '{CLASSIFIER}' reward model, not a '{PROGRESS}' one"):
        make_actor_env(toy_config(tmp_path, *given, f"reward.model_target={PROGRESS}"))
    with pytest.raises(ConfigError, match=f"did you mean '{PROGRESS}'"):
        make_actor_env(toy_config(tmp_path, *given, "reward.model_target=robo_rl.rewards.progress.ProgresCritic"))

    # a run folder's config.yaml written before `model_target`: its reward block has `kind`, and resumes as it did
    cfg = OmegaConf.to_container(toy_config(tmp_path, *given, "reward.where=learner"), resolve=True)
    del cfg["reward"]["model_target"]
    for kind, refused in (("classifier", False), ("progress", True)):
        cfg["reward"]["kind"] = kind
        save_config(OmegaConf.create(cfg), tmp_path / "config.yaml")
        saved = load_saved_config(tmp_path / "config.yaml")
        if refused:
            with pytest.raises(RewardModelError, match=f"not a '{PROGRESS}' one"):
                make_relabeller(saved)
            with pytest.raises(ConfigError, match=f"not a '{PROGRESS}' one"):
                make_actor_env(load_saved_config(tmp_path / "config.yaml", ["reward.where=actor"]))
            continue
        assert isinstance(make_relabeller(saved).model, SuccessClassifier)
        env = make_actor_env(load_saved_config(tmp_path / "config.yaml", ["reward.where=actor"]))
        try:
            assert isinstance(env.model, SuccessClassifier)
        finally:
            env.close()


class ReachWithoutStaticSpec(PointReachEnv):
    """An env that cannot tell its spec from its config (as gym-hil's and robosuite's): `train` builds it once."""

    spec_from_config = None


def test_a_run_on_an_env_without_a_static_spec_records_the_wrappers_extras_too(tmp_path):
    from robo_rl.commands.train import _ensure_env_spec
    from robo_rl.envs.spec import read_spec, spec_of
    from robo_rl.envs.wrappers import make_actor_env
    from robo_rl.rewards.classifier import SuccessClassifier
    from tests.test_pipeline import toy_config

    SuccessClassifier(("top",), resize=[32, 32], channels=4, features=8, hidden=8).save(tmp_path / "clf")
    cfg = toy_config(
        tmp_path,
        "env.camera=true",
        "reward=model",
        f"reward.model={tmp_path / 'clf'}",
        f"env._target_={__name__}.ReachWithoutStaticSpec",
    )
    run = tmp_path / "run"
    written = _ensure_env_spec(cfg, run)  # what the learner will read
    env = make_actor_env(cfg)
    try:
        assert isinstance(env.unwrapped, ReachWithoutStaticSpec)
        assert set(written.extras) == set(EXTRAS) and spec_of(env) == written == read_spec(run / "env_spec.json")
    finally:
        env.close()


def test_an_actor_with_a_learned_reward_streams_records_with_the_env_reward_beside_the_shaped_one(tmp_path):
    from robo_rl.rewards.classifier import SuccessClassifier
    from tests.test_pipeline import run_pair, toy_config

    SuccessClassifier(("top",), resize=[32, 32], channels=4, features=8, hidden=8).save(tmp_path / "clf")
    cfg = toy_config(
        tmp_path,
        "env.camera=true",
        "policy.encoder.resize=[32,32]",
        "policy.encoder.channels=8",
        "reward=model",
        f"reward.model={tmp_path / 'clf'}",
        "train.total_env_steps=300",
        "train.learning_starts=100000",
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done"
    rows = learner.replay.online.size
    env_reward = learner.replay.online.data["extra/reward_env"][:rows]
    shaped = learner.replay.online.data["reward"][:rows]
    steps = learner.replay.online.data["step"][:rows] > 0
    assert rows > 300 and np.all(env_reward[steps] < 0)  # point_reach's −distance, kept as it was
    assert not np.allclose(env_reward[steps], shaped[steps])  # while the reward learned from is the model's
    demos, n = learner.replay.demos.data, learner.replay.demos.size  # the prior data under the same reward
    demo_steps = demos["step"][:n] > 0
    assert np.all(demos["extra/reward_env"][:n][demo_steps] < 0)
    assert not np.allclose(demos["reward"][:n][demo_steps], demos["extra/reward_env"][:n][demo_steps])
    ids = demos["episode_id"][:n]  # each demonstration's success earns its bonus once (at the end at the latest)
    assert all(demos["reward"][:n][ids == i].max() >= 0.5 for i in np.unique(ids))
    from robo_rl.runs import read_metrics

    episodes = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["kind"] == "episode"]
    assert episodes and all(m["return_env"] < 0 and m["success_prob_max"] <= 1 for m in episodes)
    assert any(m["success_prob_max"] >= 0 for m in episodes)  # −1: no fresh score in the whole episode


def test_a_learned_reward_scored_on_the_learner_relabels_each_message_and_the_actor_runs_no_model(tmp_path):
    from robo_rl.rewards.classifier import SuccessClassifier
    from tests.test_pipeline import run_pair, toy_config

    SuccessClassifier(("top",), resize=[32, 32], channels=4, features=8, hidden=8).save(tmp_path / "clf")
    cfg = toy_config(
        tmp_path,
        "env.camera=true",
        "policy.encoder.resize=[32,32]",
        "policy.encoder.channels=8",
        "reward=model",
        f"reward.model={tmp_path / 'clf'}",
        "reward.where=learner",
        "train.total_env_steps=200",
        "train.learning_starts=100000",
    )
    from robo_rl.envs.wrappers import make_actor_env, wrapper_extras

    env = make_actor_env(cfg)
    assert not isinstance(env, RewardWrapper) and wrapper_extras(cfg) == {}  # the actor's env and spec: no model
    env.close()
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and learner.relabel is not None and learner.relabel.errors == 0
    data, rows = learner.replay.online.data, learner.replay.online.size
    steps = data["step"][:rows] > 0
    assert np.all(data["extra/reward_env"][:rows][steps] < 0)  # the env's −distance, kept
    assert np.all((data["extra/success_prob"][:rows] >= 0) & (data["extra/success_prob"][:rows] <= 1))
    assert not np.allclose(data["reward"][:rows][steps], data["extra/reward_env"][:rows][steps])
