"""DSRL: a noise actor steers a frozen flow/diffusion policy one chunk at a time; the record says which step opened
a chunk and with what noise; both forms (noise-space SAC, noise aliasing) learn noises of higher return; demos
are labelled with the noise their actions came from; actors receive only the noise actor."""

import copy

import numpy as np
import pytest
import torch

from policies.bc import BCBase, BCPolicy
from policies.dsrl import NoisePolicy
from policies.flow import ChunkGenerator, GenerativeBase
from robo_rl.algos.dsrl import build_dsrl
from robo_rl.config import ConfigError, load_config
from robo_rl.data.replay import ReplayBuffer
from robo_rl.data.schema import step_fields
from robo_rl.envs import make_observation_space
from robo_rl.learner import Learner
from robo_rl.offline.bc import save_atomic
from robo_rl.policy_io import obs_to_torch, policy_step
from tests.test_pipeline import toy_config

SPACE = make_observation_space(2, {})


def flow_base(chunk=3, action_dim=2, kind="flow", seed=0):
    torch.manual_seed(seed)
    return GenerativeBase(ChunkGenerator(2, action_dim, chunk_size=chunk, kind=kind, steps=4, hidden=[32, 32]))


def noise_policy(base=None, **kw):
    base = base or flow_base()
    return NoisePolicy(SPACE, base.action_dim, base, hidden=[32, 32], **kw)


def test_one_noise_per_chunk_held_over_it_and_a_new_chunk_each_episode():
    policy = noise_policy(execute_steps=3)
    obs = {"state": np.array([0.1, -0.2], np.float32), "images": {}}
    steps = [policy_step(policy, obs, deterministic=False) for _ in range(7)]
    assert [float(e["decision"][0]) for _, e in steps] == [1, 0, 0, 1, 0, 0, 1]
    assert np.array_equal(steps[0][1]["noise"], steps[2][1]["noise"]) and steps[0][1]["noise"].shape == (6,)
    assert not np.array_equal(steps[0][1]["noise"], steps[3][1]["noise"])
    w = steps[0][1]["noise"].reshape(3, 2)  # the actions are the base's chunk from that noise, in order
    np.testing.assert_allclose(np.stack([a for a, _ in steps[:3]]), policy.base.predict_chunk(obs, noise=w), atol=1e-6)
    spare = copy.deepcopy(policy)  # new weights arriving mid-chunk do not cut it short
    assert float(policy_step(spare, obs, False)[1]["decision"][0]) == 0
    policy.reset()
    assert float(policy_step(spare, obs, False)[1]["decision"][0]) == 1  # a new episode: a new chunk
    assert np.abs(steps[0][1]["noise"]).max() <= 1.5


def test_async_chunks_keep_each_decision_with_its_own_observation_and_noise():
    """actor.chunking=async with a delay of 2: a chunk is asked for 2 steps before the current one's 4 executed
    actions end, from that step's observation, with a noise drawn then; that step is the record's decision (its
    noise the new one), and the chunk's actions from index 2 on run at the next 4 steps."""
    policy = noise_policy(base=flow_base(chunk=6), execute_steps=4)
    policy.use_chunking("async", delay_steps=2)
    obs = [{"state": np.array([t / 10, -0.2], np.float32), "images": {}} for t in range(20)]
    steps = [policy_step(policy, o, deterministic=False) for o in obs]
    decisions = [t for t, (_, e) in enumerate(steps) if e["decision"][0] == 1]
    assert decisions == [0, 2, 6, 10, 14, 18]
    for t in decisions[1:-1]:
        noise = steps[t][1]["noise"].reshape(6, 2)
        planned = policy.base.predict_chunk(obs[t], noise=noise)
        executed = np.stack([a for a, _ in steps[t + 2 : t + 6]])
        np.testing.assert_allclose(executed, planned[2:6], atol=1e-5)
        assert np.array_equal(steps[t + 2][1]["noise"], steps[t][1]["noise"])  # the running chunk's, after
        assert not np.array_equal(steps[t + 1][1]["noise"], steps[t][1]["noise"])  # the previous one's, before
        chunk = np.stack([e["chunk"] for _, e in steps[t + 2 : t + 6]])  # extra/chunk: [id, steps since its obs]
        assert len(set(chunk[:, 0])) == 1 and chunk[:, 1].tolist() == [2, 3, 4, 5]
    assert policy.chunk_stats()["chunk_skipped"] == 2 * 4


def test_the_warm_up_is_the_bases_own_behaviour_within_the_box():
    policy = noise_policy(noise_bound=1.0)
    obs = obs_to_torch({"state": np.zeros(2, np.float32), "images": {}})
    noises = []
    for _ in range(200):
        policy.reset()
        noises.append(policy.explore_step(obs)[1]["noise"][0].numpy())
    noises = np.stack(noises)
    assert np.abs(noises).max() <= 1.0 and 0.6 < noises.std() < 0.95  # N(0, I) clipped to ±1


