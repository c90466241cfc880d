"""Residual RL on a frozen base: it starts exactly at the base, learns a bounded correction that raises Q,
sends actors only the residual, and relabels demonstrations with the base's actions."""

import copy

import numpy as np
import pytest
import torch

from policies.bc import BCPolicy
from policies.residual import ResidualPolicy
from robo_rl.algos.base import trainable_state
from robo_rl.algos.residual import build_residual
from robo_rl.config import ConfigError, load_config
from robo_rl.envs import make_observation_space
from robo_rl.learner import Learner
from robo_rl.offline.bc import save_atomic
from robo_rl.policy_io import obs_to_torch, policy_step
from tests.test_pipeline import toy_config


class LinearBase:
    """A frozen base: action = W·state (clipped), in chunks of `chunk_size` (the same action repeated)."""

    def __init__(self, weight: np.ndarray, chunk_size: int = 1):
        self.weight, self.chunk_size, self.action_dim = weight, chunk_size, weight.shape[0]
        self.resets = self.calls = 0

    def reset(self):
        self.resets += 1

    def predict_chunk(self, obs):
        self.calls += 1
        return np.repeat(np.clip(self.weight @ obs["state"], -1, 1)[None], self.chunk_size, 0).astype(np.float32)


def residual_policy(base, scale=0.3, state_dim=3):
    return ResidualPolicy(
        make_observation_space(state_dim, {}), base.action_dim, base, scale=scale, hidden=[64, 64], exploration_std=0.0
    )


def test_training_starts_exactly_at_the_base_and_the_record_carries_its_action():
    base = LinearBase(np.array([[0.5, 0.0, 0.0], [0.0, -0.5, 0.0]], np.float32))
    policy = residual_policy(base)
    obs = {"state": np.array([0.4, 0.2, 0.9], np.float32), "images": {}}
    action, extras = policy_step(policy, obs, deterministic=False)
    np.testing.assert_allclose(action, [0.2, -0.1], atol=1e-6)
    np.testing.assert_allclose(extras["base_action"], [0.2, -0.1], atol=1e-6)
    assert set(trainable_state(policy)) == set(policy.state_dict()) and not any(
        "base" in k for k in policy.state_dict()
    )


def test_the_correction_is_normalised_by_the_bases_data_range_widened_by_one_plus_s():
    """ResFiT's normalisation: a dimension the demonstrations moved over [-0.2, 0.2] is corrected by at most
    s · 0.2 · (1 + s) and kept inside that widened range; `action_range=full` corrects by s in the task's units."""
    base = LinearBase(np.zeros((2, 3), np.float32))
    base.action_range = (np.array([-0.2, -1.0]), np.array([0.2, 1.0]))
    policy = residual_policy(base, scale=0.5)
    np.testing.assert_allclose(policy.action_half.numpy(), [0.3, 1.0 * 1.5])
    full_push = torch.full((1, 2), 0.5)  # the residual at its bound s
    np.testing.assert_allclose(policy.compose(torch.zeros(1, 2), full_push).numpy(), [[0.15, 0.75]], atol=1e-6)
    edge = torch.tensor([[0.2, 0.9]])  # the base at the top of its data range: clamped to widened range and [-1, 1]
    np.testing.assert_allclose(policy.compose(edge, full_push).numpy(), [[0.3, 1.0]], atol=1e-6)
    outside = torch.tensor([[0.5, -0.2]])  # the base beyond its data's widened range: executed as it is at zero
    np.testing.assert_allclose(policy.compose(outside, torch.zeros(1, 2)).numpy(), outside.numpy())
    np.testing.assert_allclose(policy.compose(outside, full_push).numpy(), [[0.5, 0.55]], atol=1e-6)
    np.testing.assert_allclose(policy.compose(outside, -full_push).numpy(), [[0.35, -0.95]], atol=1e-6)
    np.testing.assert_allclose(
        policy.residual_of(torch.tensor([[0.06, -0.3]]), torch.zeros(1, 2)).numpy(), [[0.2, -0.2]], atol=1e-6
    )
    assert "action_half" not in policy.state_dict(), "each process derives it from the same base"
    full = ResidualPolicy(make_observation_space(3, {}), 2, base, scale=0.5, hidden=[8], action_range="full")
    np.testing.assert_allclose(full.compose(torch.zeros(1, 2), full_push).numpy(), [[0.5, 0.5]], atol=1e-6)
    with pytest.raises(ValueError, match="action_range must be data or full"):
        ResidualPolicy(make_observation_space(3, {}), 2, base, hidden=[8], action_range="dataset")


