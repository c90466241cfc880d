"""Where each episode's seed comes from, and blocks run with numpy's global generator seeded (simulators that draw
from it, robosuite's placement and gym-hil's block, and rliable's bootstrap).

Training seeds: actor i of a run (`robo-rl train train.actors=N`, a launch layout's actors) runs `seed + i *
ACTOR_SEED_STRIDE`, and an actor's env j starts from its seed + j * ENV_SEED_STRIDE; robo_rl/eval/select.py reads
both to say whether evaluation seeds are held out."""

from __future__ import annotations

import contextlib

ACTOR_SEED_STRIDE = 1000  # actor i of a run starts from seed + i * this
ENV_SEED_STRIDE = 100_003  # env j of an actor with several starts from its seed + j * this (a prime: no overlap soon)


@contextlib.contextmanager
def global_numpy_seed(seed: int):
    """Run a block with numpy's global generator seeded, restoring its previous state afterwards."""
    import numpy as np  # here: the launcher reads the strides above and needs no numpy

    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)
