"""PA-RL: a stochastic base proposes N chunks, the chunk critic's best runs and is what the record says ran; the critic
learns by TD which chunks earn more; the picks are distilled back into the base; the learner resumes exactly;
deterministic bases and bad settings are refused in one line."""

import numpy as np
import pytest
import torch
from torch import nn

from policies.bc import BCBase, BCPolicy
from policies.flow import ChunkGenerator, GenerativeBase
from policies.parl import RankedChunkPolicy
from robo_rl.algos.parl import build_parl
from robo_rl.config import ConfigError, load_config, save_config
from robo_rl.envs import make_observation_space
from robo_rl.learner import Learner
from robo_rl.offline.bc import save_atomic
from robo_rl.policy_io import obs_to_torch, policy_step

SPACE = make_observation_space(2, {})
TARGET = torch.tensor([0.5, -0.3])  # the action the planted critic and the toy task reward


def flow_base(chunk=3, action_dim=2, seed=0):
    torch.manual_seed(seed)
    return GenerativeBase(ChunkGenerator(2, action_dim, chunk_size=chunk, steps=4, hidden=[32, 32]))


def ranked(base=None, **kw):
    kw = {"samples": 8, "critic_hidden": [32, 32], **kw}
    return RankedChunkPolicy(SPACE, 2, base or flow_base(), **kw)


class PlantedCritic(nn.Module):
    """Q(s, c) = −Σ |c_k − TARGET|²: its best of any set of chunks is known."""

    def encoder(self, obs):
        return obs["state"]

    def from_features(self, features, chunk):
        q = -(chunk.view(len(chunk), -1, 2) - TARGET).pow(2).sum((1, 2))
        return torch.stack([q, q])


def spy(policy):
    """Record every candidate set the policy's sampler gives."""
    seen, sample = [], policy.sampler.candidates

    def candidates(obs, n, generator=None):
        out = sample(obs, n, generator)
        seen.append(out.clone())
        return out

    policy.sampler.candidates = candidates
    return seen


def test_the_critics_best_of_n_is_executed_and_recorded():
    policy = ranked(execute_steps=2)
    policy.critic = PlantedCritic()
    seen = spy(policy)
    obs = {"state": np.array([0.1, -0.2], np.float32), "images": {}}
    steps = [policy_step(policy, obs, deterministic=False) for _ in range(6)]
    assert [float(e["decision"][0]) for _, e in steps] == [1, 0, 1, 0, 1, 0]
    assert len(seen) == 3 and seen[0].shape == (1, 8, 3, 2)
    for d in range(3):
        cands = seen[d][0]  # [8, 3, 2]
        q = -(cands[:, :2] - TARGET).pow(2).sum((1, 2))
        best = cands[q.argmax()].numpy()
        assert q.argmax() != q.argmin(), "the candidates differ"
        executed = np.stack([a for a, _ in steps[2 * d : 2 * d + 2]])
        np.testing.assert_allclose(executed, best[:2], atol=1e-6)  # the best one ran ...
        for _, extras in steps[2 * d : 2 * d + 2]:  # ... and both its records carry it, whole
            np.testing.assert_allclose(extras["chosen"].reshape(3, 2), best, atol=1e-6)
    policy.reset()
    assert float(policy_step(policy, obs, False)[1]["decision"][0]) == 1  # a new episode: a new chunk


def test_gradient_steps_on_the_actions_raise_the_critics_value_and_evaluation_is_deterministic():
    policy = ranked(action_grad_steps=20, action_grad_lr=0.05)
    policy.critic = PlantedCritic()
    obs = obs_to_torch({"state": np.array([0.3, 0.3], np.float32), "images": {}})
    cands = policy.sampler.candidates(obs, 8, torch.Generator().manual_seed(1))
    raw_best = (-(cands[0, :, :3] - TARGET).pow(2).sum((1, 2))).max()
    chunk, q, _ = policy.rank(obs, cands)
    assert q[0] > raw_best + 1e-3 and chunk.abs().max() <= 1.0
    first = policy.choose(obs, deterministic=True)
    assert torch.equal(first, policy.choose(obs, deterministic=True))
    assert not torch.equal(policy.choose(obs, deterministic=False), policy.choose(obs, deterministic=False))


