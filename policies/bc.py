"""Behaviour cloning: an MLP (on the state and, optionally, camera features) that predicts a chunk of actions,
and the frozen base (`BasePolicy`) a residual learner or an actor runs from its checkpoint.

The checkpoint (`<run>/bc/policy.pt`, written by `robo_rl.offline.bc`; its format in `policies/checkpoint.py`) holds
only tensors and plain containers. `load_bc_base` checks it against the task before anything starts, and hands a flow
or diffusion checkpoint to `policies/flow.py`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.checkpoint import BC_FORMAT, BC_KIND, BCCheckpointError, feature_mismatch, read_bc_checkpoint
from policies.cpu_sampler import CpuMLPPolicy
from policies.encoders import EncoderConfig, ObservationEncoder
from policies.flow import load_generative_base
from policies.mlp import mlp
from policies.state_norm import NORMALISED_CLIP, set_normalisation


class BCPolicy(nn.Module):
    """obs → `chunk_size` actions in [-1, 1]: normalised state (+ camera features) → LayerNorm MLP → tanh.

    The per-dimension state mean and std are buffers, so they travel with the weights."""

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        chunk_size: int = 1,
        hidden: list[int] = (256, 256),
        cameras: dict[str, list[int]] | None = None,
        encoder: dict | None = None,
        state_names: list[str] | None = None,
    ) -> None:
        super().__init__()
        if chunk_size < 1 or action_dim < 1 or state_dim < 1:
            raise ValueError(
                f"BCPolicy needs positive sizes: state_dim={state_dim}, action_dim={action_dim}, "
                f"chunk_size={chunk_size}"
            )
        cameras = {name: [int(h), int(w)] for name, (h, w) in (cameras or {}).items()}
        self.config = {
            "state_dim": int(state_dim),
            "action_dim": int(action_dim),
            "chunk_size": int(chunk_size),
            "hidden": [int(h) for h in hidden],
            "cameras": cameras,
            "encoder": dict(encoder) if cameras and encoder else None,
            "state_names": list(state_names or []),
        }
        self.state_dim, self.action_dim, self.chunk_size = state_dim, action_dim, chunk_size
        self.encoder = ObservationEncoder(
            state_dim, {n: tuple(s) for n, s in cameras.items()}, config=EncoderConfig.parse(self.config["encoder"])
        )
        self.head = mlp(self.encoder.out_dim, list(hidden), chunk_size * action_dim, layer_norm=True)
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    set_normalisation = set_normalisation  # per-dimension mean and std of the training states

    def forward(self, obs: dict) -> torch.Tensor:
        """[B, chunk_size, action_dim]"""
        state = ((obs["state"] - self.state_mean) / self.state_std).clamp(-NORMALISED_CLIP, NORMALISED_CLIP)
        images = {name: obs["images"][name] for name in self.config["cameras"]}
        out = torch.tanh(self.head(self.encoder({"state": state, "images": images})))
        return out.view(-1, self.chunk_size, self.action_dim)

    def checkpoint(self, **extra) -> dict:
        """What `load_bc_base` rebuilds the policy from: plain containers and tensors only."""
        weights = {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}
        return {"format": BC_FORMAT, "kind": BC_KIND, "config": self.config, "weights": weights, **extra}


class BCBase:
    """A loaded BCPolicy as a frozen base (`policies.base.BasePolicy`): no gradients, CPU unless told."""

    def __init__(
        self,
        policy: BCPolicy,
        device: str | torch.device = "cpu",
        execute_steps: int | None = None,
        action_range: tuple[list[float], list[float]] | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.action_range = action_range  # of its training actions (checkpoints from before it was kept: None)
        self.policy = policy.to(self.device).eval().requires_grad_(False)
        self.action_dim = policy.action_dim
        self.chunk_size = policy.chunk_size
        self.execute_steps = execute_steps  # what training suggested for ChunkedBase; None: the whole chunk
        self.cameras = list(policy.config["cameras"])
        self.fast = self.cpu_policy()

    def cpu_policy(self):
        """numpy's forward pass for one observation (`policies/cpu_sampler.py`) where it covers this policy."""
        return CpuMLPPolicy.build(self.policy)

    def reset(self) -> None:
        pass  # no observation history: each chunk depends on one observation

    def predict_chunk(self, obs: dict) -> np.ndarray:
        """float32 [chunk, A]; on the CPU, for a state-only policy, by numpy (the same arithmetic as torch's)."""
        if self.fast is not None:
            if not self.fast.current(self.policy):  # weights changed in place since it was built
                self.fast = self.cpu_policy()
            return self.fast.chunk(obs["state"])
        return self._torch_chunk(obs)

    @torch.no_grad()
    def _torch_chunk(self, obs: dict) -> np.ndarray:
        state = torch.as_tensor(np.asarray(obs["state"], np.float32), device=self.device).unsqueeze(0)
        images = {
            n: torch.as_tensor(np.asarray(obs["images"][n]), device=self.device).unsqueeze(0) for n in self.cameras
        }
        return self.policy({"state": state, "images": images})[0].cpu().numpy().astype(np.float32)


def load_bc_base(
    path: str | Path,
    observation_space,
    action_dim: int,
    state_names=None,
    device: str | torch.device = "cpu",
    task: str | None = None,
):
    """A BC checkpoint (an MLP, a flow or a diffusion policy) as a frozen base, refused in one line if missing,
    unreadable or made for another task; `task`: a task-conditioned flow's instruction where an observation has none."""
    payload = read_bc_checkpoint(path)
    if payload["kind"] != BC_KIND:
        return load_generative_base(payload, observation_space, action_dim, state_names, device, task)
    config = payload["config"]
    problem = feature_mismatch(config, observation_space, action_dim, state_names)
    if problem:
        raise BCCheckpointError(f"base checkpoint {payload['path']} does not fit this task: its {problem}")
    policy = BCPolicy(**config)
    try:
        policy.load_state_dict(payload["weights"])
    except (KeyError, RuntimeError) as e:
        raise BCCheckpointError(
            f"base checkpoint {payload['path']} has weights that do not fit its own config "
            f"({str(e).splitlines()[0][:120]})"
        ) from None
    rng = payload.get("action_range")
    return BCBase(policy, device, payload.get("execute_steps"), (rng["low"], rng["high"]) if rng else None)
