"""Multilayer perceptrons, single and ensembled, with optional LayerNorm (as RLPD's critics use)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def full_precision(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` in float32 even inside an autocast region: output layers (Q-values, action means) keep float32
    resolution when the hidden layers run in bfloat16 (see robo_rl/precision.py)."""
    if not torch.is_autocast_enabled(x.device.type):
        return layer(x)
    with torch.autocast(x.device.type, enabled=False):
        return layer(x.float())


class MLP(nn.Sequential):
    """nn.Sequential whose last layer runs in float32 under autocast (same parameter names as nn.Sequential)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in list(self)[:-1]:
            x = layer(x)
        return full_precision(self[-1], x)


def mlp(in_dim: int, hidden: list[int], out_dim: int, layer_norm: bool = False) -> MLP:
    layers: list[nn.Module] = []
    for h in hidden:
        layers.append(nn.Linear(in_dim, h))
        if layer_norm:
            layers.append(nn.LayerNorm(h))
        layers.append(nn.ReLU())
        in_dim = h
    layers.append(nn.Linear(in_dim, out_dim))
    return MLP(*layers)


class EnsembleLinear(nn.Module):
    """E independent linear layers evaluated in one batched matmul: [E, B, in] → [E, B, out]."""

    def __init__(self, ensemble: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # the same init as nn.Linear, per member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.shape[-1] == 1:
            # a critic's Q output: a batched matrix-vector product has no fast CPU kernel (~5x slower than this
            # multiply-and-sum, and its backward likewise)
            return (x * self.weight.transpose(1, 2)).sum(-1, keepdim=True) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm with separate affine parameters for each ensemble member."""

    def __init__(self, ensemble: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))
        # F.layer_norm without an affine takes a slow path on the CPU (2x); a unit scale and zero shift give the
        # same values on the fast one. Not in the state dict: checkpoints and weights on the wire are unchanged.
        self.register_buffer("unit_scale", torch.ones(dim), persistent=False)
        self.register_buffer("zero_shift", torch.zeros(dim), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype != self.weight.dtype and torch.is_autocast_enabled("cpu"):
            # bfloat16 autocast on the CPU, whose kernel takes a bfloat16 input with float32 scale and shift: it keeps
            # its statistics in float32 and writes bfloat16, which the next product reads; autocast's way would copy
            # x to float32 and the result back, twice the memory traffic (elsewhere autocast's way, as measured there)
            with torch.autocast(x.device.type, enabled=False):
                normed = F.layer_norm(x, x.shape[-1:], self.unit_scale, self.zero_shift)
                return torch.addcmul(self.bias.to(x.dtype), normed, self.weight.to(x.dtype))
        normed = F.layer_norm(x, x.shape[-1:], self.unit_scale, self.zero_shift)
        return torch.addcmul(self.bias, normed, self.weight)  # one pass for the per-member scale and shift


class EnsembleMLP(nn.Module):
    """E MLPs with the same shape; input [B, in] (shared) or [E, B, in]; output [E, B, out]."""

    def __init__(self, ensemble: int, in_dim: int, hidden: list[int], out_dim: int, layer_norm: bool = True) -> None:
        super().__init__()
        self.ensemble = ensemble
        layers: list[nn.Module] = []
        for h in hidden:
            layers.append(EnsembleLinear(ensemble, in_dim, h))
            if layer_norm:
                layers.append(EnsembleLayerNorm(ensemble, h))
            layers.append(nn.ReLU())
            in_dim = h
        layers.append(EnsembleLinear(ensemble, in_dim, out_dim))
        self.net = MLP(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.ensemble, -1, -1)
        return self.net(x)