def test_the_noise_scale_samples_nearer_the_bases_mode_and_zero_gives_the_mode_alone():
    obs = obs_to_torch({"state": np.array([0.3, -0.1], np.float32), "images": {}})
    model = ranked().sampler.model
    features = model.features(obs)
    mode = model.sample(features, torch.zeros(1, *model.noise_shape))
    at_zero = ranked(noise_scale=0.0).sampler.candidates(obs, 4)[0]
    torch.testing.assert_close(at_zero, mode.expand(4, -1, -1))
    half = ranked(noise_scale=0.5).sampler.candidates(obs, 4, torch.Generator().manual_seed(3))[0]
    noise = 0.5 * torch.randn(4, *model.noise_shape, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(half, model.sample(features.expand(4, -1), noise))
    with pytest.raises(ValueError, match=r"policy.noise_scale must be in \[0, 4\]"):
        ranked(noise_scale=-1)


def one_decision_batch(policy, rng, n=128):
    """A one-decision task (every chunk ends its episode): reward −Σ|a_k − TARGET|² over the executed actions, from
    the base's own random chunks."""
    state = torch.as_tensor(rng.uniform(-1, 1, (n, 2)), dtype=torch.float32)
    obs = {"state": state, "images": {}}
    with torch.no_grad():
        chunks = policy.sampler.candidates(obs, 1)[:, 0]
    executed = chunks[:, : policy.execute_steps]
    reward = -(executed - TARGET).pow(2).sum((1, 2))
    return {
        "obs": obs,
        "next_obs": obs,
        "action": executed,
        "reward": reward,
        "discount": torch.zeros(n),
        "intervention": torch.zeros(n, dtype=torch.bool),
        "extras": {"chosen": chunks.flatten(1)},
    }


def test_the_critic_learns_by_td_which_chunks_earn_more_and_its_picks_beat_the_base():
    torch.manual_seed(0)
    base = flow_base(chunk=2)
    with torch.no_grad():  # a base that spreads its chunks widely: there is something to choose
        base.model.net[-1].bias.zero_()
    policy = ranked(base, samples=16, critics=2)
    algo = build_parl(policy, SPACE, 2, batch_size=128, distill_every=0, lr_critic=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(300):
        metrics = algo.update([one_decision_batch(policy, rng)])
    assert np.isfinite(metrics["critic_loss"])
    obs = {"state": torch.as_tensor(rng.uniform(-1, 1, (64, 2)), dtype=torch.float32), "images": {}}
    reward = lambda c: -(c[:, :2] - TARGET).pow(2).sum((1, 2))  # noqa: E731
    with torch.no_grad():
        base_return = reward(policy.sampler.candidates(obs, 1)[:, 0]).mean()
        picked_return = reward(policy.choose(obs, deterministic=False)).mean()
    assert picked_return > base_return + 0.1, f"picked {picked_return:.3f}, base {base_return:.3f}"


def test_distillation_moves_the_base_towards_the_picked_chunks():
    policy = ranked(flow_base(chunk=2))
    algo = build_parl(policy, SPACE, 2, batch_size=64, distill_every=1, lr_base=3e-3, lr_critic=1e-6)
    rng = np.random.default_rng(0)
    picked = TARGET.repeat(2)  # the actors always picked this chunk
    obs = {"state": torch.zeros(64, 2), "images": {}}

    def distance():
        with torch.no_grad():
            return (policy.sampler.candidates(obs, 4)[:, :, :] - TARGET).abs().mean().item()

    before, losses = distance(), []
    for _ in range(150):
        batch = one_decision_batch(policy, rng, 64)
        batch["extras"]["chosen"] = picked.expand(64, -1).clone()
        batch["obs"] = batch["next_obs"] = obs
        losses.append(algo.update([batch])["distill_loss"])
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    assert distance() < 0.5 * before, f"the base's chunks did not come closer: {before:.3f} -> {distance():.3f}"
    # a human's decision is not distilled: its recorded pick never ran
    batch["intervention"] = torch.ones(64, dtype=torch.bool)
    assert algo.distill(batch)["distill_rows"] == 0


def test_each_decision_records_its_raw_samples_and_the_recorded_target_ranks_them_without_running_the_base():
    policy = ranked(execute_steps=2, action_grad_steps=3, action_grad_lr=0.05, record_candidates=3)
    learnt, policy.critic = policy.critic, PlantedCritic()
    seen = spy(policy)
    obs = {"state": np.array([0.1, -0.2], np.float32), "images": {}}
    steps = [policy_step(policy, obs, deterministic=False) for _ in range(4)]
    for d in range(2):  # the first 3 raw samples' executed parts (before the gradient steps), on both of its steps
        raw = seen[d][0, :3, :2].reshape(-1).numpy()
        for _, extras in steps[2 * d : 2 * d + 2]:
            np.testing.assert_allclose(extras["candidates"], raw, atol=1e-6)
    assert policy.explore_step(obs_to_torch(obs))[1]["candidates"].shape == (1, 12) and seen[-1].shape[1] == 3

    policy.critic = learnt
    algo = build_parl(policy, SPACE, 2, target_from="recorded", distill_every=0, batch_size=4)
    assert algo.batch_spec.extras == ("chosen", "candidates") and algo.batch_spec.settled
    recorded = torch.randn(4, 3, 4)
    state = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (4, 2)), dtype=torch.float32)
    batch = {
        "obs": {"state": state, "images": {}},
        "next_obs": {"state": state + 1, "images": {}},
        "action": torch.zeros(4, 2, 2),
        "reward": torch.zeros(4),
        "discount": torch.tensor([0.5, 0.5, 0.5, 0.0]),  # row 2: a time-limit end; row 3: a terminal one
        "intervention": torch.zeros(4, dtype=torch.bool),
        "extras": {"chosen": torch.zeros(4, 6), "candidates": torch.zeros(4, 12)},
        "next_extras": {"chosen": torch.zeros(4, 6), "candidates": recorded.flatten(1)},
        "next_extras_valid": torch.tensor([True, True, False, False]),
    }
    calls = len(seen)
    first = algo.next_candidates(batch)
    assert len(seen) == calls + 1, "the base ran once: for the time-limit row, not the recorded or terminal ones"
    torch.testing.assert_close(first[:2], recorded[:2])
    again = algo.next_candidates(batch)
    assert len(seen) == calls + 1 and torch.equal(again, first), "a time-limit end's samples are kept"
    assert torch.equal(again[2], seen[-1][0, :, :2].flatten(1)) and len(algo.predicted_candidates) == 1
    with torch.no_grad():  # the target critic's best-minus-worst over each row's recorded chunks, batch mean
        features = algo.target_critic.encoder(batch["next_obs"]).repeat_interleave(3, dim=0)
        q = algo.target_critic.from_features(features, recorded.reshape(12, 4)).mean(0).view(4, 3)
    metrics = algo.update_critic({**batch, "next_extras_valid": torch.ones(4, dtype=torch.bool)})
    assert len(seen) == calls + 1 and np.isfinite(metrics["critic_loss"])
    assert metrics["target_q_spread"] == pytest.approx((q.max(1).values - q.min(1).values).mean().item(), rel=1e-5)
    restored = build_parl(
        ranked(execute_steps=2, record_candidates=3), SPACE, 2, target_from="recorded", distill_every=0
    )
    restored.load_state_dict(algo.state_dict())
    assert restored.predicted_candidates.keys() == algo.predicted_candidates.keys()
    with pytest.raises(ValueError, match="set policy.record_candidates"):
        build_parl(ranked(), SPACE, 2, target_from="recorded")
    with pytest.raises(ValueError, match=r"policy.record_candidates must be in \[0, policy.samples=8\]"):
        ranked(record_candidates=9)


