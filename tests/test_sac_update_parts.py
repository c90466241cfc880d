"""The faster pieces of the SAC update (issue 50) against what they replace: the gradient clip and the target update
bit for bit, the critic ensemble's layers to float32 rounding, the metrics read back once."""

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from policies.gaussian import TanhGaussianPolicy
from policies.mlp import EnsembleLayerNorm, EnsembleLinear
from robo_rl.algos.sac import SAC, SACConfig, clip_grad_norm, read_metrics
from robo_rl.envs import make_observation_space


def small_sac(**cfg) -> SAC:
    torch.manual_seed(0)
    space = make_observation_space(5, {})
    policy = TanhGaussianPolicy(space, 2, hidden=[16, 16])
    return SAC(policy, space, SACConfig(critic_hidden=(16, 16), precision="float32", **cfg))


def batch(gen: torch.Generator, n: int = 32) -> dict:
    return {
        "obs": {"state": torch.randn(n, 5, generator=gen), "images": {}},
        "next_obs": {"state": torch.randn(n, 5, generator=gen), "images": {}},
        "action": torch.rand(n, 2, generator=gen) * 2 - 1,
        "reward": torch.randn(n, generator=gen),
        "discount": torch.full((n,), 0.99),
    }


@pytest.mark.parametrize("scale", [100.0, 1e-3])  # clipped, and left alone
def test_the_gradient_clip_is_torchs_bit_for_bit(scale):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(7, 13), nn.LayerNorm(13), nn.Linear(13, 3))
    reference = copy.deepcopy(net)
    for p, q in zip(net.parameters(), reference.parameters(), strict=True):
        p.grad = torch.randn_like(p) * scale
        q.grad = p.grad.clone()
    norm = clip_grad_norm(list(net.parameters()), 1.0)
    expected = nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
    assert torch.equal(norm, expected)
    for p, q in zip(net.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    assert (norm > 1.0) == (scale > 1)  # the first case really clipped


def test_without_a_clip_norm_the_gradients_are_measured_and_left_as_they_are():
    p = nn.Parameter(torch.zeros(4))
    p.grad = torch.full((4,), 3.0)
    assert clip_grad_norm([p], None).item() == pytest.approx(6.0)
    assert torch.equal(p.grad, torch.full((4,), 3.0))


def test_the_target_update_is_a_lerp_of_every_critic_tensor_and_still_is_after_a_checkpoint_load():
    sac = small_sac(tau=0.25)
    other = small_sac(tau=0.25)
    with torch.no_grad():  # a critic unlike sac's own, so the load below changes every tensor
        for p in other.critic.parameters():
            p.add_(torch.randn_like(p))
    sac.load_state_dict(other.state_dict() | {"target_critic": sac.target_critic.state_dict()})
    before = [t.clone() for t in sac.target_critic.parameters()]
    sac._soft_update_target()
    # the pairs are listed once at construction: they must be the live tensors the load copied into
    for old, new, source in zip(before, sac.target_critic.parameters(), other.critic.parameters(), strict=True):
        assert torch.equal(new, torch.lerp(old, source, 0.25))
    assert not all(torch.equal(a, b) for a, b in zip(before, sac.target_critic.parameters(), strict=True))


def test_metrics_are_read_back_once_as_floats_equal_to_each_tensors_item():
    values = {"loss": torch.tensor(0.125), "norm": torch.tensor(3.5, dtype=torch.float64), "steps": 7}
    out = read_metrics(values)
    assert out == {"loss": 0.125, "norm": 3.5, "steps": 7}
    assert all(type(v) in (float, int) for v in out.values())
    metrics = small_sac().update([batch(torch.Generator().manual_seed(0))])
    assert set(metrics) == {"critic_loss", "q_mean", "critic_grad_norm", "actor_loss", "alpha", "entropy"}
    assert all(type(v) is float for v in metrics.values())


def test_the_ensemble_layer_norm_is_the_plain_formula_and_keeps_its_state_dict():
    torch.manual_seed(0)
    ln = EnsembleLayerNorm(3, 40)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(3, 9, 40) * 4 + 2
    expected = F.layer_norm(x, (40,)) * ln.weight + ln.bias
    assert torch.allclose(ln(x), expected, rtol=0, atol=1e-5)
    # the unit scale and zero shift that select the fast kernel are not saved: older checkpoints load strictly
    assert set(ln.state_dict()) == {"weight", "bias"}
    EnsembleLayerNorm(3, 40).load_state_dict({"weight": ln.weight.detach(), "bias": ln.bias.detach()})


def test_under_bfloat16_autocast_the_ensemble_layer_norm_stays_in_bfloat16_and_agrees_with_float32():
    torch.manual_seed(0)
    ln = EnsembleLayerNorm(2, 64)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.normal_()
    x = (torch.randn(2, 16, 64) * 3).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = ln(x)
    assert y.dtype == torch.bfloat16  # the next product reads it without a copy
    assert torch.allclose(y.float(), ln(x.float()), atol=0.05)
    y.float().sum().backward()
    assert ln.weight.grad.dtype == torch.float32 and ln.bias.grad.abs().sum() > 0


def test_a_one_output_ensemble_layer_agrees_with_the_batched_product_and_so_do_its_gradients():
    torch.manual_seed(0)
    layer = EnsembleLinear(3, 50, 1)
    x = torch.randn(3, 20, 50, requires_grad=True)
    out = layer(x)
    expected = torch.baddbmm(layer.bias, x, layer.weight)
    assert out.shape == (3, 20, 1) and torch.allclose(out, expected, atol=1e-5)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (x, layer.weight, layer.bias), g)
    expected_grads = torch.autograd.grad(expected, (x, layer.weight, layer.bias), g)
    for a, b in zip(grads, expected_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
