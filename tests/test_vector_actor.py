"""One actor process stepping several simulated envs (`actor.num_envs`): one batched policy call a step, each env's
episode recorded on its own, each env's chunk its own, and refused where one env is meant (a robot, the GUI)."""

import copy
import json

import numpy as np
import pytest
import torch

from policies.chain import ChainPolicy
from policies.flow import ChunkGenerator
from policies.gaussian import TanhGaussianPolicy
from robo_rl.actor import Actor
from robo_rl.config import ConfigError
from robo_rl.offline.bc import save_atomic
from robo_rl.policy_io import policy_steps, stack_obs
from tests.test_pipeline import SMALL_NETS, run_pair, toy_config
from tests.test_ppo import SPACE


class OneEpisodeStatePolicy(TanhGaussianPolicy):
    """A policy with per-episode state and no per-env slots (like a base's chunk queue)."""

    vector_slots = False

    def reset(self, slot: int | None = None) -> None:
        pass


def _episodes(online) -> dict[int, np.ndarray]:
    """Each episode's `step` values in the order the replay stored them."""
    ids, steps = online.data["episode_id"][: online.size], online.data["step"][: online.size]
    return {int(e): steps[ids == e] for e in np.unique(ids)}


def test_the_chain_acts_for_several_envs_each_with_its_own_chunk(monkeypatch):
    randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *shape, **kw: randn(*shape, **kw) * 0)  # the same start for all envs
    torch.manual_seed(0)  # an untrained generator: batching and each env's chunk need no fitted one
    generator = ChunkGenerator(2, 2, chunk_size=3, steps=8, hidden=[32]).eval()
    policy = ChainPolicy(SPACE, 2, method="reinflow", generator=generator, steps=4, execute_steps=3)
    states = [np.array([0.5, -0.5], np.float32), np.array([-0.8, 0.2], np.float32), np.array([0.0, 0.9], np.float32)]
    obs = [{"state": s, "images": {}} for s in states]
    actions, extras = policy_steps(policy, obs, deterministic=True, slots=[0, 1, 2])
    assert actions.shape == (3, 2) and extras["decision"].ravel().tolist() == [1, 1, 1]
    for i, o in enumerate(obs):  # batched, each env's action is what that env alone would get
        alone = copy.deepcopy(policy)
        alone.queues = {}
        np.testing.assert_allclose(actions[i], alone.act(stack_obs([o]), deterministic=True)[0].numpy(), atol=1e-5)
    assert extras["chain"].shape == (3, int(np.prod(policy.chain_shape))) and extras["log_prob"].shape == (3, 1)
    _, extras = policy_steps(policy, obs, deterministic=True, slots=[0, 1, 2])
    assert extras["decision"].ravel().tolist() == [0, 0, 0], "each env goes on with its own chunk"
    policy.reset(1)  # env 1's episode ended: only its chunk is dropped
    _, extras = policy_steps(policy, obs, deterministic=True, slots=[0, 1, 2])
    assert extras["decision"].ravel().tolist() == [0, 1, 0]
    _, extras = policy_steps(policy, obs, deterministic=True, slots=[0, 1, 2])  # envs 0, 2 used up their 3 steps
    assert extras["decision"].ravel().tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="slots"):
        policy.act(stack_obs(obs), slots=[0, 0, 1])


# plumbing, not learning: small networks and a low UTD (weights still go out several times during the run)
FEW_UPDATES = [*SMALL_NETS, "train.utd=0.1", "train.learning_starts=50", "train.weights_every_updates=10"]


def test_one_actor_steps_several_envs_each_episode_recorded_whole(tmp_path):
    cfg = toy_config(
        tmp_path, "actor.num_envs=3", "train.total_env_steps=600", "actor.steps_per_message=4", *FEW_UPDATES
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages and learner.env_steps >= 600
    assert learner.updates > 0
    episodes = _episodes(learner.replay.online)
    assert len(episodes) >= 6
    for steps in episodes.values():  # three envs' records interleave on the wire, never within an episode
        assert steps.tolist() == list(range(len(steps)))
    online = learner.replay.online
    first = online.data["state"][: online.size][online.data["step"][: online.size] == 0]
    assert len({tuple(np.round(s, 5)) for s in first[:3]}) == 3, "each env starts from its own seed"
    stats = [i["stats"] for i in learner.link.actors.values()]
    assert stats and stats[-1]["inference_ms_p50"] > 0


def test_an_actor_with_several_envs_runs_on_policy_iterations(tmp_path):
    from policies.flow import ChunkGenerator

    model = ChunkGenerator(4, 2, chunk_size=3, steps=4, hidden=[32])
    path = save_atomic(model.checkpoint(execute_steps=3), tmp_path / "bc4" / "policy.pt")
    cfg = toy_config(
        tmp_path,
        "policy=reinflow",
        "algo=ppo",
        f"policy.path={path}",
        "algo.rollout_env_steps=150",
        "train.total_env_steps=750",
        "train.random_steps=0",
        "train.learning_starts=0",
        "algo.value_hidden=[32]",
        "actor.num_envs=4",
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and learner.updates >= 3
    assert learner.schedule.rollout.stale_steps < learner.env_steps / 3, (
        "the actor waits for new weights instead of running on"
    )
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    iters = [x for x in lines if "ppo_iteration" in x]
    assert iters and all(x["rollout_env_steps"] >= 150 for x in iters)
    online = learner.replay.online
    for steps in _episodes(online).values():
        assert steps.tolist() == list(range(len(steps)))
    live = online.data["step"][: online.size] > 0
    decisions = online.data["extra/decision"][: online.size][live].ravel()
    assert 0.25 < decisions.mean() < 0.45, "one decision per chunk of 3 in each env (fewer at episode ends)"


@pytest.mark.parametrize(
    "override, why",
    [
        ("actor.realtime=true", "for simulation"),
        ("policy._target_=tests.test_vector_actor.OneEpisodeStatePolicy", "run several actor processes"),
        ("actor.apply_weights=episode", "actor.apply_weights=step"),
    ],
)
def test_several_envs_are_refused_where_one_env_is_meant(tmp_path, override, why):
    cfg = toy_config(tmp_path, "actor.num_envs=2", override)
    with pytest.raises(ConfigError, match=why):
        Actor(cfg, progress=False)


def test_a_non_finite_action_of_one_env_ends_only_that_envs_episode(tmp_path, monkeypatch):
    from robo_rl.data.schema import ENDED_BY_CODES

    act = TanhGaussianPolicy.act
    calls = {"n": 0}

    def nan_in_env_1(self, obs, deterministic=False):
        out = act(self, obs, deterministic)
        calls["n"] += 1
        if len(out) == 3 and calls["n"] % 5 == 0:
            out = out.clone()
            out[1] = float("nan")
        return out

    monkeypatch.setattr(TanhGaussianPolicy, "act", nan_in_env_1)
    cfg = toy_config(tmp_path, "actor.num_envs=3", "train.total_env_steps=300", "train.random_steps=0", *FEW_UPDATES)
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages
    online = learner.replay.online
    assert np.all(np.isfinite(online.data["action_executed"][: online.size]))
    ended = online.data["ended_by"][: online.size]
    assert (ended == ENDED_BY_CODES["safety"]).sum() >= 300 // 3 // 5 - 5
    for steps in _episodes(online).values():
        assert steps.tolist() == list(range(len(steps)))