def test_deterministic_bases_and_bad_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match="gives one chunk per observation: use a flow or diffusion base"):
        RankedChunkPolicy(SPACE, 2, BCBase(BCPolicy(2, 2, chunk_size=3, hidden=[8])))
    with pytest.raises(ValueError, match=r"execute_steps=5 must be in \[1, 3\]"):
        ranked(execute_steps=5)
    with pytest.raises(ValueError, match=r"policy.samples must be in \[1, 4096\]"):
        ranked(samples=0)
    with pytest.raises(ValueError, match="algo=parl needs policy=parl"):
        build_parl(nn.Linear(2, 2), SPACE, 2)
    with pytest.raises(ValueError, match="critic_subsample=3 is more than the policy's 2 critics"):
        build_parl(ranked(), SPACE, 2, critic_subsample=3)
    with pytest.raises(ValueError, match=r"algo.distill_target=best is not allowed: must be recorded \| reranked"):
        build_parl(ranked(), SPACE, 2, distill_target="best")
    with pytest.raises(ConfigError, match="policy.samples=0"):
        load_config(["experiment=parl_pick_cube", "policy.samples=0"])
    with pytest.raises(ConfigError, match="algo.distill_every=-1"):
        load_config(["experiment=parl_pick_cube", "algo.distill_every=-1"])


def _flow_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = ChunkGenerator(4, 2, chunk_size=2, steps=2, hidden=[16])
    return save_atomic(model.checkpoint(execute_steps=2), tmp_path / "bc" / "policy.pt")


