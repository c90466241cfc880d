"""ReinFlow and DPPO-style PPO over a flow/diffusion policy's denoising chain: exact chain log-probabilities, a
learner that waits for the current weights' rollout and drops (and counts) older data, and both methods move the
policy towards higher return."""

import copy
import io
import json
import os

import numpy as np
import pytest
import torch

from policies.chain import ChainPolicy, gaussian_log_prob
from policies.flow import ChunkGenerator
from robo_rl.algos.ppo import build_ppo
from robo_rl.data.rollout import Rollout
from robo_rl.envs import make_observation_space
from robo_rl.offline.bc import save_atomic

SPACE = make_observation_space(2, {})
# the toy learners' device: `ROBO_RL_TEST_DEVICE=cuda pytest tests/test_ppo.py` runs them on a GPU
DEVICE = os.environ.get("ROBO_RL_TEST_DEVICE", "cpu")


def chain_policy(method: str, **kw) -> ChainPolicy:
    from tests.test_flow import _fit

    model = _fit("flow" if method == "reinflow" else "diffusion", steps=300)
    steps = {
        "reinflow": {"steps": 4},
        "dppo": {"steps": 10, "stochastic_steps": 4, "sigma_min": 0.1, "sigma_max": 0.1},
    }[method]
    return ChainPolicy(SPACE, 2, method=method, generator=model, **{**steps, **kw})


def bandit_batch(obs: dict, reward: torch.Tensor, chain: torch.Tensor, log_prob: torch.Tensor, steps: int) -> dict:
    """Decisions of one chunk each (`steps` env steps), every one ending its episode, as the learner hands them over."""
    n, device = len(reward), reward.device
    return {
        "obs": obs,
        "next_obs": obs,
        "reward": reward,
        "discount": torch.zeros(n, device=device),
        "steps": torch.full((n,), steps, device=device),
        "continues": torch.zeros(n, dtype=torch.bool, device=device),
        "extras": {"chain": chain.flatten(1), "log_prob": log_prob[:, None]},
    }


@pytest.mark.parametrize("method", ["reinflow", "dppo"])
def test_the_chain_log_probability_is_exact_and_recomputed_from_the_record(method):
    policy = chain_policy(method)
    obs = {"state": torch.rand(16, 2) * 2 - 1, "images": {}}
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
        again, _ = policy.chain_log_prob(obs, chain)
    assert chain.shape == (16, *policy.chain_shape) and torch.allclose(again, log_prob, atol=1e-3)
    if method == "reinflow":  # by hand: mean_k mean_i clamp(log N(x_{k+1}; x_k + v/K, σ_k²)) with σ in [σ_min, σ_max]
        features = policy.features(obs)
        total = torch.zeros(16)
        for k in range(policy.steps):
            mean, std = policy.step_mean_std(features, chain[:, k], k)
            assert std.min() >= policy.sigma_min and std.max() <= policy.sigma_max
            total += gaussian_log_prob(chain[:, k + 1], mean, std).clamp(-5, 2).flatten(1).mean(-1) / policy.steps
        assert torch.allclose(total, log_prob, atol=1e-4)
    with torch.no_grad():
        det, _ = policy.sample_chain(obs, deterministic=True)
        det2, _ = policy.sample_chain(obs, deterministic=True)
    assert not torch.equal(det, det2)  # the initial noise still varies; the steps add none
    policy.reset()
    _, extras = policy.act_with_extras({"state": torch.zeros(1, 2), "images": {}})
    assert extras["chain"].shape == (1, int(np.prod(policy.chain_shape))) and float(extras["decision"]) == 1


