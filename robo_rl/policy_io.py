"""Running a torch policy on contract observations (numpy dicts) in the actor and in evaluation."""

from __future__ import annotations

import numpy as np
import torch


def obs_to_torch(obs: dict, batch: bool = True) -> dict:
    """A contract observation (numpy) → tensors; images stay uint8."""
    wrap = (lambda a: torch.from_numpy(np.asarray(a)).unsqueeze(0)) if batch else (lambda a: torch.from_numpy(a))
    return {"state": wrap(obs["state"]), "images": {k: wrap(v) for k, v in obs["images"].items()}}


def batch_to_torch(batch: dict) -> dict:
    """A replay batch (nested numpy dicts) → tensors, without copying."""
    if isinstance(batch, dict):
        return {k: batch_to_torch(v) for k, v in batch.items()}
    return torch.from_numpy(np.ascontiguousarray(batch))


def policy_action(policy, obs: dict, deterministic: bool) -> np.ndarray:
    return policy.act(obs_to_torch(obs), deterministic=deterministic)[0].numpy()