def test_a_bc_checkpoint_keeps_the_action_range_of_its_demonstrations(tmp_path):
    from policies.bc import load_bc_base
    from robo_rl.config import make_env
    from robo_rl.offline.bc import train_bc

    cfg = toy_config(tmp_path, "bc.epochs=1", "bc.eval_episodes=0", "demos.num_episodes=3")
    summary = train_bc(cfg, tmp_path / "run", progress=False)
    env = make_env(cfg)
    base = load_bc_base(summary["checkpoint"], env.observation_space, env.action_space.shape[0])
    low, high = np.asarray(base.action_range[0]), np.asarray(base.action_range[1])
    assert low.shape == (2,) and np.all(low < high) and np.all(low >= -1) and np.all(high <= 1)
    assert np.all(high - low > 0.1), "the scripted demonstrations move both dimensions"


def test_a_chunked_base_runs_open_loop_and_starts_afresh_each_episode_in_every_copy():
    base = LinearBase(np.eye(2, 3, dtype=np.float32), chunk_size=4)
    policy = residual_policy(base)
    spare = copy.deepcopy(policy)  # the actor's double buffer
    assert spare.base is policy.base, "one chunk queue for the episode, whichever copy acts"
    obs = obs_to_torch({"state": np.ones(3, np.float32), "images": {}})
    for _ in range(6):
        policy.act(obs)
    assert base.calls == 2, "a new chunk every 4 steps"
    spare.reset()
    spare.act(obs)
    assert base.calls == 3 and base.resets == 1


def one_step_algo(policy, action_dim: int):
    """The residual algorithm of the one-step tasks: 1-step returns, small networks, fast learning rates."""
    return build_residual(
        policy,
        make_observation_space(3, {}),
        action_dim,
        batch_size=128,
        n_step=1,
        critic_updates_per_actor=2,
        lr_actor=3e-3,
        lr_critic=3e-3,
        critic_hidden=[64, 64],
        precision="float32",
    )


def one_step_batch(obs: dict, action: torch.Tensor, reward: torch.Tensor, extras: dict) -> dict:
    """A batch of one-step episodes (no bootstrap): the learner's layout, the same extras at both ends."""
    n = len(action)
    return {
        "obs": obs,
        "next_obs": obs,
        "action": action,
        "reward": reward,
        "discount": torch.zeros(n),
        "extras": extras,
        "next_extras": extras,
        "next_extras_valid": torch.ones(n, dtype=torch.bool),
        "intervention": torch.zeros(n, dtype=torch.bool),
    }


def learn_one_step_task(policy, raw=lambda s: s, updates: int = 150) -> tuple[torch.Tensor, torch.Tensor]:
    """A one-step task: reward −|a − a*(s)|², the base always says 0; the env shows the state as `raw(s)`.
    Returns the residual the policy learnt at two states and the bounded correction it should have learnt."""
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small networks: a second thread only waits on a loaded 2-core machine
    algo = one_step_algo(policy, 2)
    target = torch.tensor([[0.2, -0.1, 0.0], [0.0, 0.0, 0.9]])  # a*(s) = target · s: the second one saturates
    gen = torch.Generator().manual_seed(0)

    def batch():
        s = torch.rand(128, 3, generator=gen) * 2 - 1
        a = (torch.rand(128, 2, generator=gen) * 2 - 1) * 0.4
        r = -((a - s @ target.T) ** 2).sum(-1)
        return one_step_batch({"state": raw(s), "images": {}}, a, r, {"base_action": torch.zeros(128, 2)})

    for _ in range(updates):
        algo.update([batch(), batch()])
    s = torch.tensor([[1.0, 0.0, 0.5], [-1.0, 0.0, -1.0]])
    with torch.no_grad():
        residual = policy.residual(policy.encoder({"state": raw(s), "images": {}}), torch.zeros(2, 2))
    return residual, (s @ target.T).clamp(-policy.scale, policy.scale)


def test_the_residual_learns_a_bounded_correction_towards_higher_return():
    """The residual moves each action towards a*(s), and stays within its bound where a* lies beyond it."""
    policy = residual_policy(LinearBase(np.zeros((2, 3), np.float32)), scale=0.3)
    residual, wanted = learn_one_step_task(policy)  # 10 seeds: within 0.067 of the bounded a* at the 150th
    assert torch.allclose(residual, wanted, atol=0.08), (residual, wanted)
    assert residual.abs().max() <= 0.3 + 1e-6


