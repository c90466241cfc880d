"""The BC checkpoint file, shared by the MLP (`bc.py`) and the flow/diffusion (`flow.py`) policies: its kinds and
formats, reading it, and checking its features against a task's.

A checkpoint (`<run>/bc/policy.pt`) holds only tensors and plain containers: `torch.load(weights_only=True)` reads it.
"""

from __future__ import annotations

from pathlib import Path

import torch

BC_KIND = "bc_policy"
BC_FORMAT = 1
GENERATIVE_KIND = "generative_policy"
GENERATIVE_FORMAT = 1


class BCCheckpointError(ValueError):
    """A missing, unreadable or mismatched BC checkpoint; the text names the file and the mismatch."""


def read_bc_checkpoint(path: str | Path) -> dict:
    """The payload of a BC checkpoint file (or of `<run>/bc/policy.pt` given the run folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "bc" / "policy.pt" if (path / "bc" / "policy.pt").is_file() else path / "policy.pt"
    if not path.is_file():
        raise BCCheckpointError(f"base checkpoint {path} does not exist: pass a bc/policy.pt file or a run folder")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise BCCheckpointError(f"base checkpoint {path} is corrupt or unreadable ({type(e).__name__})") from None
    formats = {BC_KIND: BC_FORMAT, GENERATIVE_KIND: GENERATIVE_FORMAT}
    if not isinstance(payload, dict) or formats.get(payload.get("kind")) != payload.get("format"):
        raise BCCheckpointError(
            f"base checkpoint {path} is not a robo_rl BC policy (MLP format {BC_FORMAT}, flow or "
            f"diffusion format {GENERATIVE_FORMAT})"
        )
    payload["path"] = str(path)
    return payload


def feature_mismatch(config: dict, observation_space, action_dim: int, state_names=None) -> str | None:
    """What differs between a checkpoint's observation/action features and the task's (None: they match)."""
    state_dim = observation_space["state"].shape[0]
    if config["state_dim"] != state_dim:
        return f"state has {config['state_dim']} dimensions, the task's has {state_dim}"
    if config["action_dim"] != action_dim:
        return f"action dimension is {config['action_dim']}, the task's is {action_dim}"
    names, task_names = list(config.get("state_names") or []), list(state_names or [])
    if names and task_names and names != task_names:
        pairs = enumerate(zip(names, task_names, strict=False))
        i = next((i for i, (a, b) in pairs if a != b), min(len(names), len(task_names)))
        ours, theirs = (n[i] if i < len(n) else "(none)" for n in (names, task_names))
        return f"state entry {i} is '{ours}', the task's is '{theirs}'"
    task_cams = {n: list(s.shape[:2]) for n, s in observation_space["images"].spaces.items()}
    for name, size in config["cameras"].items():
        if name not in task_cams:
            return f"camera '{name}' is not in the task (it has {sorted(task_cams) or 'no cameras'})"
        if list(size) != task_cams[name]:
            return f"camera '{name}' is {size[0]}x{size[1]}, the task's is {task_cams[name][0]}x{task_cams[name][1]}"
    return None
