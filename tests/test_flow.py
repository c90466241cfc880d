"""Flow-matching and diffusion policies: they learn a conditional action distribution, sample it deterministically
from a given noise (what DSRL steers), run backwards to the noise a chunk came from, train by `robo-rl bc
policy=flow|diffusion` and load as a frozen base only on the task they were made for."""

import copy

import numpy as np
import pytest
import torch

from policies.base import NarrowedNoise
from policies.bc import BCCheckpointError, load_bc_base
from policies.flow import ChunkGenerator, GenerativeBase, GenerativePolicy
from robo_rl.config import ConfigError, load_config, make_env, make_policy
from robo_rl.envs import make_observation_space
from robo_rl.offline.bc import train_bc
from robo_rl.policy_io import policy_step


def _toy_data(n: int, generator: torch.Generator):
    """state s ∈ [-1, 1]²; the chunk's actions are ±(0.5·s) (two modes, one per sign, equally likely)."""
    s = torch.rand(n, 2, generator=generator) * 2 - 1
    sign = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
    actions = (sign[:, None] * 0.5 * s)[:, None].expand(n, 3, 2).contiguous()
    return {"state": s, "images": {}}, actions


_FITTED: dict[tuple[str, int], tuple[ChunkGenerator, torch.Tensor]] = {}


def _fit(kind: str, steps: int = 1500) -> ChunkGenerator:
    """A fresh copy of the model `_train` makes, trained once per process; the global RNG is left where training
    leaves it, so a caller seeded before this call draws what it drew when every call trained its own."""
    if (kind, steps) not in _FITTED:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a small MLP: more threads than cores only slow it down
        try:
            _FITTED[kind, steps] = _train(kind, steps), torch.get_rng_state()
        finally:
            torch.set_num_threads(threads)
    model, rng_after_training = _FITTED[kind, steps]
    torch.set_rng_state(rng_after_training)
    return copy.deepcopy(model)


def _train(kind: str, steps: int) -> ChunkGenerator:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = ChunkGenerator(2, 2, chunk_size=3, kind=kind, steps=8, hidden=[128, 128])
    optim = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(steps):
        obs, actions = _toy_data(256, g)
        loss = model.loss(obs, actions, torch.ones(256, 3))
        optim.zero_grad()
        loss.backward()
        optim.step()
    return model.eval()


@pytest.fixture(scope="module", params=["flow", "diffusion"])
def fitted(request):
    return _fit(request.param)


def test_it_learns_both_modes_of_a_conditional_distribution(fitted):
    g = torch.Generator().manual_seed(1)
    obs, _ = _toy_data(400, g)
    with torch.no_grad():
        chunk = fitted.sample(fitted.features(obs), torch.randn(400, 3, 2, generator=g))
    target = 0.5 * obs["state"]
    error = torch.minimum((chunk[:, 0] - target).norm(dim=-1), (chunk[:, 0] + target).norm(dim=-1))
    assert error.median() < 0.15, float(error.median())  # on one of the two modes, not between them
    far = target.norm(dim=-1) > 0.2
    plus = ((chunk[:, 0] - target).norm(dim=-1) < (chunk[:, 0] + target).norm(dim=-1))[far].float().mean()
    assert 0.25 < plus < 0.75, float(plus)  # both modes, in about their proportions
    untrained = ChunkGenerator(2, 2, chunk_size=3, kind=fitted.kind, hidden=[128, 128])
    with torch.no_grad():
        bad = untrained.sample(untrained.features(obs), torch.randn(400, 3, 2, generator=g))[:, 0]
    assert torch.minimum((bad - target).norm(dim=-1), (bad + target).norm(dim=-1)).median() > 2 * error.median()