def parl_messages(policy, n_episodes, per_message=7):
    """Actor-like step batches of the PA-RL policy acting in the toy env (its extras included), split into messages."""
    from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
    from sim.point_reach import PointReachEnv

    env = PointReachEnv(max_episode_steps=12)
    torch.manual_seed(1)
    rec, records = EpisodeRecorder(2, policy.extras_spec), []
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=ep)
        policy.reset()
        records.append(rec.reset(obs, ep))
        done = False
        while not done:
            action, extras = policy_step(policy, obs, deterministic=False)
            obs, r, term, trunc, info = env.step(action)
            records.append(rec.record_step(obs, r, term, trunc, info, extras=extras))
            done = term or trunc
    batch = stack_records(records, fields_for_env(env, policy))
    n = len(batch["step"])
    return [{k: v[i : i + per_message] for k, v in batch.items()} for i in range(0, n, per_message)]


@pytest.mark.parametrize("target_from", ["sampled", "recorded"])
def test_a_resumed_parl_learner_fed_the_same_data_ends_with_the_same_parameters_bit_for_bit(tmp_path, target_from):
    from tests.test_pipeline import toy_config
    from tests.test_resume import feed, toy_config_ports

    path = _flow_checkpoint(tmp_path)
    record = 3 if target_from == "recorded" else 0
    overrides = [
        "policy=parl",
        "algo=parl",
        f"policy.base.path={path}",
        "policy.samples=4",
        f"policy.record_candidates={record}",
        "policy.critic_hidden=[32,32]",
        "algo.batch_size=16",
        "algo.target_samples=4",
        f"algo.target_from={target_from}",
        "algo.distill_every=2",
        "train.learning_starts=50",
        "replay.flush_every_s=0.05",
    ]
    space = make_observation_space(4, {})
    acting = RankedChunkPolicy(space, 2, {"kind": "bc", "path": str(path)}, samples=4, record_candidates=record)
    msgs = parl_messages(acting, 16)
    half = len(msgs) // 2

    def learner_in(name):
        cfg = toy_config(tmp_path, *overrides)
        (tmp_path / name).mkdir(exist_ok=True)
        save_config(cfg, tmp_path / name / "config.yaml")
        return Learner(cfg, tmp_path / name, progress=False)

    straight = learner_in("straight")
    feed(straight, msgs[:half], 1)
    data, n = straight.replay.online.data, straight.replay.online.size
    decisions = np.flatnonzero(data["extra/decision"][:n, 0] == 1)
    assert len(decisions) > 20
    for row in decisions:  # what the learner stored: each decision's recorded pick is what the next 2 steps ran
        ran = [r for r in (row, row + 1) if r < n and data["episode_id"][r] == data["episode_id"][row]]
        chosen = data["extra/chosen"][row].reshape(2, 2)[: len(ran)]
        np.testing.assert_allclose(data["action_executed"][ran], chosen, atol=1e-6)
    straight.checkpoint()
    feed(straight, msgs[half:], half + 1)

    first = learner_in("interrupted")
    feed(first, msgs[:half], 1)
    assert first.updates > 0 and first.algo.rounds >= 2, "the checkpoint holds trained state, distilled too"
    first.checkpoint()
    first.close()
    del first
    resumed = Learner(
        load_config([f"resume={tmp_path / 'interrupted'}", *toy_config_ports(tmp_path)]),
        tmp_path / "interrupted",
        progress=False,
    )
    feed(resumed, msgs[half:], half + 1)
    assert straight.updates == resumed.updates > 0 and straight.algo.rounds == resumed.algo.rounds
    a, b = straight.algo.state_dict(), resumed.algo.state_dict()
    if record:  # the time-limit ends' samples: kept through the checkpoint, the same in both
        assert a["predicted_candidates"] and a["predicted_candidates"].keys() == b["predicted_candidates"].keys()
        assert all(torch.equal(v, b["predicted_candidates"][k]) for k, v in a["predicted_candidates"].items())
    for net in ("policy", "target_critic"):
        for name, tensor in a[net].items():
            assert torch.equal(tensor, b[net][name]), f"{net}.{name} differs"
    for optim in ("critic_optim", "base_optim"):
        for i, state in a[optim]["state"].items():
            assert torch.equal(state["exp_avg_sq"], b[optim]["state"][i]["exp_avg_sq"]), f"{optim} differs"
    moved = [
        k for k, v in a["policy"].items() if k.startswith("sampler.") and not torch.equal(v, acting.state_dict()[k])
    ]
    assert moved, "distillation changed the base's weights"
    straight.close()
    resumed.close()