def test_bases_without_noise_and_bad_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match="takes none: train one with `robo-rl bc policy=flow`"):
        NoisePolicy(SPACE, 2, BCBase(BCPolicy(2, 2, chunk_size=3, hidden=[8])))
    with pytest.raises(ValueError, match="noise_bound must be in"):
        noise_policy(noise_bound=0.0)
    with pytest.raises(ValueError, match=r"execute_steps=5 must be in \[1, 3\]"):
        noise_policy(execute_steps=5)
    with pytest.raises(ValueError, match="needs policy=dsrl"):
        build_dsrl(torch.nn.Linear(2, 2), SPACE, 2, batch_size=8)
    with pytest.raises(ValueError, match=r"algo.form=both is not allowed: must be aliased \| noise"):
        build_dsrl(noise_policy(), SPACE, 2, batch_size=8, form="both")
    with pytest.raises(ValueError, match="intervention_bc_weight: DSRL's actor chooses noise"):
        build_dsrl(noise_policy(), SPACE, 2, batch_size=8, intervention_bc_weight=1.0)
    with pytest.raises(ConfigError, match="policy.noise_bound=9"):
        load_config(["experiment=dsrl_pick_cube", "policy.noise_bound=9"])


def test_state_normalisation_by_the_flow_bases_statistics_reaches_every_critic():
    base = flow_base()
    base.model.state_mean.copy_(torch.tensor([1.0, -2.0]))
    base.model.state_std.copy_(torch.tensor([0.5, 4.0]))
    policy = noise_policy(base, state_norm="base")
    obs = {"state": torch.tensor([[2.0, 2.0]]), "images": {}}
    np.testing.assert_allclose(policy.encoder(obs).numpy(), [[2.0, 1.0]])
    algo = build_dsrl(policy, SPACE, 2, batch_size=8, form="aliased", precision="float32")
    for critic in (algo.noise_critic, algo.action_critic, algo.target_critic):
        np.testing.assert_allclose(critic.encoder(obs).numpy(), [[2.0, 1.0]])
    assert noise_policy(base).encoder(obs).numpy().tolist() == [[2.0, 2.0]], "none (the default): raw"


def test_the_replay_samples_only_the_steps_that_opened_a_chunk():
    fields = step_fields(2, 2, {}, {"noise": ((6,), np.float32), "decision": ((1,), np.float32)})
    buf = ReplayBuffer(64, fields)
    n = 13
    rec = {k: np.zeros((n, *shape), dtype) for k, (shape, dtype) in fields.items()}
    rec["step"] = np.arange(n, dtype=np.int32)
    rec["extra/decision"][:, 0] = (rec["step"] >= 1) & ((rec["step"] - 1) % 3 == 0)
    rec["truncated"][-1] = True
    buf.add(rec, source="a")
    rows = buf.sample_rows(200, np.random.default_rng(0), where="decision")
    assert set(buf.data["step"][rows]) == {1, 4, 7, 10}
    batch = buf.gather(rows[:5], 0.9, n_step=3, chunk=3, extras=("noise",))
    assert batch["action"].shape == (5, 3, 2) and batch["extras"]["noise"].shape == (5, 6)
    with pytest.raises(ValueError, match="no extra 'base_action' to sample by"):
        buf.sample_rows(4, np.random.default_rng(0), where="base_action")