def test_sampling_is_a_deterministic_map_of_the_noise_and_inverts(fitted):
    g = torch.Generator().manual_seed(2)
    obs, _ = _toy_data(64, g)
    noise = torch.randn(64, 3, 2, generator=g)
    with torch.no_grad():
        features = fitted.features(obs)
        a, b = fitted.sample(features, noise), fitted.sample(features, noise)
        other = fitted.sample(features, torch.randn(64, 3, 2, generator=g))
        recovered = fitted.sample(features, fitted.invert(features, a))
    assert torch.equal(a, b) and a.shape == (64, 3, 2) and a.abs().max() <= 1.0
    assert (a - other).abs().mean() > 0.05  # the noise steers the chunk
    assert (recovered - a).abs().mean() < 0.05, float((recovered - a).abs().mean())  # invert: back to the same chunk


def test_the_actors_inference_path_computes_what_training_computes(fitted):
    g = torch.Generator().manual_seed(3)
    obs, _ = _toy_data(8, g)
    noise = torch.randn(8, 3, 2, generator=g)
    with torch.no_grad():
        fast = fitted.sample(fitted.features(obs), noise)
    with torch.enable_grad():
        slow = fitted.sample(fitted.features(obs), noise)
    assert torch.allclose(fast, slow, atol=1e-5)


def test_the_actors_numpy_sampler_computes_what_torch_computes(fitted):
    """GenerativeBase.predict_chunk runs numpy's sampler on the CPU (policies/cpu_sampler.py): the same chunks as
    the torch sampler for the same noise, normalised states included, and weights changed in place are seen."""
    model = ChunkGenerator(**fitted.config)
    model.load_state_dict(fitted.state_dict())
    model.set_normalisation(np.random.default_rng(0).normal(0.3, 2.0, size=(200, 2)))
    base = GenerativeBase(model)
    assert base.fast is not None
    rng = np.random.default_rng(4)

    def worst_difference() -> float:
        worst = 0.0
        for _ in range(40):
            obs = {"state": rng.uniform(-8, 8, 2).astype(np.float32), "images": {}}  # some beyond the clip
            z = rng.standard_normal((3, 2)).astype(np.float32)
            chunk = base.predict_chunk(obs, noise=z)
            with torch.inference_mode():
                reference = base.chunks(base.obs_tensors(obs), torch.as_tensor(z)[None])[0].numpy()
            assert chunk.dtype == np.float32 and chunk.shape == (3, 2)
            worst = max(worst, float(np.abs(chunk - reference).max()))
        return worst

    assert worst_difference() < 1e-4
    before = base.predict_chunk({"state": np.ones(2, np.float32), "images": {}}, noise=np.zeros((3, 2)))
    with torch.no_grad():
        weight = model.net[0].weight  # changed in place after the base was built
        weight.add_(0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    after = base.predict_chunk({"state": np.ones(2, np.float32), "images": {}}, noise=np.zeros((3, 2)))
    assert np.abs(after - before).max() > 1e-3 and worst_difference() < 1e-4
    model.steps = 3  # a changed step count rebuilds it too
    assert worst_difference() < 1e-4 and base.fast.steps == 3


def test_a_policy_with_cameras_keeps_the_torch_sampler():
    space = make_observation_space(2, {"wrist": (32, 32)})
    model = ChunkGenerator(
        2, 2, chunk_size=3, hidden=[16], cameras={"wrist": [32, 32]}, encoder={"features": 8, "channels": 4}
    )
    base = GenerativeBase(model)
    assert base.fast is None
    obs = space.sample()
    assert base.predict_chunk(obs).shape == (3, 2)


def test_bad_settings_and_bad_noise_are_refused_in_one_line():
    with pytest.raises(ValueError, match="steps must be an integer in"):
        ChunkGenerator(2, 2, steps=0)
    with pytest.raises(ValueError, match="diffusion policy's steps"):
        ChunkGenerator(2, 2, kind="diffusion", steps=500, diffusion_timesteps=100)
    with pytest.raises(ValueError, match="flow or diffusion"):
        ChunkGenerator(2, 2, kind="gan")
    base = GenerativeBase(ChunkGenerator(2, 2, chunk_size=3, hidden=[16]))
    obs = {"state": np.zeros(2, np.float32), "images": {}}
    assert base.predict_chunk(obs).shape == (3, 2)
    with pytest.raises(ValueError, match=r"shape \(2, 2\), the policy takes \(3, 2\)"):
        base.predict_chunk(obs, noise=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="not finite"):
        base.predict_chunk(obs, noise=np.full((3, 2), np.nan))


@pytest.fixture(scope="module", params=["flow", "diffusion"])
def bc_run(request, tmp_path_factory):
    """`robo-rl bc policy=<kind>` on point_reach, briefly, from 50 demonstrations (from the default 20 this small
    flow policy succeeds about 0.4 on 50 episodes, too close to the bar below; from 50, 1.00 and 0.96)."""
    tmp = tmp_path_factory.mktemp(request.param)
    cfg = load_config(
        [
            "env=point_reach",
            "experiment=rlpd",
            f"policy={request.param}",
            f"cache_dir={tmp / 'cache'}",
            "logger.progress=false",
            "bc.eval_episodes=20",
            "bc.epochs=500",  # enough here: test_bc.py tests the floors
            "bc.patience=500",
            "bc.flow_updates=0",
            "bc.diffusion_updates=0",
            "policy.chunk_size=2",
            "policy.steps=4",
            "policy.hidden=[64,64]",
            "demos.num_episodes=50",
        ]
    )
    summary = train_bc(cfg, tmp / "run", progress=False)
    return cfg, summary


def test_robo_rl_bc_trains_a_generative_policy_that_loads_as_a_noise_taking_base(bc_run):
    cfg, summary = bc_run
    assert summary["eval"]["success_rate"] >= 0.5, summary["eval"]  # point_reach: untrained policies stay near 0
    env = make_env(cfg)
    base = load_bc_base(summary["checkpoint"], env.observation_space, 2)
    assert isinstance(base, GenerativeBase) and base.noise_shape == (2, 2) and base.chunk_size == 2
    obs, _ = env.reset(seed=0)
    z = np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32)
    assert np.array_equal(base.predict_chunk(obs, noise=z), base.predict_chunk(obs, noise=z))
    acting = make_policy(
        load_config(
            ["env=point_reach", "experiment=rlpd", f"policy={cfg.policy.kind}", f"policy.path={summary['checkpoint']}"]
        ),
        env,
    )
    assert isinstance(acting, GenerativePolicy) and acting.model.kind == cfg.policy.kind
    env.close()


