"""PickColorEnv: pick_cube's scene with a red and a blue cube; the instruction names the one to lift.

Each episode draws the named colour (`target="either"`) and both cubes' places independently in the same spawn box,
at least `CUBE_MIN_DISTANCE_M` apart, so where a cube lies says nothing about which one is named: only the
instruction (in the observation, `obs["instruction"]`) and the colours (in the cameras) do. The state holds both
cubes' poses, so a policy reading the state alone can only guess. Success, the staged reward and `info["grasped"]`
are the named cube's (pick_cube's code, pointed at that cube each episode): lifting the other cube is not success,
pays nothing with the sparse reward, and with the dense one only the reach term toward the named cube (as when no cube
is held); the episode goes on (it may still be put down and the named one lifted), and `info["other_lifted"]` says so.
"""

from __future__ import annotations

import inspect

import numpy as np

from robo_rl.errors import UserError
from sim.pick_cube import POS_SCALE_M, PROPRIO_DIM, STATE_NAMES, PickCubeEnv

COLOURS = ("red", "blue")  # "red" is pick_cube's own cube, so the red cube's pose and material are pick_cube's
BLUE_RGBA = (0.1, 0.25, 0.85, 1.0)
TARGETS = (*COLOURS, "either")
INSTRUCTIONS = {"lift": "pick up the {} cube", "reach": "move the gripper just above the {} cube"}
CUBE_MIN_DISTANCE_M = 0.1  # centre to centre: the open 2F-85 spans about 10 cm across, so it never lands on both
MIN_SPAWN_HALF_WIDTH_M = 0.075  # 3/4 of that: even a thin box then places two cubes 0.1 m apart in 1 draw of 9
PLACEMENT_TRIES = 1000
CUBE_STATE_NAMES = STATE_NAMES[PROPRIO_DIM:]  # cube_x .. cube_lift: one such block per colour
STATE_NAMES_TWO_CUBES = STATE_NAMES[:PROPRIO_DIM] + tuple(
    f"{colour}_{name.removeprefix('cube_')}" for colour in COLOURS for name in CUBE_STATE_NAMES
)