def test_the_first_reinflow_step_can_explore_wider_than_the_rest():
    policy = chain_policy("reinflow", sigma_max_first=0.5)
    obs = {"state": torch.rand(64, 2) * 2 - 1, "images": {}}
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
        features = policy.features(obs)
        stds = [policy.step_mean_std(features, chain[:, k], k)[1] for k in range(policy.steps)]
        again, _ = policy.chain_log_prob(obs, chain)
    assert 0.2 < stds[0].mean() < 0.35 and stds[0].max() <= 0.5  # σ_min + (0.5 − σ_min)·sigmoid(≈0)
    assert all(0.05 <= s.min() and s.max() <= 0.12 for s in stds[1:])
    assert torch.allclose(again, log_prob, atol=1e-3)
    first_spread = (chain[:, 1] - policy.step_mean_std(features, chain[:, 0], 0)[0]).std()
    assert first_spread > 2 * (chain[:, 2] - policy.step_mean_std(features, chain[:, 1], 1)[0]).std()
    for bad in (0.01, 1.5):
        with pytest.raises(ValueError, match="sigma_max_first"):
            chain_policy("reinflow", sigma_max_first=bad)


def test_a_learned_initial_noise_starts_at_the_prior_is_scored_exactly_and_refuses_bad_settings():
    """policy.initial_noise=learned: x_0 ~ N(μ(s), σ(s)²), at first N(0, I) to within 1%, one more Gaussian term of
    log π, recomputed from the recorded chain, its head trained at algo.lr_initial_noise; DPPO, a σ floor out of
    (0, 1] and a learning rate of 0 are refused by name."""
    policy = chain_policy("reinflow", initial_noise="learned", initial_sigma_min=0.3)
    obs = {"state": torch.rand(16, 2) * 2 - 1, "images": {}}
    with torch.no_grad():
        features = policy.features(obs)
        mean0, std0 = policy.initial_mean_std(features)
        chain, log_prob = policy.sample_chain(obs)
        again, _ = policy.chain_log_prob(obs, chain)
        total = gaussian_log_prob(chain[:, 0], mean0, std0).clamp(-5, 2).flatten(1).mean(-1) / (policy.steps + 1)
        for k in range(policy.steps):
            mean, std = policy.step_mean_std(features, chain[:, k], k)
            total += gaussian_log_prob(chain[:, k + 1], mean, std).clamp(-5, 2).flatten(1).mean(-1) / (policy.steps + 1)
    assert float(mean0.abs().max()) == 0.0 and 0.99 < float(std0.min()) <= float(std0.max()) < 1.0
    assert torch.allclose(again, log_prob, atol=1e-4) and torch.allclose(total, log_prob, atol=1e-4)
    with torch.no_grad():
        combined, _, initial, steps = policy.chain_log_prob(obs, chain, split=True)
    assert torch.equal(combined, again)
    assert torch.allclose((initial + policy.steps * steps) / (policy.steps + 1), log_prob, atol=1e-4)
    with pytest.raises(ValueError, match="needs policy.initial_noise=learned"):
        build_ppo(chain_policy("reinflow"), SPACE, 2, rollout_env_steps=64, clip_initial_noise=0.05)
    algo = build_ppo(policy, SPACE, 2, rollout_env_steps=64, lr_policy=1e-4, lr_initial_noise=1e-3)
    head = {id(p) for p in policy.initial_net.parameters()}
    groups = [(g["lr"], {id(p) for p in g["params"]}) for g in algo.policy_optim.param_groups]
    assert groups[0][0] == 1e-4 and not groups[0][1] & head and groups[1] == (1e-3, head)
    with pytest.raises(ValueError, match=r"algo.lr_initial_noise=0.0 is not allowed: must be a number in \(0, 1\]"):
        build_ppo(policy, SPACE, 2, rollout_env_steps=64, lr_initial_noise=0.0)
    with pytest.raises(ValueError, match="initial_noise=learned is for policy.method=reinflow"):
        chain_policy("dppo", initial_noise="learned")
    for bad in ({"initial_sigma_min": 0.0}, {"initial_sigma_min": 1.5}, {"initial_noise": "uniform"}):
        with pytest.raises(ValueError, match="policy.initial_"):
            chain_policy("reinflow", **bad)