class StatsBase(LinearBase):
    """A base that keeps the statistics it normalises its input state with, as our BC checkpoints do."""

    def __init__(self, weight, mean, std):
        super().__init__(weight)
        self.policy = torch.nn.Module()
        self.policy.register_buffer("state_mean", torch.as_tensor(mean, dtype=torch.float32))
        self.policy.register_buffer("state_std", torch.as_tensor(std, dtype=torch.float32))


def test_a_state_in_raw_units_is_learnt_from_once_normalised_by_the_bases_statistics():
    """The same task, shown as robosuite shows positions: metres far from zero, the part that matters moving by
    centimetres. Read raw, the residual learns next to nothing in the same updates; normalised by the base's own
    statistics (`policy.state_norm=base`), it learns the correction as on a unit-scale state."""

    def raw(s):
        return 1.0 + 0.01 * s

    base = StatsBase(np.zeros((2, 3), np.float32), mean=[1.0] * 3, std=[0.01 / 3**0.5] * 3)
    space = make_observation_space(3, {})
    normed = ResidualPolicy(space, 2, base, scale=0.3, hidden=[64, 64], exploration_std=0.0, state_norm="base")
    # 10 seeds: within 0.069 at the 200th update (it wanders 0.01-0.09 from the 100th on: 0.084 at the 300th, once)
    residual, wanted = learn_one_step_task(normed, raw, updates=200)
    assert torch.allclose(residual, wanted, atol=0.08), (residual, wanted)
    plain = ResidualPolicy(space, 2, base, scale=0.3, hidden=[64, 64], exploration_std=0.0)
    residual, wanted = learn_one_step_task(plain, raw, updates=200)
    assert (residual - wanted).abs().max() > 0.15, "raw metres should have been hard to learn from"


def test_state_normalisation_reaches_the_critic_and_copies_but_not_the_state_dict():
    base = StatsBase(np.zeros((2, 3), np.float32), mean=[1.0, 2.0, 3.0], std=[0.5, 0.25, 2.0])
    space = make_observation_space(3, {})
    policy = ResidualPolicy(space, 2, base, scale=0.3, hidden=[8], state_norm="base")
    obs = {"state": torch.tensor([[2.0, 2.5, -1.0], [1.0, 2.0, 1e6]]), "images": {}}
    np.testing.assert_allclose(policy.encoder(obs).numpy(), [[2.0, 2.0, -2.0], [0.0, 0.0, 10.0]])  # clipped at 10
    algo = build_residual(policy, space, 2, batch_size=8, precision="float32")
    for encoder in (algo.critic.encoder, algo.target_critic.encoder, copy.deepcopy(policy).encoder):
        np.testing.assert_allclose(encoder(obs).numpy(), policy.encoder(obs).numpy())
    assert not any("state_mean" in k for k in [*policy.state_dict(), *algo.critic.state_dict()]), (
        "every process derives the statistics from the same base: not sent, not saved"
    )
    with pytest.raises(ValueError, match="state_norm=base needs a base that keeps its state statistics"):
        ResidualPolicy(space, 2, LinearBase(np.zeros((2, 3), np.float32)), hidden=[8], state_norm="base")
    with pytest.raises(ValueError, match="state_norm must be none or base"):
        ResidualPolicy(space, 2, base, hidden=[8], state_norm="demos")


def test_demonstrations_get_the_base_action_of_each_decision():
    base = LinearBase(np.array([[1.0, 0.0, 0.0]], np.float32))
    policy = residual_policy(base, state_dim=3)
    algo = build_residual(policy, make_observation_space(3, {}), 1, batch_size=8, precision="float32")
    steps = np.array([0, 1, 2, 0, 1])
    batch = {
        "step": steps,
        "state": np.arange(15, dtype=np.float32).reshape(5, 3) / 20,
        "action_executed": np.zeros((5, 1), np.float32),
        "terminated": np.array([0, 0, 1, 0, 0], bool),
        "truncated": np.zeros(5, bool),
    }
    out = algo.relabel_prior(batch)["extra/base_action"][:, 0]
    # record i + 1 holds the decision at obs_i: base = state[0] of obs_i; records 0 and 3 start episodes
    np.testing.assert_allclose(out, [0.0, batch["state"][0, 0], batch["state"][1, 0], 0.0, batch["state"][3, 0]])