@pytest.mark.slow
def test_robo_rl_train_with_parl_completes_and_its_run_goes_through_the_gate(tmp_path):
    """A short real `robo-rl train` (a flow base behaviour-cloned first, learner and actor processes, the final
    evaluation), then `robo-rl gate` on the run's checkpoint against its base, with the sim check."""
    import json

    from tests.test_cli import ROOT, isolated, only_run_dir, robo_rl

    over = [
        "env=point_reach",
        "policy=parl",
        "algo=parl",
        "train.total_env_steps=400",
        "train.learning_starts=100",
        "train.random_steps=100",
        "demos.num_episodes=5",
        "bc.epochs=20",
        "bc.eval_episodes=5",
        "eval.episodes=5",
        "policy.samples=8",
        "policy.critic_hidden=[64,64]",
        "algo.batch_size=64",
        "algo.distill_every=5",
    ]
    out = robo_rl("train", *isolated(tmp_path), *over, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    run = only_run_dir(tmp_path)
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    learner = [m for m in metrics if m.get("kind") == "learner"]
    assert any("distill_loss" in m for m in learner) and learner[-1]["updates"] > 0
    assert json.loads((run / "eval" / "report.json").read_text())["episodes"] == 5
    gated = robo_rl(
        "gate",
        str(run / "bc" / "policy.pt"),
        str(run),
        f"data={run}",
        "fqe_steps=200",
        "eval_episodes=5",
        cwd=ROOT,
        timeout=300,
    )
    assert gated.returncode in (0, 1), gated.stderr[-2000:]
    line = json.loads((run / "gate.jsonl").read_text().splitlines()[-1])
    assert line["decision"] == ("accept" if gated.returncode == 0 else "reject") and "agreed" in line["real"]


@pytest.mark.slow  # writing the tiny SmolVLA takes ~12 s and its ranked decisions ~2 s each on a loaded 2-core CPU
def test_a_smolvla_base_is_ranked_by_the_same_code_path_and_trains_its_critic_but_is_not_distilled(tmp_path):
    from policies.lerobot_base import LeRobotBase
    from tests.vla_tiny import write_tiny_smolvla

    space = make_observation_space(4, {"top": (24, 32)})
    folder = write_tiny_smolvla(tmp_path / "pretrained_model", 4, 2, "top", (24, 32), chunk_size=4)
    base = LeRobotBase.load(folder, space, 2, task="pick the cube")
    policy = RankedChunkPolicy(
        space, 2, base, samples=4, execute_steps=2, critic_hidden=[16], encoder={"resize": [64, 64]}
    )
    policy.critic = PlantedCritic()
    seen = spy(policy)
    rng = np.random.default_rng(0)
    obs = {
        "state": rng.standard_normal(4).astype(np.float32),
        "images": {"top": rng.integers(0, 256, (24, 32, 3), np.uint8)},
    }
    steps = [policy_step(policy, obs, deterministic=False) for _ in range(2)]
    cands = seen[0][0]
    best = cands[(-(cands[:, :2] - TARGET).pow(2).sum((1, 2))).argmax()].numpy()
    np.testing.assert_allclose(np.stack([a for a, _ in steps]), best[:2], atol=1e-6)
    assert not any(k.startswith("sampler") for k in policy.state_dict()), "the VLA's weights are neither kept nor sent"
    policy = RankedChunkPolicy(
        space, 2, base, samples=4, execute_steps=2, critic_hidden=[16], encoder={"resize": [64, 64]}
    )
    with pytest.raises(ValueError, match="is not distilled here; set algo.distill_every=0"):
        build_parl(policy, space, 2)
    algo = build_parl(policy, space, 2, distill_every=0, target_samples=2)
    batch_obs = {
        "state": torch.randn(3, 4),
        "images": {"top": torch.randint(0, 256, (3, 24, 32, 3), dtype=torch.uint8)},
    }
    batch = {
        "obs": batch_obs,
        "next_obs": batch_obs,
        "action": torch.zeros(3, 2, 2),
        "reward": torch.ones(3),
        "discount": torch.full((3,), 0.9),
        "intervention": torch.zeros(3, dtype=torch.bool),
        "extras": {},
    }
    assert np.isfinite(algo.update([batch])["critic_loss"])  # the learner samples the VLA in batches for its targets


def test_chunks_picked_off_the_loop_are_refused_in_one_line():
    with pytest.raises(ValueError, match="actor.chunking=async: policy=parl picks each chunk on the control loop"):
        ranked().use_chunking("async", delay_steps=1)
    ranked().use_chunking("sync")