def test_a_learned_initial_noise_can_narrow_from_the_prior():
    """The learned x_0's σ starts at the prior's 1 and must respond to its head there: 30 Adam steps at 1e-3 (PPO's
    scale) that raise the likelihood of x_0 = 0 take σ from 0.99 to below 0.7 (the sigmoid it replaced, saturated at
    1, was still at 0.989 after them; on Lift PPO narrowed it by 1-2% in 50k env steps)."""
    torch.manual_seed(0)
    policy = chain_policy("reinflow", initial_noise="learned", initial_sigma_min=0.3)
    obs = {"state": torch.rand(32, 2) * 2 - 1, "images": {}}
    features = tuple(f.detach() if f is not None else None for f in policy.features(obs))
    optim = torch.optim.Adam(policy.initial_net.parameters(), lr=1e-3)
    with torch.no_grad():
        start = float(policy.initial_mean_std(features)[1].mean())
    for _ in range(30):
        mean0, std0 = policy.initial_mean_std(features)
        loss = -gaussian_log_prob(torch.zeros_like(mean0), mean0, std0).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
    with torch.no_grad():
        mean0, std0 = policy.initial_mean_std(features)
    assert 0.99 < start < 1.0
    assert float(std0.max()) < 0.7 and float(std0.min()) >= 0.3, (start, float(std0.min()), float(std0.max()))
    assert float(mean0.abs().max()) < 0.1


@pytest.mark.parametrize("clips", [{"clip": 0.2}, {"clip": 0.01, "clip_initial_noise": 0.1}])
def test_ppo_with_a_learned_initial_noise_picks_the_noise_that_lands_in_the_rewarded_mode(clips):
    """The policy's two modes are set by x_0 (the flow of tests/test_flow.py's data); the steps' noise is small
    (σ 0.02). Only the "+" mode is rewarded: PPO must move x_0's mean so that most chains land there, where the
    prior's x_0 lands in it about half the time; with one ratio for the chain, and with x_0's own ratio and clip
    (algo.clip_initial_noise) beside the steps' ReinFlow clip."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = chain_policy("reinflow", initial_noise="learned", sigma_min=0.02, sigma_max=0.02).to(DEVICE)
    algo = build_ppo(
        policy,
        SPACE,
        2,
        rollout_env_steps=512,
        batch_size=128,
        epochs=4,
        lr_policy=1e-3,
        lr_value=3e-3,
        value_hidden=[64],
        **clips,
    )
    gen = torch.Generator().manual_seed(0)

    def rollout(n=512):
        s = (torch.rand(n, 2, generator=gen) * 2 - 1).to(DEVICE)
        obs = {"state": s, "images": {}}
        with torch.no_grad():
            chain, log_prob = policy.sample_chain(obs)
        chunks = chain[:, -1].clamp(-1, 1)
        plus = ((chunks - 0.5 * s[:, None]) ** 2).sum((-1, -2)) < ((chunks + 0.5 * s[:, None]) ** 2).sum((-1, -2))
        return bandit_batch(obs, plus.float(), chain, log_prob, steps=3), float(plus.float().mean())

    before = float(np.mean([rollout()[1] for _ in range(4)]))
    for _ in range(5):  # the share gained passes 0.25 by the 3rd update and is 0.44-0.47 at the 5th (5 seeds)
        metrics = algo.update([rollout()[0]])
    after = float(np.mean([rollout()[1] for _ in range(4)]))
    with torch.no_grad():
        mean0, _ = policy.initial_mean_std(
            policy.features({"state": torch.rand(64, 2, device=DEVICE) * 2 - 1, "images": {}})
        )
    assert 0.3 < before < 0.7 and after > before + 0.25, (before, after)
    assert float(mean0.abs().mean()) > 0.1  # it is x_0 that moved
    if "clip_initial_noise" in clips:
        assert np.isfinite(metrics["approx_kl_initial"])  # its clip fraction: the constructed batch below


@pytest.mark.parametrize("split", [False, True])
def test_the_clip_fraction_is_the_share_of_decisions_whose_ratio_left_the_clip_band(split):
    """Stored log-probabilities set by hand against what the weights give now: 16 of 64 decisions 0.5 nats lower
    (ratio e^0.5), 8 higher (e^-0.5), the rest equal. One epoch of one minibatch measures before any step: 24 of 64
    leave the band of 0.2. x_0's own ratio (algo.clip_initial_noise) is scored from the acting weights: 1, none out.
    The record is altered on purpose, so the check of recorded log-probabilities is off (tests/test_guards.py)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = chain_policy("reinflow", **({"initial_noise": "learned"} if split else {})).to(DEVICE)
    kw = {"clip_initial_noise": 0.1, "log_prob_tolerance": None} if split else {"log_prob_tolerance": None}
    algo = build_ppo(policy, SPACE, 2, rollout_env_steps=64, batch_size=64, epochs=1, value_hidden=[8], clip=0.2, **kw)
    obs = {"state": (torch.rand(64, 2) * 2 - 1).to(DEVICE), "images": {}}
    with torch.no_grad():
        chain, _ = policy.sample_chain(obs)
        now, _ = policy.chain_log_prob(obs, chain)
    shift = torch.tensor([0.5] * 16 + [-0.5] * 8 + [0.0] * 40, device=DEVICE)
    metrics = algo.update([bandit_batch(obs, torch.rand(64, device=DEVICE), chain, now - shift, steps=3)])
    assert metrics["clip_frac"] == 24 / 64, metrics
    assert metrics["approx_kl"] == pytest.approx(((shift.exp() - 1) - shift).mean().item(), abs=1e-4)
    if split:
        assert metrics["clip_frac_initial"] == 0.0 and metrics["approx_kl_initial"] == pytest.approx(0.0, abs=1e-6)


