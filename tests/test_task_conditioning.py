"""Multi-task networks: `policy.encoder.task_conditioning=onehot` appends a one-hot of the row's instruction, over the
env's fixed `instructions`, to the state features of the actor and critics (SAC/RLPD, DSRL, residual). SAC learns a
two-task bandit only with it; the vocabulary travels with the run's config.yaml; an unknown instruction, or onehot
for an env that lists none, is refused by name."""

from __future__ import annotations

import pytest
import torch

from policies.dsrl import NoisePolicy
from policies.flow import ChunkGenerator, GenerativeBase
from policies.gaussian import TanhGaussianPolicy
from policies.residual import ResidualPolicy
from robo_rl.algos.dsrl import build_dsrl
from robo_rl.algos.residual import build_residual
from robo_rl.algos.sac import build_sac
from robo_rl.commands.train import _keep_task_vocabulary
from robo_rl.config import load_config, load_saved_config, make_policy
from robo_rl.envs import make_observation_space
from robo_rl.envs.spec import EnvSpec
from robo_rl.errors import UserError
from tests.test_task_samples import InstructionBase

RED, BLUE = "pick up the red cube", "pick up the blue cube"
SPACE = make_observation_space(2, {})
ONEHOT = {"task_conditioning": "onehot", "instructions": [RED, BLUE]}
UPDATES = 40