def bc_checkpoint(tmp_path, state_dim, action_dim):
    policy = BCPolicy(state_dim, action_dim, chunk_size=2, hidden=[16])
    return save_atomic(policy.checkpoint(), tmp_path / "bc" / "policy.pt")


def test_the_learner_runs_residual_rl_on_a_bc_base_and_resumes_it(tmp_path):
    path = bc_checkpoint(tmp_path, 4, 2)
    overrides = [
        "policy=residual",
        "algo=residual",
        f"policy.base.path={path}",
        "algo.batch_size=16",
        "train.learning_starts=10",
        "algo.critic_hidden=[32,32]",
        "policy.hidden=[32]",
    ]
    cfg = toy_config(tmp_path, *overrides)
    run = tmp_path / "run"
    run.mkdir()
    learner = Learner(cfg, run, progress=False)
    try:
        demos = learner.replay.demos.data
        assert np.abs(demos["extra/base_action"][: learner.replay.demos.size]).sum() > 0, "demos relabelled"
        learner.ingest("actor-0", {k: v[:30].copy() for k, v in demos.items()}, 1, 1)
        metrics = learner.update()
        assert np.isfinite(metrics["critic_loss"]) and learner.updates == 4
        sent = learner.algo.actor_weights()
        travels = all(k.startswith(("encoder.", "head.")) or k == "bound_fraction" for k in sent)
        assert travels, "only the residual (and the share of its bound) travels"
    finally:
        learner.close()


def test_a_base_that_does_not_fit_the_task_is_refused_in_one_line(tmp_path):
    from robo_rl.config import make_env, make_policy

    path = bc_checkpoint(tmp_path, 7, 2)  # point_reach has a 4-d state
    cfg = load_config(["env=point_reach", "policy=residual", "algo=residual", f"policy.base.path={path}"])
    with pytest.raises(ConfigError, match="does not fit this task: its state"):
        make_policy(cfg, make_env(cfg))
    cfg = load_config(["env=point_reach", "policy=residual", "algo=residual", f"policy.base.path={tmp_path / 'no'}"])
    with pytest.raises(ConfigError, match="no"):
        make_policy(cfg, make_env(cfg))


def test_train_behaviour_clones_a_base_when_none_is_given_and_records_it_for_resume(tmp_path):
    from types import SimpleNamespace

    from robo_rl.commands.train import _ensure_base, _ensure_env_spec
    from robo_rl.config import load_saved_config, save_config

    cfg = toy_config(tmp_path, "policy=residual", "algo=residual", "bc.epochs=2", "bc.eval_episodes=0")
    run = tmp_path / "run"
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    quiet = SimpleNamespace(phase=lambda *_: None, bar=SimpleNamespace(write=lambda *_: None))
    path = _ensure_base(cfg, run, quiet, _ensure_env_spec(cfg, run))
    assert path == str(run / "bc" / "policy.pt") and (run / "bc" / "policy.pt").exists()
    assert load_saved_config(run / "config.yaml").policy.base.path == path, "a resumed run finds the same base"


@pytest.mark.parametrize("experiment", ["residual_pick_cube", "residual_lift", "residual_can"])
def test_the_residual_experiments_compose(experiment):
    cfg = load_config([f"experiment={experiment}"])
    assert cfg.algo.name == "residual" and cfg.policy._target_.endswith("ResidualPolicy")