def test_dppo_scores_and_fine_tunes_only_its_last_steps():
    policy = chain_policy("dppo")
    assert policy.chain_shape[0] == policy.stochastic_steps + 1 == 5
    frozen = policy.frozen[0]
    assert not any(p.requires_grad for p in frozen.parameters())
    assert not any(k.startswith("frozen") for k in policy.state_dict())  # never sent: rebuilt by every process


@pytest.mark.parametrize("method", ["reinflow", "dppo"])
def test_ppo_moves_the_policy_towards_higher_return(method):
    """A one-decision task: reward −|a − a*|² over the chunk, a* one of the two modes the policy learned (the
    other is penalised): PPO must shift the chunks towards a*."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = chain_policy(method).to(DEVICE)
    algo = build_ppo(
        policy,
        SPACE,
        2,
        rollout_env_steps=512,
        batch_size=128,
        epochs=4,
        lr_policy=1e-3,
        lr_value=3e-3,
        clip=0.2,
        value_hidden=[64],
    )
    gen = torch.Generator().manual_seed(0)

    def reward(chunks, s):
        return -((chunks - 0.5 * s[:, None]) ** 2).sum((-1, -2))  # the "+" mode of tests/test_flow.py's data

    def rollout(n=512):
        s = (torch.rand(n, 2, generator=gen) * 2 - 1).to(DEVICE)
        obs = {"state": s, "images": {}}
        with torch.no_grad():
            chain, log_prob = policy.sample_chain(obs)
        r = reward(chain[:, -1].clamp(-1, 1), s)
        return bandit_batch(obs, r, chain, log_prob, steps=3), r.mean()

    before = float(np.mean([float(rollout()[1]) for _ in range(4)]))
    metrics = {}
    for _ in range(3):  # the gain is 0.49-0.59·|before| (reinflow), 0.68-0.74 (dppo) at the 3rd update (5 seeds)
        metrics = algo.update([rollout()[0]])
    after = float(np.mean([float(rollout()[1]) for _ in range(4)]))
    assert after > before + 0.3 * abs(before), (before, after, metrics)
    assert np.isfinite(metrics["approx_kl"]) and metrics["decisions"] == 512


def test_value_warmup_iterations_train_the_value_and_leave_the_policy_alone():
    """algo.value_warmup_iterations: the first iterations fit V(s) only (the policy's weights bit for bit unchanged,
    the value loss falling); the iteration after them moves the policy; a negative count is refused by name."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = chain_policy("reinflow")
    algo = build_ppo(
        policy,
        SPACE,
        2,
        rollout_env_steps=256,
        batch_size=128,
        epochs=2,
        lr_policy=1e-3,
        lr_value=3e-3,
        clip=0.2,
        value_hidden=[64],
        value_warmup_iterations=2,
    )
    s = torch.rand(256, 2) * 2 - 1
    obs = {"state": s, "images": {}}
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
    batch = bandit_batch(obs, s[:, 0] + 1.0, chain, log_prob, steps=4)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    warm = [algo.update([batch]) for _ in range(2)]
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert [m["value_warmup"] for m in warm] == [1.0, 1.0] and warm[1]["value_loss"] < warm[0]["value_loss"]
    after = algo.update([batch])
    assert after["value_warmup"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())
    with pytest.raises(
        ValueError, match=r"algo.value_warmup_iterations=-1 is not allowed: must be an integer in \[0, inf\)"
    ):
        build_ppo(policy, SPACE, 2, rollout_env_steps=256, value_warmup_iterations=-1)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_a_time_limit_cut_bootstraps_from_the_value_unless_the_episode_is_the_task(bootstrap):
    """Episodes cut by the time limit with no reward: with algo.bootstrap_truncated (the default) their return is
    γ^n·V(s_T), so an optimistic V feeds itself and stays where it is (what made ReinFlow on Lift collapse after 60k
    env steps: its returns rose above the 0/1 reward's range while success fell); with false they are failures (0)
    and V learns so."""
    torch.manual_seed(0)
    policy = chain_policy("reinflow")
    algo = build_ppo(
        policy,
        SPACE,
        2,
        rollout_env_steps=256,
        batch_size=128,
        epochs=4,
        lr_value=3e-3,
        value_hidden=[64],
        value_warmup_iterations=100,
        gamma=0.999,
        bootstrap_truncated=bootstrap,
    )
    with torch.no_grad():
        algo.value[-1].bias.fill_(2.0)  # an optimistic value, as a run's can become
    roll = Rollout(gamma=0.999, env_steps=1)
    n = 5
    roll.add(
        "a",
        {
            "episode_id": np.zeros(n, int),
            "step": np.arange(n),
            "state": np.zeros((n, 2), np.float32),
            "reward": np.zeros(n, np.float32),
            "terminated": np.zeros(n, bool),
            "truncated": np.array([False] * (n - 1) + [True]),
            "policy_version": np.ones(n, int),
            "extra/decision": np.ones((n, 1), np.float32),
            "extra/log_prob": np.zeros((n, 1), np.float32),
            "extra/chain": np.zeros((n, 2), np.float32),
        },
    )
    taken = roll.take(("log_prob",))
    assert taken["truncated"].tolist() == [False, False, False, True] and taken["discount"][-1] > 0.99
    s = torch.rand(256, 2) * 2 - 1
    obs = {"state": s, "images": {}}
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
    batch = {
        **bandit_batch(obs, torch.zeros(256), chain, log_prob, steps=4),  # cut by the time limit, not ended:
        "discount": torch.full((256,), 0.999**4),
        "truncated": torch.ones(256, dtype=torch.bool),
    }
    for _ in range(15):  # without bootstrapping V is below 0.02 by the 15th update; with it, above 1.7 (5 seeds)
        algo.update([batch])
    with torch.no_grad():
        v = float(algo.values(obs).mean())
    assert (v > 1.5) if bootstrap else (v < 0.2), v


