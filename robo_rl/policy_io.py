"""Running a torch policy on contract observations (numpy dicts) in the actor and in evaluation."""

from __future__ import annotations

import numpy as np
import torch

from policies.acting import acting_policy
from policies.language import instruction_rows


def obs_to_torch(obs: dict, batch: bool = True) -> dict:
    """A contract observation (numpy) → tensors; images stay uint8."""
    wrap = (lambda a: torch.from_numpy(np.asarray(a)).unsqueeze(0)) if batch else (lambda a: torch.from_numpy(a))
    images = {k: wrap(v) for k, v in obs["images"].items()}
    return {"state": wrap(obs["state"]), "images": images, **instruction_rows([obs])}  # a VLA base reads it


def batch_to_torch(batch: dict, device: torch.device | None = None) -> dict:
    """A replay batch (nested numpy dicts) → tensors: on the CPU without copying; on a GPU through pinned host
    memory with non-blocking copies (the next batch is gathered while this one travels). A list (an observation's
    instruction per row) stays as it is."""
    if isinstance(batch, dict):
        return {k: batch_to_torch(v, device) for k, v in batch.items()}
    if isinstance(batch, list):
        return batch
    tensor = torch.from_numpy(np.ascontiguousarray(batch))
    if device is None or device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def policy_action(policy, obs: dict, deterministic: bool) -> np.ndarray:
    return policy.act(obs_to_torch(obs), deterministic=deterministic)[0].numpy()


def policy_step(policy, obs: dict, deterministic: bool, explore: bool = False) -> tuple[np.ndarray, dict]:
    """(action, extras) for one observation, through the `ActingPolicy` protocol: the extras are what else the
    policy decided (its base action, its noise...), carried by the record as `extra/<name>`. With `explore`, the
    policy's own warm-up exploration (`explore_step`) instead."""
    acting = acting_policy(policy)
    if explore:
        explored = acting.explore_step(obs_to_torch(obs))
        if explored is None:
            raise ValueError(f"{type(policy).__name__} has no exploration of its own (explore_step)")
        action, extras = explored
    else:
        action, extras = acting.act_with_extras(obs_to_torch(obs), deterministic=deterministic)
    return action[0].numpy(), {k: v[0].numpy() for k, v in extras.items()}


def stack_obs(observations: list[dict]) -> dict:
    """Several envs' contract observations → one batch of tensors (row i is env i's)."""
    return {
        "state": torch.from_numpy(np.stack([o["state"] for o in observations])),
        "images": {
            k: torch.from_numpy(np.stack([o["images"][k] for o in observations])) for k in observations[0]["images"]
        },
        **instruction_rows(observations),  # one per row, for a policy that reads language
    }


def policy_steps(policy, observations: list[dict], deterministic: bool, slots: list[int]) -> tuple[np.ndarray, dict]:
    """(actions [N, A], extras {name: [N, ...]}) for N envs' observations in one batched call (`slots`: which env
    each row is, for a policy that keeps each env's chunk)."""
    action, extras = acting_policy(policy).act_with_extras(stack_obs(observations), deterministic, slots)
    return action.numpy(), {k: v.numpy() for k, v in extras.items()}
