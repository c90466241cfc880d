"""Blocks run with numpy's global generator seeded: simulators that draw from it (robosuite's placement, gym-hil's
block) and rliable's bootstrap."""

from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def global_numpy_seed(seed: int):
    """Run a block with numpy's global generator seeded, restoring its previous state afterwards."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)