def test_the_rollout_keeps_the_current_versions_decisions_and_counts_the_rest():
    roll = Rollout(gamma=0.9, env_steps=4)

    def message(episode, versions, decisions, rewards, steps, end=False):
        n = len(steps)
        return {
            "episode_id": np.full(n, episode),
            "step": np.array(steps),
            "state": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
            "reward": np.array(rewards, np.float32),
            "terminated": np.array([False] * (n - 1) + [end]),
            "truncated": np.zeros(n, bool),
            "policy_version": np.array(versions),
            "extra/decision": np.array(decisions, np.float32)[:, None],
            "extra/log_prob": np.zeros((n, 1), np.float32),
            "extra/chain": np.zeros((n, 2), np.float32),
        }

    roll.version = 2
    # steps 1-2: a chunk of version 1 (stale), 3-4: version 2, 5: version 2 (running, the episode not over)
    roll.add("a", message(7, [1, 1, 1, 2, 2, 2], [0, 1, 0, 1, 0, 1], [0, 1, 1, 1, 2, 0], [0, 1, 2, 3, 4, 5]))
    assert roll.stale_steps == 2 and roll.stale_decisions == 1 and roll.env_steps == 2
    roll.add("a", message(7, [2], [0], [5], [6], end=True))  # the running chunk ends with the episode
    assert roll.env_steps == 4
    batch = roll.take(("log_prob",))
    np.testing.assert_allclose(batch["reward"], [1 + 0.9 * 2, 0 + 0.9 * 5])
    np.testing.assert_allclose(batch["discount"], [0.81, 0.0])  # the episode terminated in the second chunk
    assert batch["continues"].tolist() == [True, False] and batch["steps"].tolist() == [2, 2]
    np.testing.assert_array_equal(batch["obs"]["state"][1], batch["next_obs"]["state"][0])


