"""Domain randomisation of the simulated MuJoCo tasks (`env.randomize`): the spec, and the randomizer both
`PickCubeEnv` and `RobosuiteEnv` call, so training and evaluation see the same variations.

Keys (all optional; none given = the nominal env, bit for bit). ``[lo, hi]`` ranges are drawn uniformly once per
episode from the env's own generator (the same seed draws the same values); a scalar is a std or a half-width.
  object_size_scale     [lo, hi]  multiplies the object's geometry (collision and visual; primitive geoms only);
                                  its mass stays, its inertia follows the size; it starts resting on its new size
  object_mass_scale     [lo, hi]  multiplies the object's mass and inertia
  friction_scale        [lo, hi]  multiplies the sliding friction of the object and of the gripper's fingers
  object_xy_offset_m    [dx, dy]  half-widths of an extra uniform shift of the object's start position, metres (the
                                  env's own pose ranges, e.g. pick_cube's cube_xy_range_m, stay as they are)
  light_scale           [lo, hi]  multiplies the diffuse and ambient intensity of every light and the headlight
  camera_pos_noise_m    s         each randomised camera moves uniformly within +-s per axis of its parent body's
                                  frame and is re-aimed at the point its nominal view was centred on
  camera_fovy_deg       [lo, hi]  each randomised camera's vertical field of view, degrees (its own draw)
  camera_fovy_scale     [lo, hi]  ... or relative to the camera's nominal field of view (not both)
  image_noise_std       s         Gaussian noise on every observed pixel, uint8 units, rounded and clipped, each step
  action_latency_steps  [lo, hi]  integers: the command applied is the policy's from k steps ago (k drawn per
                                  episode); the first k steps apply the env's neutral action (no motion, open gripper)
  action_noise_std      s         Gaussian noise on the normalised action before clipping to [-1, 1], each step
  control_jitter        s         each control step simulates period x (1 + u), u uniform in [-s, s] drawn each step,
                                  rounded to whole physics substeps

The drawn values of an episode are in the reset's and the first step's ``info["randomization"]`` (floats).
Per-episode values are drawn after the env's own reset draws, so a seed places the object as in the nominal env.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

import mujoco
import numpy as np

from robo_rl.envs.render import look_at_quat

FALLBACK_AIM_DISTANCE_M = 0.5  # a camera whose view never meets the table is re-aimed at a point this far ahead
UINT8_MAX = 255.0
PRIMITIVE_GEOMS = {  # a mesh's size cannot be scaled
    getattr(mujoco.mjtGeom, f"mjGEOM_{kind}") for kind in ("PLANE", "SPHERE", "CAPSULE", "ELLIPSOID", "CYLINDER", "BOX")
}
STD_KEYS = ("camera_pos_noise_m", "image_noise_std", "action_noise_std", "control_jitter")
MODEL_FIELDS = (
    "geom_size",
    "geom_rbound",
    "geom_aabb",
    "geom_pos",
    "geom_friction",
    "body_pos",
    "body_mass",
    "body_inertia",
    "light_diffuse",
    "light_ambient",
    "cam_pos",
    "cam_quat",
    "cam_fovy",
)


@dataclasses.dataclass(frozen=True)
class Randomization:
    """What `env.randomize` varies (see the module docstring); None / 0 leaves that part nominal."""

    object_size_scale: tuple[float, float] | None = None
    object_mass_scale: tuple[float, float] | None = None
    friction_scale: tuple[float, float] | None = None
    object_xy_offset_m: tuple[float, float] | None = None
    light_scale: tuple[float, float] | None = None
    camera_pos_noise_m: float = 0.0
    camera_fovy_deg: tuple[float, float] | None = None
    camera_fovy_scale: tuple[float, float] | None = None
    image_noise_std: float = 0.0
    action_latency_steps: tuple[int, int] | None = None
    action_noise_std: float = 0.0
    control_jitter: float = 0.0

    @classmethod
    def from_config(cls, node: Mapping | None) -> Randomization:
        """Parse and check an `env.randomize` node (None or {} = nominal); a bad key or value raises ValueError."""
        if node is None:
            return cls()
        if not isinstance(node, Mapping):
            raise ValueError(f"randomize must be a mapping of keys to values or null, got {node!r}")
        known = [f.name for f in dataclasses.fields(cls)]
        values = {}
        for key, value in node.items():
            if key not in known:
                raise ValueError(f"unknown randomize key {key!r}; the keys are {', '.join(known)}")
            if value is not None:
                values[key] = _parse(key, value)
        if "camera_fovy_deg" in values and "camera_fovy_scale" in values:
            raise ValueError("randomize: give camera_fovy_deg or camera_fovy_scale, not both")
        return cls(**values)

    @property
    def is_nominal(self) -> bool:
        return self == Randomization()


def _parse(key: str, value):
    if key in STD_KEYS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0.0:
            raise ValueError(f"randomize.{key} must be a number >= 0, got {value!r}")
        if key == "control_jitter" and value >= 1.0:
            raise ValueError(f"randomize.control_jitter must be below 1 (a step lasts a positive time), got {value}")
        return float(value)
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise ValueError(f"randomize.{key} must be a list of two numbers, got {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise ValueError(f"randomize.{key} must be a list of two numbers, got {list(value)!r}")
    lo, hi = value
    if key == "object_xy_offset_m":
        if lo < 0 or hi < 0:
            raise ValueError(f"randomize.object_xy_offset_m holds half-widths >= 0, got {list(value)}")
        return float(lo), float(hi)
    if key == "action_latency_steps":
        if not (float(lo).is_integer() and float(hi).is_integer() and 0 <= lo <= hi):
            raise ValueError(f"randomize.action_latency_steps must be integers 0 <= lo <= hi, got {list(value)}")
        return int(lo), int(hi)
    if not 0.0 < lo <= hi:
        raise ValueError(f"randomize.{key} must be a range 0 < lo <= hi, got {list(value)}")
    if key == "camera_fovy_deg" and hi >= 180.0:
        raise ValueError(f"randomize.camera_fovy_deg must stay below 180 degrees, got {list(value)}")
    return float(lo), float(hi)


class DomainRandomizer:
    """Applies a `Randomization` to a compiled MuJoCo model at each reset (restoring the nominal values first), and
    perturbs each step's action, substep count and images. The env keeps placing the object itself, shifted by
    `object_xy_offset` and resting on a cube `object_scale` times its nominal size."""

    def __init__(
        self,
        spec: Randomization,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        *,
        object_body: int,
        finger_geoms: Sequence[int],
        cameras: Sequence[str],
        surface_z_m: float,
        neutral_action: np.ndarray,
    ) -> None:
        """`data`: forwarded at the start pose (where each camera's aim point is found); `surface_z_m`: the height
        of the table the cameras look at; `finger_geoms`: the gripper geoms whose friction varies with the object's."""
        self.spec, self.model = spec, model
        self._bodies = [b for b in range(model.nbody) if _descends(model, b, object_body)]
        self._object_body = object_body
        self._object_geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] in self._bodies]
        meshes = [model.geom(g).name for g in self._object_geoms if model.geom_type[g] not in PRIMITIVE_GEOMS]
        if spec.object_size_scale is not None and meshes:
            raise ValueError(
                f"randomize.object_size_scale scales primitive geoms only; this object has meshes {meshes}"
            )
        self._friction_geoms = sorted(set(self._object_geoms) | set(finger_geoms))
        self._cameras = [model.camera(name).id for name in cameras]
        self._camera_names = list(cameras)
        self._aim_m = {c: _aim_distance(data, c, surface_z_m) for c in self._cameras}
        self._nominal = {name: getattr(model, name).copy() for name in MODEL_FIELDS}
        self._headlight = (model.vis.headlight.ambient.copy(), model.vis.headlight.diffuse.copy())
        self._scratch = mujoco.MjData(model)  # mj_setConst's workspace: the env's data is never touched
        self._neutral = np.asarray(neutral_action, np.float32)
        self._rng = np.random.default_rng(0)
        self._latency: collections.deque | None = None
        self._report: dict[str, float] | None = None
        self.object_scale, self.object_xy_offset = 1.0, np.zeros(2)
        self.values: dict[str, float] = {}

    # --- per episode ------------------------------------------------------------------------------
    def reset(self, rng: np.random.Generator) -> dict[str, float]:
        """Restore the nominal model, draw this episode's values from `rng` and apply them; returns the values."""
        s, m = self.spec, self.model
        self._rng, values = rng, {}
        for name, nominal in self._nominal.items():
            getattr(m, name)[:] = nominal
        m.vis.headlight.ambient[:], m.vis.headlight.diffuse[:] = self._headlight

        def draw(key: str, low_high) -> float:
            values[key] = float(rng.uniform(*low_high))
            return values[key]

        geoms, bodies, root = self._object_geoms, self._bodies, self._object_body
        self.object_scale = draw("object_size_scale", s.object_size_scale) if s.object_size_scale else 1.0
        if s.object_size_scale:
            k = self.object_scale
            for name in ("geom_size", "geom_rbound", "geom_aabb", "geom_pos"):  # every extent in the body's frame
                getattr(m, name)[geoms] *= k
            m.body_pos[[b for b in bodies if b != root]] *= k
            m.body_inertia[bodies] *= k**2  # same mass, spread k times farther
        if s.object_mass_scale:
            k = draw("object_mass_scale", s.object_mass_scale)
            m.body_mass[bodies] *= k
            m.body_inertia[bodies] *= k
        if s.friction_scale:
            m.geom_friction[self._friction_geoms, 0] *= draw("friction_scale", s.friction_scale)
        self.object_xy_offset = np.zeros(2)
        if s.object_xy_offset_m:
            self.object_xy_offset = rng.uniform(-1.0, 1.0, 2) * s.object_xy_offset_m
            values["object_dx_m"], values["object_dy_m"] = (float(v) for v in self.object_xy_offset)
        if s.light_scale:
            k = draw("light_scale", s.light_scale)
            m.light_diffuse[:] *= k
            m.light_ambient[:] *= k
            m.vis.headlight.ambient[:] *= k
            m.vis.headlight.diffuse[:] *= k
        for cam, name in zip(self._cameras, self._camera_names, strict=True):
            if s.camera_pos_noise_m:
                offset = rng.uniform(-s.camera_pos_noise_m, s.camera_pos_noise_m, 3)
                self._move_camera(cam, offset)
                for axis, v in zip("xyz", offset, strict=True):
                    values[f"camera_{name}_d{axis}_m"] = float(v)
            if s.camera_fovy_deg:
                m.cam_fovy[cam] = draw(f"camera_{name}_fovy_deg", s.camera_fovy_deg)
            elif s.camera_fovy_scale:
                m.cam_fovy[cam] *= rng.uniform(*s.camera_fovy_scale)
                values[f"camera_{name}_fovy_deg"] = float(m.cam_fovy[cam])
        self._latency = None
        if s.action_latency_steps:
            k = int(rng.integers(s.action_latency_steps[0], s.action_latency_steps[1] + 1))
            values["action_latency_steps"] = float(k)
            self._latency = collections.deque([self._neutral.copy() for _ in range(k)])
        if s.object_size_scale or s.object_mass_scale:
            mujoco.mj_setConst(m, self._scratch)  # subtree masses and the solver's inverse weights follow the object
        self.values, self._report = values, values
        return dict(values)

    def _move_camera(self, cam: int, offset: np.ndarray) -> None:
        """Shift a camera in its parent's frame, keeping its nominal aim point and roll."""
        m = self.model
        pos, quat = self._nominal["cam_pos"][cam], self._nominal["cam_quat"][cam]
        axes = np.empty(9)
        mujoco.mju_quat2Mat(axes, quat)
        axes = axes.reshape(3, 3)  # columns: the camera's x (right), y (up), z (backward) in the parent's frame
        target = pos - axes[:, 2] * self._aim_m[cam]
        m.cam_pos[cam] = pos + offset
        m.cam_quat[cam] = look_at_quat(m.cam_pos[cam], target, up=axes[:, 1])

    # --- per step ---------------------------------------------------------------------------------
    def action(self, action: np.ndarray) -> np.ndarray:
        """The action the simulator applies: the policy's `action_latency_steps` ago, plus noise."""
        if self._latency is not None:
            self._latency.append(np.array(action, np.float32))
            action = self._latency.popleft()
        if self.spec.action_noise_std > 0.0:
            noise = self._rng.normal(0.0, self.spec.action_noise_std, np.shape(action))
            action = np.clip(action + noise, -1.0, 1.0).astype(np.float32)
        return action

    def substeps(self, nominal: int) -> int:
        """Physics substeps of this control step (`control_jitter`), at least one."""
        if self.spec.control_jitter == 0.0:
            return nominal
        jitter = self.spec.control_jitter
        return max(1, round(nominal * (1.0 + self._rng.uniform(-jitter, jitter))))

    def images(self, images: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.spec.image_noise_std == 0.0:
            return images
        std = self.spec.image_noise_std
        return {
            name: np.clip(np.rint(img + self._rng.normal(0.0, std, img.shape)), 0.0, UINT8_MAX).astype(np.uint8)
            for name, img in images.items()
        }

    def add_first_step_info(self, info: dict) -> dict:
        """The episode's values go in the first step's info too (an evaluation that skips the reset info sees them)."""
        if self._report is not None:
            info["randomization"], self._report = dict(self._report), None
        return info


def _descends(model: mujoco.MjModel, body: int, ancestor: int) -> bool:
    while body != ancestor and body != 0:
        body = model.body_parentid[body]
    return body == ancestor


def _aim_distance(data: mujoco.MjData, cam: int, surface_z_m: float) -> float:
    """How far ahead along its view a camera's aim point is: where the view meets the table top, if it does."""
    forward = -data.cam_xmat[cam].reshape(3, 3)[:, 2]  # MuJoCo cameras look along their -z
    if forward[2] < 0.0:
        distance = (surface_z_m - data.cam_xpos[cam][2]) / forward[2]
        if distance > 0.0:
            return float(distance)
    return FALLBACK_AIM_DISTANCE_M