@pytest.mark.parametrize("form", ["aliased", "noise"])
def test_dsrl_learns_noises_whose_chunks_earn_more(form):
    """A one-decision task: reward −|a − a*|² over the executed chunk. The base (an untrained flow) spreads its
    chunks around; the noise actor must find the noises whose chunks land near a*."""
    base = flow_base(chunk=2, seed=3)
    policy = noise_policy(base, execute_steps=2, noise_bound=1.5)
    algo = build_dsrl(
        policy,
        SPACE,
        2,
        batch_size=128,
        critic_updates_per_actor=2,
        form=form,
        lr_actor=3e-3,
        lr_critic=3e-3,
        critic_hidden=[64, 64],
        precision="float32",
        alias_samples=2,
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        probe = base.model.sample(
            base.model.features({"state": torch.zeros(512, 2), "images": {}}), torch.randn(512, 2, 2, generator=gen)
        )
    target = probe.mean(0) + 2 * probe.std(0)  # reachable, but far from the base's typical chunk

    def reward(chunks):
        return -((chunks - target) ** 2).sum((-1, -2))

    def batch():
        s = torch.rand(128, 2, generator=gen) * 2 - 1
        w = (torch.rand(128, 4, generator=gen) * 2 - 1) * 1.5
        obs = {"state": s, "images": {}}
        with torch.no_grad():
            chunks = base.model.sample(base.model.features(obs), w.view(128, 2, 2))
        return {
            "obs": obs,
            "next_obs": obs,
            "action": chunks,
            "reward": reward(chunks),
            "discount": torch.zeros(128),
            "extras": {"noise": w},
            "next_extras": {"noise": w},
            "intervention": torch.zeros(128, dtype=torch.bool),
            "next_extras_valid": torch.ones(128, dtype=torch.bool),
        }

    s = torch.rand(256, 2, generator=gen) * 2 - 1
    obs = {"state": s, "images": {}}
    features = base.model.features(obs)
    with torch.no_grad():
        before = reward(base.model.sample(features, torch.randn(256, 2, 2, generator=gen))).mean()
    for _ in range(80):  # both forms are within 0.05·|before| of a* by the 80th update (5 seeds) and stay there
        algo.update([batch(), batch()])
    with torch.no_grad():
        w = policy.mean_noise(policy.encoder(obs)).view(256, 2, 2)
        after = reward(base.model.sample(features, w)).mean()
    assert after > 0.5 * before and after > before + 0.5 * abs(before), (float(before), float(after))
    assert set(algo.actor_weights()) == set(policy.state_dict()) and all(
        k.startswith("actor.") for k in algo.actor_weights()
    )


@pytest.mark.parametrize("kind", ["flow", "diffusion"])
def test_demonstrations_become_decisions_labelled_with_the_noise_of_their_actions(kind):
    from tests.test_flow import _fit

    base = GenerativeBase(_fit(kind, steps=300))  # briefly trained: its chunks are mostly inside [-1, 1]
    policy = noise_policy(base, execute_steps=3)
    algo = build_dsrl(policy, SPACE, 2, batch_size=8, precision="float32")
    rng = np.random.default_rng(0)
    n = 10  # one episode: reset record, then 9 steps; chunks open at steps 1, 4, 7
    state = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    actions = np.zeros((n, 2), np.float32)
    for i in (1, 4, 7):
        w = rng.standard_normal((3, 2)).astype(np.float32).clip(-1.5, 1.5)
        actions[i : i + 3] = base.predict_chunk({"state": state[i - 1], "images": {}}, noise=w)
    assert np.abs(actions).max() < 0.99  # clipping is where no inverse exists
    batch = {
        "step": np.arange(n),
        "state": state,
        "action_executed": actions,
        "terminated": np.zeros(n, bool),
        "truncated": np.eye(n, dtype=bool)[-1],
    }
    out = algo.relabel_prior(batch)
    assert out["extra/decision"][:, 0].tolist() == [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
    for i in (1, 4, 7):  # the labelled noise reproduces the demonstrated chunk
        again = base.predict_chunk({"state": state[i - 1], "images": {}}, noise=out["extra/noise"][i].reshape(3, 2))
        error = np.abs(again - actions[i : i + 3])
        assert error.mean() < 0.04 and error.max() < 0.15, (i, again, actions[i : i + 3])


def _flow_checkpoint(tmp_path):
    model = ChunkGenerator(4, 2, chunk_size=2, steps=2, hidden=[16])
    return save_atomic(model.checkpoint(execute_steps=2), tmp_path / "bc" / "policy.pt")


@pytest.mark.parametrize("form,chunking", [("aliased", "sync"), ("noise", "sync"), ("noise", "rtc")])
def test_an_actor_and_a_learner_run_dsrl_end_to_end_and_resume(tmp_path, form, chunking):
    from robo_rl.config import save_config
    from tests.test_pipeline import run_pair
    from tests.test_resume import toy_config_ports

    path = _flow_checkpoint(tmp_path)
    over = [
        "policy=dsrl",
        "algo=dsrl",
        f"algo.form={form}",
        f"policy.base.path={path}",
        "algo.batch_size=16",
        "train.random_steps=40",
        "train.learning_starts=40",
        "algo.critic_hidden=[32,32]",
        "policy.hidden=[32]",
        f"actor.chunking={chunking}",
        "actor.inference_delay_steps=1",  # rtc: a chunk of 2 asked for at its first step, taking over at the next
    ]
    cfg = toy_config(tmp_path, *over, "train.total_env_steps=120")  # 80 updates: plumbing and resume, not learning
    (tmp_path / "run").mkdir()
    save_config(cfg, tmp_path / "run" / "config.yaml")
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages and learner.updates > 0
    online = learner.replay.online
    rows = np.arange(online.size)[online.data["step"][: online.size] > 0]
    decision = online.data["extra/decision"][rows, 0]
    if chunking == "sync":
        assert 0.4 < decision.mean() < 0.6, "one chunk of 2 per decision"
    else:  # a chunk of 2 asked for at each step, taking over one step later: one action of each runs
        assert decision.mean() > 0.9
    noise = online.data["extra/noise"][rows]
    assert np.abs(noise).max() <= 1.5 and np.abs(noise).sum() > 0
    assert learner.replay.demos.data["extra/decision"][: learner.replay.demos.size].sum() > 0, "demos relabelled"
    resumed = Learner(
        load_config([f"resume={tmp_path / 'run'}", *toy_config_ports(tmp_path)]), tmp_path / "run", progress=False
    )
    try:
        for key, value in learner.algo.state_dict()["noise_critic"].items():
            assert torch.equal(resumed.algo.state_dict()["noise_critic"][key], value)
        assert resumed.env_steps == learner.env_steps
    finally:
        resumed.close()


def test_the_dsrl_experiment_composes_with_a_flow_base_to_train():
    cfg = load_config(["experiment=dsrl_pick_cube"])
    assert cfg.algo.name == "dsrl" and cfg.policy.base.model.kind == "flow" and cfg.policy.base.path is None
