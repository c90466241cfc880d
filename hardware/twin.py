"""A MuJoCo twin of one arm: what a fake bus or a fake network client talks to in place of the metal.

The twin is the arm's `ArmModel` MJCF in a small scene (floor, light, cameras) with position-servo behaviour: each
joint moves toward its target at a bounded speed, as a position-controlled arm does, advanced to the clock's time
whenever it is read or commanded (no thread: the same answers at any load, and a `VirtualClock` runs it faster
than real time). Motor load follows the tracking error; a test injects what the metal would do to the driver (a
force spike, a fault, a hand moving the arm with its torque off).
"""

from __future__ import annotations

import threading

import mujoco
import numpy as np

from hardware.arm import Clock
from hardware.kinematics import ArmModel
from robo_rl.envs.render import fast_renderer, look_at_quat

LOAD_AT_REST = 0.05  # fraction of the motor limit a servo holding still draws
LOAD_PER_RAD = 1.5  # load per radian of tracking error (a servo pushing against its target)
DEFAULT_CAMERA = {"front": ((1.0, 0.0, 0.6), (0.3, 0.0, 0.2))}  # name: (position m, looks at m)


def resolve_twin(robot: str, twin, clock: Clock | None, make_model, twin_kw: dict) -> tuple[ArmTwin | None, Clock]:
    """A driver's `twin=` argument: an ArmTwin given (its clock too), True (one built on `make_model()`), or False
    (the metal: None). Twin options without a twin to build are refused by name."""
    if twin_kw and (twin is False or isinstance(twin, ArmTwin)):
        raise ValueError(f"{robot}: {sorted(twin_kw)} are options of a twin the driver builds (twin=True)")
    if isinstance(twin, ArmTwin):
        return twin, clock or twin.clock
    clock = clock or Clock()
    return (ArmTwin(make_model(), clock, **twin_kw) if twin else None), clock


class ArmTwin:
    """The simulated arm. `joint_speed_rad_s`: the servos' top speed; `gripper_speed`: full stroke per second."""

    def __init__(
        self,
        model: ArmModel,
        clock: Clock | None = None,
        joint_speed_rad_s: float = 2.0,
        gripper_speed: float = 2.0,
        cameras: dict | None = None,
    ) -> None:
        self.arm = model
        self.clock = clock or Clock()
        self.speed = float(joint_speed_rad_s)
        self.gripper_speed = float(gripper_speed)
        self.lock = threading.RLock()
        self.q = model.home.copy()
        self.dq = np.zeros(model.dof)
        self.target = self.q.copy()
        self.gripper = 0.0
        self.gripper_target = 0.0
        self.torque_enabled = True
        self.fault: str | None = None
        self._t = self.clock.now()
        self._force: tuple[float, float] = (0.0, -1.0)  # (newtons, until clock time)
        self.commands: list[tuple[float, np.ndarray]] = []  # (time, target): what the driver sent, newest last
        self.cameras = dict(DEFAULT_CAMERA if cameras is None else cameras)
        self._scene: mujoco.MjModel | None = None
        self._renderers: dict[tuple[int, int, int], mujoco.Renderer] = {}

    # --- the servo model ----------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.clock.now()
        dt = now - self._t
        if dt <= 0:
            return
        self._t = now
        if self.torque_enabled and self.fault is None:
            step = np.clip(self.target - self.q, -self.speed * dt, self.speed * dt)
            self.q = self.arm.clip(self.q + step)
            self.dq = step / dt
            g_step = np.clip(self.gripper_target - self.gripper, -self.gripper_speed * dt, self.gripper_speed * dt)
            self.gripper = float(np.clip(self.gripper + g_step, 0.0, 1.0))
        else:
            self.dq = np.zeros_like(self.q)

    def set_target(self, q: np.ndarray, gripper: float | None = None) -> None:
        with self.lock:
            self._advance()
            self.target = self.arm.clip(np.asarray(q, float))
            if gripper is not None:
                self.gripper_target = float(np.clip(gripper, 0.0, 1.0))
            self.commands.append((self._t, self.target.copy()))
            del self.commands[:-1000]

    def read(self) -> tuple[float, np.ndarray, np.ndarray, float]:
        """(time, joints, joint velocities, gripper) now."""
        with self.lock:
            self._advance()
            return self._t, self.q.copy(), self.dq.copy(), self.gripper

    def load(self) -> np.ndarray:
        """Per-joint motor load as a fraction of the limit, an injected force showing on every joint."""
        with self.lock:
            self._advance()
            base = LOAD_AT_REST + LOAD_PER_RAD * np.abs(self.target - self.q) if self.torque_enabled else 0 * self.q
            return np.clip(base + self.force_n() / 50.0, 0.0, 1.0)

    def force_n(self) -> float:
        """External force at the end effector (N): what a Franka or UR estimates from its joint torques."""
        newtons, until = self._force
        return newtons if self.clock.now() <= until else 0.0

    # --- what a test does to the arm ----------------------------------------------------------
    def inject_force(self, newtons: float, duration_s: float = 0.5) -> None:
        """A contact: the force reads `newtons` for `duration_s` of clock time."""
        self._force = (float(newtons), self.clock.now() + duration_s)

    def move_by_hand(self, q: np.ndarray, gripper: float | None = None) -> None:
        """Someone moves the arm (its torque off, as when calibrating by hand)."""
        with self.lock:
            self._advance()
            self.q = self.arm.clip(np.asarray(q, float))
            self.target = self.q.copy()
            if gripper is not None:
                self.gripper = self.gripper_target = float(gripper)

    # --- pixels -------------------------------------------------------------------------------
    def _scene_model(self) -> mujoco.MjModel:
        if self._scene is None:
            spec = self.arm.spec.copy()
            world = spec.worldbody
            world.add_light(pos=[0.3, 0.0, 2.0], dir=[0.0, 0.0, -1.0])
            world.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[2.0, 2.0, 0.1], rgba=[0.55, 0.55, 0.5, 1])
            for name, (pos, target) in self.cameras.items():
                world.add_camera(name=name, pos=list(pos), quat=list(look_at_quat(pos, target)), fovy=60)
            self._scene = spec.compile()
            self._scene_data = mujoco.MjData(self._scene)
            self._scene_qadr = np.array([self._scene.joint(j).qposadr[0] for j in self.arm.joint_names])
        return self._scene

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """An RGB frame of the twin now from `camera` (fast-render preset)."""
        with self.lock:
            scene = self._scene_model()
            q = self.read()[1]
            self._scene_data.qpos[self._scene_qadr] = q
            mujoco.mj_kinematics(scene, self._scene_data)
            mujoco.mj_camlight(scene, self._scene_data)  # camera poses
            key = (threading.get_ident(), height, width)  # a GL context is used by the thread that made it
            if key not in self._renderers:
                self._renderers[key] = fast_renderer(scene, height, width)
            renderer = self._renderers[key]
            renderer.update_scene(self._scene_data, camera=camera)
            return renderer.render()

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