def test_a_generative_checkpoint_for_another_task_is_refused_naming_the_mismatch(bc_run):
    _, summary = bc_run
    with pytest.raises(BCCheckpointError, match="action dimension is 2, the task's is 3"):
        load_bc_base(summary["checkpoint"], make_observation_space(4, {}), 3)
    with pytest.raises(BCCheckpointError, match="state has 4 dimensions, the task's has 6"):
        load_bc_base(summary["checkpoint"], make_observation_space(6, {}), 2)


def test_an_out_of_range_step_count_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="policy.steps=0 is not allowed"):
        load_config(["env=point_reach", "experiment=rlpd", "policy=flow", "policy.steps=0"])
    cfg = load_config(
        [
            "env=point_reach",
            "experiment=rlpd",
            "policy=diffusion",
            "policy.steps=200",
            f"cache_dir={tmp_path}",
            "logger.progress=false",
        ]
    )
    with pytest.raises(ConfigError, match=r"diffusion policy's steps must be an integer in \[1, 100\]"):
        train_bc(cfg, tmp_path / "run", progress=False)


def test_sac_on_a_flow_policy_is_refused_with_the_ways_to_fine_tune_it(bc_run):
    from robo_rl.config import make_algorithm

    _, summary = bc_run
    cfg = load_config(["env=point_reach", "experiment=rlpd", "policy=flow", f"policy.path={summary['checkpoint']}"])
    env = make_env(cfg)
    try:
        with pytest.raises(ConfigError, match="policy=dsrl.*algo=ppo"):
            make_algorithm(cfg, make_policy(cfg, env), env)
    finally:
        env.close()


