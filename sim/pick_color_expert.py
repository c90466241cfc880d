"""The scripted expert of pick_color (sim/pick_color.py): pick_cube's expert, shown the cube the instruction names as
pick_cube's one cube. `colour_blind=True` ignores the instruction and takes the cube nearer the gripper at the
episode's start: the best a policy reading the state alone can do, right about half the time."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from robo_rl.errors import UserError
from sim.experts import PickCubeExpert
from sim.pick_color import COLOURS, CUBE_STATE_NAMES, PickColorEnv
from sim.pick_cube import PROPRIO_DIM, STATE_NAMES


def named_colour(instruction: str) -> str:
    """The colour an instruction names (a UserError naming the instruction where it names none or both)."""
    named = [c for c in COLOURS if c in instruction.split()]
    if len(named) != 1:
        raise UserError(f"instruction {instruction!r} names no single colour of {' | '.join(COLOURS)}")
    return named[0]


class PickColorExpert:
    """Approach, descend, close and lift (or reach above) the cube the instruction names.

    `noise_std` adds Gaussian noise to each action (clipped to [-1, 1]) for diverse demonstrations."""

    def __init__(
        self, env: PickColorEnv, noise_std: float = 0.0, seed: int | None = None, colour_blind: bool = False
    ) -> None:
        env = getattr(env, "unwrapped", env)
        names = list(env.full_state_names)
        self._blocks = {c: [names.index(f"{c}_{n.removeprefix('cube_')}") for n in CUBE_STATE_NAMES] for c in COLOURS}
        self._rel = {c: [names.index(f"{c}_rel_{axis}") for axis in "xyz"] for c in COLOURS}
        self._env = env
        self._read_full_state = env.state_mode == "proprio"  # the cubes are not in obs: read them from the env
        # pick_cube's expert over pick_cube's state layout: the proprio block, then the named cube's block
        one_cube = SimpleNamespace(
            full_state_names=STATE_NAMES,
            state_mode="full",
            task=env.task,
            max_ee_step_m=env.max_ee_step_m,
            reach_height_m=env.reach_height_m,
        )
        self._pick_cube = PickCubeExpert(one_cube, noise_std=noise_std, seed=seed)
        self.colour_blind = bool(colour_blind)
        self.colour: str | None = None  # the cube it goes for this episode (colour-blind: chosen at its first act)

    def reset(self) -> None:
        self._pick_cube.reset()
        self.colour = None

    def act(self, obs: dict) -> np.ndarray:
        state = np.asarray(self._env.full_state if self._read_full_state else obs["state"], np.float32)
        if self.colour_blind:
            if self.colour is None:
                self.colour = min(COLOURS, key=lambda c: float(np.linalg.norm(state[self._rel[c]])))
        else:
            self.colour = named_colour(obs.get("instruction") or self._env.instruction or "")
        view = np.concatenate([state[:PROPRIO_DIM], state[self._blocks[self.colour]]])
        return self._pick_cube.act({"state": view})