def bandit_batch(n: int = 64) -> dict:
    """One-step episodes: the same states under both instructions; reward +a under RED, −a under BLUE."""
    texts = [RED, BLUE] * (n // 2)
    sign = torch.tensor([1.0, -1.0] * (n // 2))
    action = torch.rand(n, 1) * 2 - 1
    return {
        "obs": {"state": torch.zeros(n, 2), "images": {}, "instruction": texts},
        "action": action,
        "reward": sign * action[:, 0],
        "discount": torch.zeros(n),
        "next_obs": {"state": torch.zeros(n, 2), "images": {}, "instruction": texts},
        "intervention": torch.zeros(n, dtype=torch.bool),
    }


def learn_bandit(encoder: dict | None) -> tuple[float, float]:
    torch.manual_seed(0)
    policy = TanhGaussianPolicy(SPACE, 1, hidden=[64], encoder=encoder)
    algo = build_sac(
        policy,
        SPACE,
        1,
        batch_size=64,
        critic_hidden=[64],
        num_critics=2,
        lr_actor=1e-2,
        lr_critic=1e-2,
        init_temperature=0.01,
        precision="float32",
    )
    for _ in range(UPDATES):
        algo.update([bandit_batch(64)])
    obs = {"state": torch.zeros(2, 2), "images": {}, "instruction": [RED, BLUE]}
    red, blue = policy.act(obs, deterministic=True)[:, 0].tolist()
    return red, blue


def test_sac_with_onehot_conditioning_learns_opposite_actions_for_the_same_state_under_two_instructions():
    red, blue = learn_bandit(ONEHOT)
    assert red > 0.8 and blue < -0.8, (red, blue)  # 0.97-0.99 in magnitude over seeds 0-2
    red, blue = learn_bandit(None)  # the same state, no instruction in the features: one action for both
    assert not (red > 0.8 and blue < -0.8) and abs(red - blue) < 1e-6, (red, blue)


def test_every_actor_and_critic_reads_the_one_hot():
    space = make_observation_space(4, {})
    sac = build_sac(TanhGaussianPolicy(space, 2, hidden=[8], encoder=ONEHOT), space, 2, batch_size=8)
    residual_policy = ResidualPolicy(space, 2, InstructionBase(), hidden=[8], encoder=ONEHOT)
    residual = build_residual(residual_policy, space, 2, batch_size=8, precision="float32")
    base = GenerativeBase(ChunkGenerator(4, 2, chunk_size=1, steps=2, hidden=[8]))
    dsrl = build_dsrl(NoisePolicy(space, 2, base, hidden=[8], encoder=ONEHOT), space, 2, batch_size=8, form="aliased")
    encoders = {
        "sac actor": sac.policy.encoder,
        "sac critic": sac.critic.encoder,
        "sac target critic": sac.target_critic.encoder,
        "residual actor": residual.policy.encoder,
        "residual critic": residual.critic.encoder,
        "dsrl noise actor": dsrl.policy.encoder,
        "dsrl noise critic": dsrl.noise_critic.encoder,
        "dsrl action critic": dsrl.action_critic.encoder,
    }
    obs = {"state": torch.zeros(3, 4), "images": {}, "instruction": [BLUE, RED, BLUE]}
    for name, encoder in encoders.items():
        assert encoder.instructions == [RED, BLUE] and encoder.out_dim == 4 + 2, name
        features = encoder(obs)
        assert features[:, 4:].tolist() == [[0, 1], [1, 0], [0, 1]], name
    with pytest.raises(ValueError, match="'open the drawer' is not one this policy was built for"):
        sac.policy.encoder({**obs, "instruction": [RED, "open the drawer", BLUE]})
    with pytest.raises(ValueError, match="None is not one"):
        sac.policy.encoder({"state": torch.zeros(1, 4), "images": {}})  # a row without an instruction


def test_the_vocabulary_comes_from_the_env_is_kept_in_the_run_config_and_round_trips_a_checkpoint(tmp_path):
    cfg = load_config(["experiment=rlpd", "policy.hidden=[8]", "policy.encoder.task_conditioning=onehot"])
    assert list(cfg.policy.encoder.instructions) == []
    spec = EnvSpec(2, 1, {}, instructions=(RED, BLUE))  # the learner's view of the env
    policy = make_policy(cfg, spec)
    assert policy.encoder.instructions == [RED, BLUE]
    with pytest.raises(UserError, match="this env lists none"):
        make_policy(cfg, EnvSpec(2, 1, {}))

    _keep_task_vocabulary(cfg, tmp_path, spec)  # what `robo-rl train` does with the run's env spec
    torch.save(policy.state_dict(), tmp_path / "policy.pt")
    saved = load_saved_config(tmp_path / "config.yaml")
    assert list(saved.policy.encoder.instructions) == [RED, BLUE]
    again = make_policy(saved, EnvSpec(2, 1, {}, instructions=(BLUE, RED)))  # the saved order wins
    again.load_state_dict(torch.load(tmp_path / "policy.pt", weights_only=True))
    obs = {"state": torch.randn(4, 2), "images": {}, "instruction": [RED, BLUE, BLUE, RED]}
    torch.testing.assert_close(again.act(obs, deterministic=True), policy.act(obs, deterministic=True))
    assert again.encoder.instructions == [RED, BLUE]


def test_a_spec_keeps_the_env_instructions_and_without_conditioning_nothing_changes():
    spec = EnvSpec(2, 1, {}, instructions=(RED, BLUE))
    assert EnvSpec.from_json(spec.to_json()) == spec
    older = EnvSpec.from_json({k: v for k, v in spec.to_json().items() if k != "instructions"})
    assert older.instructions == () and not spec.differences(older)  # a spec written before instructions existed
    assert spec.differences(EnvSpec(2, 1, {}, instructions=(BLUE, RED)))  # another order: another one-hot layout
    torch.manual_seed(0)
    plain = TanhGaussianPolicy(SPACE, 1, hidden=[8])
    torch.manual_seed(0)
    none = TanhGaussianPolicy(SPACE, 1, hidden=[8], encoder={"task_conditioning": "none", "instructions": [RED]})
    assert plain.encoder.out_dim == none.encoder.out_dim == 2
    for a, b in zip(plain.state_dict().values(), none.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="needs the instructions it tells apart"):
        TanhGaussianPolicy(SPACE, 1, encoder={"task_conditioning": "onehot"})
    with pytest.raises(ValueError, match="unknown policy.encoder.task_conditioning 'embedding'"):
        TanhGaussianPolicy(SPACE, 1, encoder={"task_conditioning": "embedding"})
