"""The learner's mixed precision: bfloat16 matrix products with float32 outputs, weights and optimiser state."""

import copy

import pytest
import torch

from policies.gaussian import TanhGaussianPolicy
from policies.mlp import EnsembleMLP, mlp
from robo_rl import precision
from robo_rl.algos.sac import SAC, SACConfig
from robo_rl.envs import make_observation_space


def test_precision_names_resolve_and_a_bad_name_is_refused():
    assert precision.resolve_precision("float32") == torch.float32
    assert precision.resolve_precision("bfloat16") == torch.bfloat16
    with pytest.raises(ValueError, match="algo.precision must be one of auto, float32, bfloat16, got 'fp8'"):
        precision.resolve_precision("fp8")


@pytest.mark.parametrize("native", [True, False])
def test_auto_uses_bfloat16_only_on_a_cpu_that_has_it_natively(monkeypatch, native):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert precision.resolve_precision("auto", "cpu") == (torch.bfloat16 if native else torch.float32)


def hidden_and_output_dtypes(net: torch.nn.Module, x: torch.Tensor) -> tuple[set, torch.dtype]:
    seen = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
        for m in net.modules()
        if type(m).__name__ in ("Linear", "EnsembleLinear")
    ]
    with precision.autocast(torch.bfloat16):
        out = net(x)
    for h in hooks:
        h.remove()
    return set(seen[:-1]), out.dtype


@pytest.mark.parametrize("make", [lambda: mlp(8, [32, 32], 3, layer_norm=True), lambda: EnsembleMLP(2, 8, [32, 32], 1)])
def test_hidden_layers_run_in_bfloat16_and_the_output_layer_in_float32(make):
    torch.manual_seed(0)
    net = make()
    x = torch.randn(16, 8)
    hidden, out = hidden_and_output_dtypes(net, x)
    assert hidden == {torch.bfloat16} and out == torch.float32
    out_fp32 = net(x)
    assert out_fp32.dtype == torch.float32
    with precision.autocast(torch.bfloat16):
        mixed = net(x)
    assert not torch.equal(mixed, out_fp32)  # it really ran in bfloat16 ...
    assert torch.allclose(mixed, out_fp32, atol=0.05)  # ... and agrees with float32 to bfloat16's resolution


# slow for float32: algo.precision=auto is float32 on CPUs without native bfloat16 (this machine, CI), where every SAC
# learning test in the fast suite runs in it (test_cli's README train test, test_sac, test_pipeline)
@pytest.mark.parametrize("name", [pytest.param("float32", marks=pytest.mark.slow), "bfloat16"])
def test_sac_learns_a_one_step_task_in_either_precision_and_keeps_float32_state(name):
    """A bandit (every step terminates) with reward −4(a − 0.6)² per dimension: the learned action → 0.6."""
    torch.manual_seed(0)
    space = make_observation_space(3, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[64, 64])
    sac = SAC(
        policy,
        space,
        SACConfig(
            critic_hidden=(64, 64), lr_actor=3e-3, lr_critic=3e-3, init_temperature=0.01, lr_alpha=0.0, precision=name
        ),
    )
    assert sac.compute_dtype == getattr(torch, name)
    gen = torch.Generator().manual_seed(0)
    for _ in range(700):
        obs = {"state": torch.rand(256, 3, generator=gen) * 2 - 1, "images": {}}
        action = torch.rand(256, 2, generator=gen) * 2 - 1
        reward = -4 * ((action - 0.6) ** 2).sum(-1)
        m = sac.update(
            [{"obs": obs, "next_obs": obs, "action": action, "reward": reward, "discount": torch.zeros(256)}]
        )
    learned = policy.act({"state": torch.rand(64, 3, generator=gen) * 2 - 1, "images": {}}, deterministic=True)
    assert torch.allclose(learned, torch.full_like(learned, 0.6), atol=0.07), learned
    assert m["q_mean"] == pytest.approx(-4 * 2 * (1 / 3 + 0.36), abs=0.3)  # Q of the batch's uniform actions
    tensors = [*sac.critic.parameters(), *policy.parameters(), sac.log_alpha]
    tensors += [v for o in (sac.critic_optim, sac.actor_optim) for s in o.state.values() for v in s.values()]
    assert {t.dtype for t in tensors if t.is_floating_point()} == {torch.float32}


def test_each_bfloat16_step_of_an_update_sees_the_weights_the_step_before_left():
    """Autocast keeps one low-precision copy of each weight per region: an update with two critic batches must
    compute its second critic step (and its actor step) on the critic the first step produced, not on a stale copy.
    Same RNG both ways: `update([b1, b2])` == critic step on b1, critic step on b2, actor step, each on its own."""
    torch.manual_seed(0)
    space = make_observation_space(3, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[32, 32])
    cfg = SACConfig(critic_hidden=(32, 32), lr_critic=0.05, precision="bfloat16")  # big steps: stale ≠ fresh
    one_call = SAC(policy, space, cfg)
    step_by_step = copy.deepcopy(one_call)
    gen = torch.Generator().manual_seed(1)
    batches = [
        {
            "obs": {"state": torch.rand(64, 3, generator=gen), "images": {}},
            "next_obs": {"state": torch.rand(64, 3, generator=gen), "images": {}},
            "action": torch.rand(64, 2, generator=gen) * 2 - 1,
            "reward": torch.rand(64, generator=gen),
            "discount": torch.full((64,), 0.99),
        }
        for _ in range(2)
    ]
    torch.manual_seed(2)
    one_call.update(batches)
    torch.manual_seed(2)
    for b in batches:
        with precision.autocast(torch.bfloat16):
            step_by_step.update_critic(b)
    with precision.autocast(torch.bfloat16):
        step_by_step.update_actor(batches[-1])
    for (name, a), b in zip(
        one_call.critic.state_dict().items(), step_by_step.critic.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), f"critic {name} differs: the second step ran on stale bfloat16 weights"
    for (name, a), b in zip(policy.state_dict().items(), step_by_step.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), f"policy {name} differs: the actor step ran on a stale critic"
