"""The policy the actor ships: an observation encoder and a tanh-squashed Gaussian head."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from policies.acting import ActingPolicy
from policies.encoders import EncoderConfig, encoder_for_space
from policies.mlp import mlp


class TanhGaussianPolicy(nn.Module, ActingPolicy):
    """π(a|s): a = tanh(u), u ~ N(μ(s), σ(s)); actions land in [-1, 1] as the contract wants."""

    vector_slots = True  # no per-episode state: one call acts for several envs

    def __init__(
        self,
        observation_space,
        action_dim: int,
        hidden: list[int] = (256, 256),
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        image_features: int | None = None,  # older configs; now `encoder.features`
        encoder: dict | None = None,  # see policies.encoders.EncoderConfig
    ) -> None:
        super().__init__()
        self.encoder_config = EncoderConfig.parse(encoder, image_features)  # the critics build theirs from it
        self.encoder = encoder_for_space(observation_space, config=self.encoder_config)
        self.head = mlp(self.encoder.out_dim, list(hidden), 2 * action_dim)
        self.action_dim = action_dim
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def distribution_params(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head(features).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(log_std) + 1)
        return mean, log_std

    def sample(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action and its log-probability (with the tanh change of variables)."""
        mean, log_std = self.distribution_params(features)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        action = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)  # log |d tanh(u)/du|
        return action, log_prob

    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        features = self.encoder(obs)
        if deterministic:
            return torch.tanh(self.distribution_params(features)[0])
        return self.sample(features)[0]
