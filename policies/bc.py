"""Behaviour cloning: an MLP (on the state and, optionally, camera features) that predicts a chunk of actions,
and the frozen base (`BasePolicy`) a residual learner or an actor runs from its checkpoint.

The checkpoint (`<run>/bc/policy.pt`, written by `robo_rl.offline.bc`) holds only tensors and plain containers:
`torch.load(weights_only=True)` reads it. `load_bc_base` checks it against the task before anything starts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.encoders import EncoderConfig, ObservationEncoder
from policies.mlp import mlp

BC_FORMAT = 1
STD_FLOOR = 1e-2  # a state entry that barely moved in the demonstrations is not blown up by normalisation
NORMALISED_CLIP = 10.0  # a state far outside the demonstrations stays a finite input


class BCCheckpointError(ValueError):
    """A missing, unreadable or mismatched BC checkpoint; the text names the file and the mismatch."""


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

    def set_normalisation(self, states: np.ndarray) -> None:
        """Per-dimension mean and std of the training states."""
        states = torch.as_tensor(np.asarray(states, np.float32))
        self.state_mean.copy_(states.mean(0))
        self.state_std.copy_(states.std(0, unbiased=False).clamp_min(STD_FLOOR))

    def forward(self, obs: dict) -> torch.Tensor:
        """[B, chunk_size, action_dim]"""
        state = ((obs["state"] - self.state_mean) / self.state_std).clamp(-NORMALISED_CLIP, NORMALISED_CLIP)
        images = {name: obs["images"][name] for name in self.config["cameras"]}
        out = torch.tanh(self.head(self.encoder({"state": state, "images": images})))
        return out.view(-1, self.chunk_size, self.action_dim)

    def checkpoint(self, **extra) -> dict:
        """What `load_bc_base` rebuilds the policy from: plain containers and tensors only."""
        weights = {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}
        return {"format": BC_FORMAT, "kind": "bc_policy", "config": self.config, "weights": weights, **extra}


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
        from policies.cpu_sampler import CpuMLPPolicy

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
    from policies.flow import GENERATIVE_FORMAT, GENERATIVE_KIND

    formats = {"bc_policy": BC_FORMAT, GENERATIVE_KIND: GENERATIVE_FORMAT}
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


def load_bc_base(
    path: str | Path, observation_space, action_dim: int, state_names=None, device: str | torch.device = "cpu"
):
    """A BC checkpoint (an MLP, a flow or a diffusion policy) as a frozen base, refused in one line if missing,
    unreadable or made for another task."""
    payload = read_bc_checkpoint(path)
    if payload["kind"] != "bc_policy":
        from policies.flow import load_generative_base

        return load_generative_base(payload, observation_space, action_dim, state_names, device)
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