def run_residual_pair(tmp_path, *base: str):
    """A small residual run (150 env steps, 100 updates) of an actor and a learner on the base that `base`'s
    overrides name; the learner and the live records' base actions."""
    from tests.test_pipeline import run_pair

    cfg = toy_config(
        tmp_path,
        "policy=residual",
        "algo=residual",
        *base,
        "algo.batch_size=16",
        "train.total_env_steps=150",
        "train.random_steps=50",
        "train.learning_starts=50",
        "algo.critic_hidden=[32,32]",
        "policy.hidden=[32]",
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages and learner.updates > 0
    online = learner.replay.online
    live = online.data["step"][: online.size] > 0
    return learner, live, online.data["extra/base_action"][: online.size][live]


def test_an_actor_and_a_learner_run_residual_rl_end_to_end(tmp_path):
    path = bc_checkpoint(tmp_path, 4, 2)
    learner, live, base = run_residual_pair(tmp_path, f"policy.base.path={path}")
    online = learner.replay.online
    executed = online.data["action_executed"][: online.size][live]
    assert np.abs(base).sum() > 0, "every step carries the base's action"
    assert np.all(np.abs(executed - base) <= 0.2 + 1e-5), "warm-up noise ±0.2, then a residual within ±0.1"


def test_human_interventions_pull_the_residual_towards_what_the_human_did():
    """With algo.intervention_bc_weight, an intervention step's (executed − base), in normalised units and clipped
    to the bound, is what the residual is regressed on; without it, human steps teach only through the critic."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    space = make_observation_space(3, {})
    base = LinearBase(np.zeros((2, 3), np.float32))
    base.action_range = (np.array([-0.5, -1.0]), np.array([0.5, 1.0]))  # half-widths 0.5·1.2 and 1.0·1.2
    gen = torch.Generator().manual_seed(0)

    def batch():
        s = torch.rand(64, 3, generator=gen) * 2 - 1
        human = torch.arange(64) % 2 == 0
        executed = torch.rand(64, 2, generator=gen) * 2 - 1  # reward 0 for every action: a flat critic
        executed[human] = torch.tensor([0.06, 0.6])  # a human corrected the (zero) base by this much
        return {
            "obs": {"state": s, "images": {}},
            "next_obs": {"state": s, "images": {}},
            "action": executed,
            "reward": torch.zeros(64),
            "discount": torch.zeros(64),
            "extras": {"base_action": torch.zeros(64, 2)},
            "next_extras": {"base_action": torch.zeros(64, 2)},
            "next_extras_valid": torch.ones(64, dtype=bool),
            "intervention": human,
        }

    moved = {}
    for weight in (0.0, 10.0):
        policy = residual_policy(base, scale=0.2)
        algo = build_residual(
            policy,
            space,
            2,
            batch_size=64,
            n_step=1,
            critic_updates_per_actor=1,
            lr_actor=3e-3,
            critic_hidden=[32],
            intervention_bc_weight=weight,
            precision="float32",
        )
        for _ in range(150):
            algo.update([batch()])
        with torch.no_grad():
            moved[weight] = policy.residual(
                policy.encoder({"state": torch.zeros(1, 3), "images": {}}), torch.zeros(1, 2)
            )[0]
    # wanted: 0.06 / 0.6 = 0.1 on the first dimension; 0.6 / 1.2 = 0.5, clipped to the bound 0.2, on the second
    wanted = torch.tensor([0.1, 0.2])
    assert torch.allclose(moved[10.0], wanted, atol=0.03), moved[10.0]
    assert (moved[0.0] - wanted).abs().max() > 0.05, "without the weight, human steps teach only through the critic"


def test_the_pull_towards_the_base_keeps_the_residual_at_zero_where_the_critic_has_nothing_to_say():
    """algo.residual_l2: on a flat critic (reward 0 for every action) the residual stays at the base instead of
    drifting to its bound; where the critic has a clear gain it still moves, the right way."""
    torch.set_num_threads(1)
    space = make_observation_space(3, {})
    gen = torch.Generator().manual_seed(1)

    def batch(flat: bool):
        s = torch.rand(128, 3, generator=gen) * 2 - 1
        a = (torch.rand(128, 2, generator=gen) * 2 - 1) * 0.4
        r = torch.zeros(128) if flat else -((a - torch.tensor([0.2, -0.2])) ** 2).sum(-1)
        zeros, obs = torch.zeros(128, 2), {"state": s, "images": {}}
        return {
            "obs": obs,
            "next_obs": obs,
            "action": a,
            "reward": r,
            "discount": torch.zeros(128),
            "extras": {"base_action": zeros},
            "next_extras": {"base_action": zeros},
            "next_extras_valid": torch.ones(128, dtype=torch.bool),
            "intervention": torch.zeros(128, dtype=torch.bool),
        }

    def learned(flat: bool, weight: float) -> torch.Tensor:
        torch.manual_seed(0)
        policy = residual_policy(LinearBase(np.zeros((2, 3), np.float32)), scale=0.3)
        algo = build_residual(
            policy,
            space,
            2,
            batch_size=128,
            n_step=1,
            critic_updates_per_actor=2,
            lr_actor=3e-3,
            lr_critic=3e-3,
            critic_hidden=[64, 64],
            residual_l2=weight,
            precision="float32",
        )
        for _ in range(100):  # 5 seeds at the 100th: pulled <= 0.005, drift >= 0.093, the gain's move >= 0.093
            algo.update([batch(flat), batch(flat)])
        with torch.no_grad():
            s = torch.rand(256, 3, generator=gen) * 2 - 1
            return policy.residual(policy.encoder({"state": s, "images": {}}), torch.zeros(256, 2))

    assert learned(True, 0.1).abs().mean() < 0.03  # flat critic: stays at the base
    assert learned(True, 0.0).abs().mean() > 0.06  # without the pull it wanders on a flat critic's noise
    moved = learned(False, 0.1).mean(0)
    assert moved[0] > 0.05 and moved[1] < -0.05, moved  # a real gain still moves it towards a* = (0.2, -0.2)


def test_the_bound_ramp_limits_early_corrections_and_travels_with_the_weights():
    """algo.bound_ramp_updates: the residual may use only actor_updates / ramp of its bound, so a young critic's
    push towards the bound costs a small correction at first; the share reaches actors with the weights, resumes
    from a checkpoint, and a state dict written before it existed loads with the whole bound."""
    from robo_rl.algos.base import load_trainable_state

    torch.set_num_threads(1)
    space = make_observation_space(3, {})
    gen = torch.Generator().manual_seed(2)

    def batch():
        s = torch.rand(128, 3, generator=gen) * 2 - 1
        a = (torch.rand(128, 2, generator=gen) * 2 - 1) * 0.4
        r = -((a - torch.tensor([0.3, -0.3])) ** 2).sum(-1)  # the best correction lies at the bound
        zeros, obs = torch.zeros(128, 2), {"state": s, "images": {}}
        return {
            "obs": obs,
            "next_obs": obs,
            "action": a,
            "reward": r,
            "discount": torch.zeros(128),
            "extras": {"base_action": zeros},
            "next_extras": {"base_action": zeros},
            "next_extras_valid": torch.ones(128, dtype=torch.bool),
            "intervention": torch.zeros(128, dtype=torch.bool),
        }

    def residual_now(policy) -> torch.Tensor:
        with torch.no_grad():
            s = torch.rand(256, 3, generator=gen) * 2 - 1
            return policy.residual(policy.encoder({"state": s, "images": {}}), torch.zeros(256, 2))

    torch.manual_seed(0)
    policy = residual_policy(LinearBase(np.zeros((2, 3), np.float32)), scale=0.3)
    algo = build_residual(
        policy,
        space,
        2,
        batch_size=128,
        n_step=1,
        critic_updates_per_actor=2,
        lr_actor=3e-3,
        lr_critic=3e-3,
        critic_hidden=[64, 64],
        actor_start_updates=20,
        bound_ramp_updates=100,
        precision="float32",
    )
    assert float(policy.bound_fraction) == 0.0
    for _ in range(10):  # critic only: no actor step yet, the bound stays shut
        algo.update([batch(), batch()])
    assert float(policy.bound_fraction) == 0.0 and algo.actor_updates == 0
    for _ in range(40):
        metrics = algo.update([batch(), batch()])
    assert algo.actor_updates == 40 and float(policy.bound_fraction) == pytest.approx(0.4)
    assert metrics["bound_fraction"] == pytest.approx(0.39)  # the share the last actor step used
    early = residual_now(policy).abs().max(0).values
    assert (early <= 0.4 * 0.3 + 1e-6).all() and (early > 0.1).all(), early  # pushed to the bound it has now
    assert float(algo.target_policy.bound_fraction) == pytest.approx(0.4)  # the TD target's residual too

    actor = residual_policy(LinearBase(np.zeros((2, 3), np.float32)), scale=0.3)  # as an actor builds it
    load_trainable_state(actor, algo.actor_weights())
    assert float(actor.bound_fraction) == pytest.approx(0.4)
    saved = copy.deepcopy(algo.state_dict())  # as a checkpoint file holds it
    for _ in range(80):
        algo.update([batch(), batch()])
    late = residual_now(policy).mean(0)
    assert float(policy.bound_fraction) == 1.0
    assert late[0] > 0.2 and late[1] < -0.2, late  # the whole bound once the ramp is over

    resumed = build_residual(
        residual_policy(LinearBase(np.zeros((2, 3), np.float32)), scale=0.3),
        space,
        2,
        batch_size=128,
        n_step=1,
        critic_updates_per_actor=2,
        critic_hidden=[64, 64],
        bound_ramp_updates=100,
        actor_start_updates=20,
        precision="float32",
    )
    resumed.load_state_dict(saved)
    assert float(resumed.policy.bound_fraction) == pytest.approx(0.4) and resumed.actor_updates == 40
    old = {k: v for k, v in saved["policy"].items() if k != "bound_fraction"}
    fresh = residual_policy(LinearBase(np.zeros((2, 3), np.float32)), scale=0.3)
    fresh.bound_fraction.fill_(0.0)
    fresh.load_state_dict(old)
    assert float(fresh.bound_fraction) == 1.0


@pytest.mark.parametrize("floor", [0.25, 1.0])
def test_exploration_follows_the_ramping_bound_down_to_its_floor(floor):
    """policy.exploration_floor < 1: the training noise's std is exploration_std * max(bound share, floor), so the
    first episodes stay near the base while the bound is shut; 1 (the default) keeps it whole; out of range is
    refused."""
    base = LinearBase(np.zeros((2, 3), np.float32))
    policy = ResidualPolicy(
        make_observation_space(3, {}),
        2,
        base,
        scale=0.3,
        hidden=[16],
        exploration_std=0.1,
        action_range="full",
        exploration_floor=floor,
    )
    obs = {"state": torch.zeros(1, 3), "images": {}}
    torch.manual_seed(0)

    def noise_std(share):
        policy.bound_fraction.fill_(share)
        return torch.cat([policy.act(obs)[0] for _ in range(500)]).std().item()  # the residual is zero: noise only

    assert noise_std(0.0) == pytest.approx(0.1 * floor, rel=0.1)
    assert noise_std(0.5) == pytest.approx(0.1 * max(0.5, floor), rel=0.1)
    assert noise_std(1.0) == pytest.approx(0.1, rel=0.1)
    assert torch.equal(policy.act(obs, deterministic=True), torch.zeros(1, 2))  # evaluation: no noise at all
    with pytest.raises(ValueError, match="exploration_floor"):
        ResidualPolicy(make_observation_space(3, {}), 2, base, scale=0.3, hidden=[16], exploration_floor=1.5)


def test_the_learner_predicts_the_next_base_action_only_where_the_target_bootstraps_from_it(tmp_path):
    """b' unrecorded (the step after an episode's last one): the learner's base predicts it where the episode was
    cut by the time limit (discount > 0); at a terminal step (discount 0) nothing reads it, so a slow base (a VLA)
    is not asked, and the row's own base action stands in."""
    base = LinearBase(np.array([[0.5, 0.0, 0.0], [0.0, -0.5, 0.0]], np.float32))
    algo = one_step_algo(residual_policy(base), 2)
    state = torch.tensor([[0.4, 0.2, 0.0], [0.2, 0.6, 0.0], [1.0, 1.0, 0.0]])
    batch = {
        "next_obs": {"state": state, "images": {}},
        "discount": torch.tensor([0.99, 0.0, 0.99]),
        "extras": {"base_action": torch.tensor([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]])},
        "next_extras": {"base_action": torch.tensor([[0.7, 0.7], [9.0, 9.0], [9.0, 9.0]])},
        "next_extras_valid": torch.tensor([True, False, False]),
    }
    next_base = algo.next_base(batch)
    assert base.calls == 1, "only the truncated row's b' is predicted"
    torch.testing.assert_close(next_base, torch.tensor([[0.7, 0.7], [0.2, 0.2], [0.5, -0.5]]))
    # the same row sampled again (every batch draws a few such rows): its b' is kept, not predicted again
    torch.testing.assert_close(algo.next_base(batch), next_base)
    assert base.calls == 1
    # and a resumed learner keeps it too (a checkpoint written and read back as the learner does)
    path = tmp_path / "algo.pt"
    torch.save(algo.state_dict(), path)
    resumed = one_step_algo(residual_policy(base), 2)
    resumed.load_state_dict(torch.load(path, weights_only=True))
    torch.testing.assert_close(resumed.next_base(batch), next_base)
    assert base.calls == 1
    other = {**batch, "next_obs": {"state": state + 0.5, "images": {}}}  # a different observation is predicted
    torch.testing.assert_close(resumed.next_base(other)[2], torch.tensor([0.75, -0.75]))
    assert base.calls == 2
