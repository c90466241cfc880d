"""Observation encoders: the contract's observation dict → one feature vector.

Images stay uint8 until here; the first thing the encoder does is scale them to [0, 1].
"""

from __future__ import annotations

import torch
from torch import nn


class ConvEncoder(nn.Module):
    """A small CNN for one uint8 camera: 4 strided convolutions, then a linear projection."""

    def __init__(self, image_size: int, channels: int = 32, out_dim: int = 64) -> None:
        super().__init__()
        layers, c_in = [], 3
        for stride in (2, 2, 2, 1):
            layers += [nn.Conv2d(c_in, channels, 3, stride=stride), nn.ReLU()]
            c_in = channels
        self.conv = nn.Sequential(*layers)
        with torch.no_grad():
            n = self.conv(torch.zeros(1, 3, image_size, image_size)).numel()
        self.proj = nn.Sequential(nn.Linear(n, out_dim), nn.LayerNorm(out_dim), nn.Tanh())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).float() / 255.0  # [B, H, W, 3] uint8 → [B, 3, H, W] in [0, 1]
        return self.proj(self.conv(x).flatten(1))


class ObservationEncoder(nn.Module):
    """Concatenates the state vector with one feature vector per camera."""

    def __init__(self, state_dim: int, cameras: dict[str, int], image_features: int = 64) -> None:
        super().__init__()
        self.state_dim = state_dim
        encoders = {name: ConvEncoder(size, out_dim=image_features) for name, size in cameras.items()}
        self.cameras = nn.ModuleDict(encoders)
        self.out_dim = state_dim + image_features * len(cameras)

    def forward(self, obs: dict) -> torch.Tensor:
        parts = [obs["state"]]
        parts += [enc(obs["images"][name]) for name, enc in self.cameras.items()]
        return torch.cat(parts, dim=-1)


def encoder_for_space(observation_space, image_features: int = 64) -> ObservationEncoder:
    """Build the encoder that matches a contract observation space (a gymnasium Dict)."""
    state_dim = observation_space["state"].shape[0]
    cams = {name: space.shape[0] for name, space in observation_space["images"].spaces.items()}
    return ObservationEncoder(state_dim, cams, image_features)