def test_an_actor_and_a_learner_run_on_policy_iterations(tmp_path):
    """The learner waits for each rollout of the current weights, updates once on it, publishes, and the actor
    acts the next one with the new weights; data from older weights is dropped and counted."""
    from tests.test_pipeline import run_pair, toy_config

    model = ChunkGenerator(4, 2, chunk_size=3, steps=4, hidden=[32])
    path = save_atomic(model.checkpoint(execute_steps=3), tmp_path / "bc4" / "policy.pt")
    cfg = toy_config(
        tmp_path,
        "policy=reinflow",
        "algo=ppo",
        f"policy.path={path}",
        "algo.rollout_env_steps=120",
        "train.total_env_steps=500",
        "train.random_steps=0",
        "train.learning_starts=0",
        "algo.value_hidden=[32]",
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and learner.updates >= 3 and learner.version == learner.updates + 1
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    iters = {x["ppo_iteration"]: x for x in lines if "ppo_iteration" in x}
    assert all(x["rollout_env_steps"] >= 120 for x in iters.values())
    # the learner's guards ran on every iteration's metrics, the recorded log-probabilities matched, none tripped
    assert all(x["guard_ppo_skipped"] == 0 and x["log_prob_recorded_diff"] < 1e-3 for x in iters.values())
    assert not [x for x in lines if x.get("kind") == "guard"]
    assert learner.schedule.rollout.stale_steps < learner.env_steps / 3, (
        "actors wait for new weights instead of running on"
    )
    versions = learner.replay.online.data["policy_version"][: learner.replay.online.size]
    assert len(set(versions.tolist())) >= 3  # every record is kept in the replay, whatever its version


def critic_ppo(policy: ChainPolicy, **kw):
    return build_ppo(
        policy,
        SPACE,
        2,
        rollout_env_steps=256,
        batch_size=128,
        epochs=4,
        lr_policy=1e-3,
        lr_value=3e-3,
        clip=0.2,
        value_hidden=[32],
        advantage="critic",
        critic_hidden=[64, 64],
        critic_batch_size=128,
        lr_critic=1e-3,
        **kw,
    )


def test_ppo_with_critic_advantages_moves_the_policy_towards_higher_return():
    """algo.advantage=critic: the same one-decision task as above, each reward observed with noise as large as
    the reward's spread (σ 0.5), so one rollout's returns rank its chunks poorly; Q(s, a) − E_π Q(s, ·) from a critic
    fitted by TD on every rollout so far ranks them by the mean, and PPO shifts the chunks towards a*."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = chain_policy("reinflow")
    algo = critic_ppo(policy, critic_updates=40, critic_samples=4)
    gen = torch.Generator().manual_seed(0)

    def rollout(n=256):
        s = torch.rand(n, 2, generator=gen) * 2 - 1
        obs = {"state": s, "images": {}}
        with torch.no_grad():
            chain, log_prob = policy.sample_chain(obs)
        r = -((chain[:, -1].clamp(-1, 1) - 0.5 * s[:, None]) ** 2).sum((-1, -2))
        noisy = r + 0.5 * torch.randn(n, generator=gen)
        return bandit_batch(obs, noisy, chain, log_prob, steps=3), float(r.mean())

    before = float(np.mean([rollout()[1] for _ in range(4)]))
    iterations = 6  # the gain is 0.40-0.54·|before| at the 6th update, 0.64-0.72 at the 9th (5 seeds), 0.86 at the 15th
    for _ in range(iterations):
        metrics = algo.update([rollout()[0]])
    after = float(np.mean([rollout()[1] for _ in range(4)]))
    assert after > before + 0.3 * abs(before), (before, after, metrics)
    assert metrics["critic_decisions"] == iterations * 256 and np.isfinite(metrics["critic_loss"])


def test_the_chain_critic_learns_by_td_clips_its_targets_and_resumes_exactly():
    """Two-decision episodes: the first decision's chunk pays nothing and leads to the second's state, whose
    decision ends the episode with reward 1: by TD, Q(first) → γ^n·1 and Q(second) → 1 (targets clipped to [0, 1]);
    the critic's decisions and weights are part of the algorithm's state, so a restored copy updates identically."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = chain_policy("reinflow")
    # a faster target (τ 0.03, 30 TD steps an iteration): Q(first) is within 0.02 of γ^n after 4 iterations (5 seeds)
    algo = critic_ppo(
        policy, critic_updates=30, critic_tau=0.03, critic_target_clip=[0, 1], value_warmup_iterations=100
    )
    n = 128
    first, second = torch.full((n, 2), -0.5), torch.full((n, 2), 0.5)
    obs = {"state": torch.cat([first, second]), "images": {}}
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
    batch = {
        **bandit_batch(obs, torch.cat([torch.zeros(n), torch.ones(n)]), chain, log_prob, steps=3),
        "next_obs": {"state": torch.cat([second, second]), "images": {}},
        "discount": torch.cat([torch.full((n,), 0.9), torch.zeros(n)]),
    }
    for _ in range(4):
        algo.update([batch])
    with torch.no_grad():
        features = algo.critic.features(obs)
        q = algo.critic.values(
            algo.critic.q, algo.critic.pooled(features), algo.critic.sampled_actions(obs, features)
        ).mean(0)
    assert abs(float(q[:n].mean()) - 0.9) < 0.1 and abs(float(q[n:].mean()) - 1.0) < 0.1, q
    state = algo.state_dict()
    assert len(state["critic"]["data"]["reward"]) == 4 * 2 * n
    twin = critic_ppo(
        copy.deepcopy(policy),
        critic_updates=30,
        critic_tau=0.03,
        critic_target_clip=[0, 1],
        value_warmup_iterations=100,
    )
    saved = io.BytesIO()  # through a checkpoint's bytes, as a resume reads it
    torch.save(state, saved)
    twin.load_state_dict(torch.load(io.BytesIO(saved.getvalue()), weights_only=True))
    results = []
    for a in (algo, twin):
        torch.manual_seed(1)
        a.update([batch])
        results.append(a.critic.q.state_dict())
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])
    with pytest.raises(ValueError, match="saved with algo.advantage=gae"):
        twin.load_state_dict({k: v for k, v in state.items() if k != "critic"})
    for bad, match in (
        ({"advantage": "td"}, r"algo.advantage=td is not allowed: must be gae \| critic"),
        ({"critic_updates": 0}, "algo.critic_updates"),
        ({"critic_target_clip": [1, 0]}, "algo.critic_target_clip must be"),
    ):
        with pytest.raises(ValueError, match=match):
            build_ppo(policy, SPACE, 2, rollout_env_steps=64, **{"advantage": "critic", **bad})
