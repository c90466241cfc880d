"""Per-dimension state normalisation, the same for every BC policy: the MLP (`bc.py`), the flow/diffusion
generator (`flow.py`) and their numpy twins (`cpu_sampler.py`).

The mean and std are buffers of the policy (`state_mean`, `state_std`), so they travel with its weights.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

STD_FLOOR = 1e-2  # a state entry that barely moved in the demonstrations is not blown up by normalisation
NORMALISED_CLIP = 10.0  # a state far outside the demonstrations stays a finite input


def set_normalisation(policy: nn.Module, states: np.ndarray) -> None:
    """Per-dimension mean and std of the training states, into the policy's `state_mean` and `state_std` buffers."""
    states = torch.as_tensor(np.asarray(states, np.float32))
    policy.state_mean.copy_(states.mean(0))
    policy.state_std.copy_(states.std(0, unbiased=False).clamp_min(STD_FLOOR))