class PickColorEnv(PickCubeEnv):
    """Lift the cube whose colour the instruction names (`target`: red, blue, or either, drawn per episode)."""

    task_description = "pick up the red or the blue cube, as the instruction says"
    extra_cubes = (("blue_cube", BLUE_RGBA),)
    full_state_names = STATE_NAMES_TWO_CUBES

    @staticmethod
    def colours_for(target: str = "either") -> tuple[str, ...]:
        """The colours an env of this target may name (its task names, as Meta-World's), in COLOURS' order."""
        return COLOURS if target == "either" else (target,)

    @classmethod
    def instructions_for(cls, task: str = "lift", target: str = "either", **_) -> tuple[str, ...]:
        """One instruction per colour the env may name, in COLOURS' order."""
        return tuple(INSTRUCTIONS[task].format(c) for c in cls.colours_for(target))

    def __init__(self, target: str = "either", **pick_cube_settings) -> None:
        if target not in TARGETS:
            raise UserError(f"target must be one of {' | '.join(TARGETS)}, got {target!r}")
        super().__init__(**pick_cube_settings)
        if self._randomizer is not None:  # pick_cube's randomiser varies "cube" alone, which would tell red apart
            raise UserError("pick_color has no domain randomisation (randomize varies pick_cube's one cube only)")
        if self.cube_xy_range_m.max() < MIN_SPAWN_HALF_WIDTH_M:
            raise UserError(
                f"cube_xy_range_m {tuple(self.cube_xy_range_m.tolist())} leaves too little room for two cubes "
                f"{CUBE_MIN_DISTANCE_M} m apart: one half-width of at least {MIN_SPAWN_HALF_WIDTH_M} m is needed"
            )
        self.target = target
        m = self.model
        self._cube_ids = {  # (body, geom, qpos address) per colour; the named one's become pick_cube's "cube"
            colour: (m.body(name).id, m.geom(name).id, m.jnt_qposadr[m.joint(name).id])
            for colour, name in zip(COLOURS, ("cube", "blue_cube"), strict=True)
        }
        self.instructions = self.instructions_for(task=self.task, target=target)
        self.tasks = self.colours_for(target)  # reset's `task` option picks one
        self.instruction: str | None = self.instructions[0] if target != "either" else None  # known at reset
        self.colour: str | None = None if target == "either" else target
        if target != "either":
            self.task_description = self.instruction

    def _draw_places(self, rng: np.random.Generator) -> np.ndarray:
        """Both cubes' xy (red, blue), uniform in the spawn box and at least CUBE_MIN_DISTANCE_M apart."""
        for _ in range(PLACEMENT_TRIES):
            xy = self.cube_center_xy_m + rng.uniform(-1, 1, (2, 2)) * self.cube_xy_range_m
            if np.linalg.norm(xy[0] - xy[1]) >= CUBE_MIN_DISTANCE_M:
                return xy
        raise UserError(
            f"no two places {CUBE_MIN_DISTANCE_M} m apart in {PLACEMENT_TRIES} draws: widen cube_xy_range_m"
        )

    def _reset(self, rng: np.random.Generator, options: dict | None) -> tuple[dict, dict]:
        """Options: `target` or `task` (a colour of `tasks`), `red_xy` and `blue_xy` (m) override the seed's draw."""
        options = dict(options or {})
        drawn = COLOURS[int(rng.integers(2))]  # drawn even when fixed, so a seed places the cubes alike either way
        colour = options.pop("target", drawn if self.target == "either" else self.target)
        if "task" in options and options["task"] not in self.tasks:
            raise UserError(f"reset(options={{'task': {options['task']!r}}}): this env's tasks are {list(self.tasks)}")
        colour = options.pop("task", colour)
        if colour not in COLOURS:
            raise UserError(f"reset option target must be red or blue, got {colour!r}")
        # each colour's place and yaw, independent of which is named: the state at reset does not tell the target
        xys, yaws = self._draw_places(rng), rng.uniform(-1, 1, 2) * self.cube_yaw_range_rad
        places = {c: np.asarray(options.pop(f"{c}_xy", xy), float) for c, xy in zip(COLOURS, xys, strict=True)}
        yaw = dict(zip(COLOURS, yaws, strict=True))
        self.colour, self.instruction = colour, INSTRUCTIONS[self.task].format(colour)
        self._cube_body, self._cube_geom, self._cube_qpos = self._cube_ids[colour]
        (other,) = set(COLOURS) - {colour}
        adr = self._cube_ids[other][2]  # mj_resetData puts the other cube here; pick_cube's reset places the named one
        quat = [np.cos(yaw[other] / 2), 0.0, 0.0, np.sin(yaw[other] / 2)]
        self.model.qpos0[adr : adr + 7] = [*places[other], self._cube_half_m, *quat]
        return super()._reset(rng, {**options, "cube_xy": places[colour], "cube_yaw": yaw[colour]})

    def _step(self, action: np.ndarray) -> tuple[dict, float, bool, dict]:
        obs, reward, terminated, info = super()._step(action)
        (other,) = set(COLOURS) - {self.colour}
        info["other_lifted"] = bool(self._lift_of(self._cube_ids[other][0]) >= 1.0)
        return obs, reward, terminated, info

    def _lift_of(self, body: int) -> float:
        """A cube's height above its resting height, in units of lift_height_m (1: lifted, as pick_cube counts it)."""
        return float((self.data.xpos[body][2] - self._cube_half_m) / self.lift_height_m)

    def _cube_state(self, body: int) -> list:
        """pick_cube's cube block of the state (position, relative position, yaw, lift) for one cube."""
        d, lo, hi = self.data, self.workspace_low_m, self.workspace_high_m
        cube, pinch, rot = d.xpos[body], d.site_xpos[self._pinch], d.xmat[body]
        yaw = np.arctan2(rot[3], rot[0])
        return [
            2.0 * (cube - lo) / (hi - lo) - 1.0,
            (cube - pinch) / POS_SCALE_M,
            [np.sin(4.0 * yaw), np.cos(4.0 * yaw), self._lift_of(body)],
        ]

    def _observation(self) -> dict:
        obs = super()._observation()  # its state's cube block is the named cube's: replaced by both, by colour
        blocks = [self._cube_state(self._cube_ids[c][0]) for c in COLOURS]
        state = np.concatenate([self.full_state[:PROPRIO_DIM], *(a for block in blocks for a in block)])
        self.full_state = state.astype(np.float32)
        obs["state"] = self.full_state[: len(self.state_names)]
        obs["instruction"] = self.instruction
        return obs


# pick_cube's keywords, defaults and all, are this env's too (randomize aside: see __init__); help() and the config
# test read this signature
PickColorEnv.__init__.__signature__ = inspect.signature(PickColorEnv.__init__).replace(
    parameters=[
        *list(inspect.signature(PickColorEnv.__init__).parameters.values())[:2],
        *(
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for name, p in inspect.signature(PickCubeEnv.__init__).parameters.items()
            if name not in ("self", "randomize")
        ),
    ]
)
