"""A hybrid policy for tasks with an open/close gripper (HIL-SERL style): a tanh-Gaussian policy moves the arm
and a discrete critic chooses the gripper command among open / stay / close.

The gripper is the last action dimension. The env must read it as a discrete command (`gripper="discrete"`
in `sim.pick_cube.PickCubeEnv`): below -0.5 open, above 0.5 close, in between keep the last command.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from policies.acting import ActingPolicy
from policies.encoders import EncoderConfig, encoder_for_space
from policies.gaussian import TanhGaussianPolicy
from policies.mlp import EnsembleMLP

GRIPPER_VALUES = (-1.0, 0.0, 1.0)  # open, stay, close: the action value sent for each choice


def gripper_choice(value: torch.Tensor) -> torch.Tensor:
    """An executed gripper action (any value in [-1, 1]) → its choice index: 0 open, 1 stay, 2 close."""
    return (value > -0.5).long() + (value > 0.5).long()


class GripperQ(nn.Module):
    """Q(s, ·) over the three gripper choices: an observation encoder and an ensemble of LayerNorm MLP heads."""

    def __init__(
        self,
        observation_space: gym.spaces.Dict,
        hidden: list[int] = (256, 256),
        num_heads: int = 2,
        image_features: int | None = None,
        encoder: dict | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder_for_space(observation_space, config=EncoderConfig.parse(encoder, image_features))
        self.q = EnsembleMLP(num_heads, self.encoder.out_dim, list(hidden), len(GRIPPER_VALUES), True)

    def forward(self, obs: dict) -> torch.Tensor:
        """[heads, batch, 3]"""
        return self.q(self.encoder(obs))

    def choose(self, obs: dict) -> torch.Tensor:
        return self(obs).mean(0).argmax(-1)


class HybridGripperPolicy(nn.Module, ActingPolicy):
    """`arm`: a TanhGaussianPolicy over all action dimensions but the last; `gripper`: a GripperQ."""

    vector_slots = True  # no per-episode state: one call acts for several envs

    def __init__(
        self,
        observation_space: gym.spaces.Dict,
        action_dim: int,
        hidden: list[int] = (256, 256),
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        image_features: int | None = None,
        gripper_hidden: list[int] = (256, 256),
        gripper_heads: int = 2,
        epsilon: float = 0.1,
        encoder: dict | None = None,
    ) -> None:
        super().__init__()
        if action_dim < 2:
            raise ValueError("a hybrid gripper policy needs at least one arm dimension and the gripper")
        self.arm = TanhGaussianPolicy(
            observation_space, action_dim - 1, hidden, log_std_min, log_std_max, image_features, encoder
        )
        self.gripper = GripperQ(observation_space, gripper_hidden, gripper_heads, image_features, encoder)
        self.epsilon = epsilon  # exploration: a random gripper choice this often when not deterministic
        self.action_dim = action_dim
        self.register_buffer("values", torch.tensor(GRIPPER_VALUES))

    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False) -> torch.Tensor:
        arm = self.arm.act(obs, deterministic)
        choice = self.gripper.choose(obs)
        if not deterministic and self.epsilon > 0:
            explore = torch.rand(choice.shape) < self.epsilon
            choice = torch.where(explore, torch.randint(0, len(GRIPPER_VALUES), choice.shape), choice)
        return torch.cat([arm, self.values[choice].unsqueeze(-1)], dim=-1)