class EchoNoise:
    """A base whose chunk is the initial noise it is given."""

    action_dim, chunk_size, noise_shape = 2, 3, (3, 2)

    def reset(self) -> None:
        pass

    def predict_chunk(self, obs: dict, noise=None) -> np.ndarray:
        return noise


def test_narrowed_noise_draws_at_its_std_from_its_generator_and_at_zero_gives_the_mode():
    scaled = NarrowedNoise(EchoNoise(), 0.5, np.random.default_rng(7))
    first, second = scaled.predict_chunk({}), scaled.predict_chunk({})
    expected = 0.5 * np.random.default_rng(7).standard_normal((2, 3, 2))
    np.testing.assert_allclose(np.stack([first, second]), expected, rtol=1e-6)
    assert first.dtype == np.float32 and not np.allclose(first, second)
    np.testing.assert_array_equal(NarrowedNoise(EchoNoise(), 0.5, np.random.default_rng(7)).predict_chunk({}), first)
    assert not NarrowedNoise(EchoNoise(), 0.0).predict_chunk({}).any()
    given = np.ones((3, 2), np.float32)  # a caller's own noise (DSRL's) goes through as it is
    np.testing.assert_array_equal(NarrowedNoise(EchoNoise(), 0.0).predict_chunk({}, noise=given), given)
    torch.manual_seed(3)  # without a generator: torch's, as the base's own sampler draws
    drawn = NarrowedNoise(EchoNoise(), 2.0).predict_chunk({})
    torch.manual_seed(3)
    np.testing.assert_allclose(drawn, 2.0 * torch.randn(3, 2).numpy())
    with pytest.raises(ValueError, match=r"noise_scale must be in \[0, 4\]"):
        NarrowedNoise(EchoNoise(), -0.1)
    no_noise = EchoNoise()
    no_noise.noise_shape = None
    with pytest.raises(ValueError, match="needs a base whose sampler takes its initial noise"):
        NarrowedNoise(no_noise, 0.0)


def test_a_residual_acts_on_its_generative_base_sampled_from_narrowed_noise_and_at_0_from_its_mode(bc_run):
    cfg, summary = bc_run
    path = summary["checkpoint"]
    env = make_env(cfg)
    obs, _ = env.reset(seed=0)
    base = load_bc_base(path, env.observation_space, 2)

    def residual(*overrides: str):
        settings = ["env=point_reach", "experiment=rlpd", "policy=residual", f"policy.base.path={path}", *overrides]
        return make_policy(load_config(settings), env)

    def base_actions(policy, episodes: int = 4) -> np.ndarray:
        """The base's first action in each of `episodes` episodes from the same observation (the residual is zero)."""
        out = []
        for _ in range(episodes):
            policy.reset()
            out.append(policy_step(policy, obs, deterministic=True)[1]["base_action"])
        return np.stack(out)

    mode = base.predict_chunk(obs, noise=np.zeros((2, 2), np.float32))[0]
    at_mode = base_actions(residual("policy.base.noise_scale=0"))
    np.testing.assert_allclose(at_mode, np.repeat(mode[None], 4, 0), atol=1e-6)
    sampled = base_actions(residual())  # its own N(0, I): a different action every episode
    assert np.ptp(sampled, axis=0).max() > 1e-3

    narrow = residual("policy.base.noise_scale=0.5")
    torch.manual_seed(11)
    got = base_actions(narrow)
    torch.manual_seed(11)
    draws = [0.5 * torch.randn(2, 2).numpy() for _ in range(4)]
    np.testing.assert_allclose(got, [base.predict_chunk(obs, noise=z)[0] for z in draws], atol=1e-6)

    with pytest.raises(ConfigError, match="noise_scale"):
        residual("policy.base.noise_scale=5")
    dsrl = ["env=point_reach", "experiment=rlpd", "policy=dsrl", f"policy.base.path={path}"]
    with pytest.raises(ValueError, match="DSRL's noise actor chooses the noise"):
        make_policy(load_config([*dsrl, "policy.base.noise_scale=0"]), env)
    env.close()
