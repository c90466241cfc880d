"""One kinematic model per arm, from its MJCF: forward kinematics and damped-least-squares IK.

A driver that sends joint commands solves its IK with this model, and the arm's MuJoCo twin is built from the same
file, so a policy trained or checked on the twin sees the same end-effector frame as on metal. Poses are in the
arm's base frame: position in metres, orientation as a unit quaternion (w, x, y, z).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import mujoco
import numpy as np

IK_DAMPING = 0.02  # DLS damping: bounded joint steps near singular poses
IK_MAX_JOINT_STEP_RAD = 0.2  # per iteration: the linearisation holds
IK_POS_TOL_M = 1e-3
IK_ROT_TOL_RAD = 0.02


@dataclasses.dataclass
class IKResult:
    q: np.ndarray  # joint positions (rad), within the model's limits
    ok: bool  # the target was reached within tolerance
    pos_err_m: float
    rot_err_rad: float  # 0.0 when no orientation was asked for


def robosuite_robot_xml(robot: str) -> Path:
    """The arm MJCF robosuite ships (`panda`, `ur5e`, `iiwa`, ...), found without importing robosuite."""
    spec = importlib.util.find_spec("robosuite")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("robosuite is not installed: it ships the Panda and UR5e arm models the twins use")
    path = Path(spec.submodule_search_locations[0]) / "models" / "assets" / "robots" / robot / "robot.xml"
    if not path.exists():
        raise FileNotFoundError(f"robosuite has no arm model '{robot}' ({path})")
    return path


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(4)
    mujoco.mju_mulQuat(out, np.asarray(a, float), np.asarray(b, float))
    return out


def quat_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """The rotation (axis × angle, rad, world frame) that takes `current` to `target`."""
    conj = np.empty(4)
    mujoco.mju_negQuat(conj, np.asarray(current, float))
    diff = quat_mul(target, conj)
    if diff[0] < 0:  # the short way round
        diff = -diff
    vel = np.empty(3)
    mujoco.mju_quat2Vel(vel, diff, 1.0)
    return vel


def rotvec_to_quat(rotvec: np.ndarray) -> np.ndarray:
    quat = np.empty(4)
    rotvec = np.asarray(rotvec, float)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    mujoco.mju_axisAngle2Quat(quat, rotvec / angle, angle)
    return quat


def quat_to_rotvec(quat: np.ndarray) -> np.ndarray:
    return quat_error(np.asarray(quat, float), np.array([1.0, 0.0, 0.0, 0.0]))


class ArmModel:
    """FK and IK of the arm joints named `joints` to the site `ee_site` of an MJCF (a path or an `MjSpec`); with
    `ee_body`, that site is added to the body at `ee_offset` (m, the body's frame).

    Joints not named (a gripper's) stay at 0 in the model. `home` is the joint configuration the arm resets to and
    the IK's null-space rest pose for redundant arms.
    """

    def __init__(
        self,
        mjcf: str | Path | mujoco.MjSpec,
        joints: list[str],
        ee_site: str,
        home: np.ndarray | list[float],
        name: str = "arm",
        ee_body: str | None = None,
        ee_offset: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> None:
        self.name = name
        self.spec = mjcf if isinstance(mjcf, mujoco.MjSpec) else mujoco.MjSpec.from_file(str(mjcf))
        if ee_body is not None:  # the tool point: a site on the flange body (an arm file may have none there)
            body = self.spec.body(ee_body)
            if body is None:
                raise ValueError(f"{name}: the model has no body '{ee_body}'")
            body.add_site(name=ee_site, pos=list(ee_offset), size=[0.01, 0.01, 0.01])
        self.model = self.spec.compile()
        self.data = mujoco.MjData(self.model)
        self.joint_names = tuple(joints)
        try:
            ids = [self.model.joint(j).id for j in joints]
            self.site = self.model.site(ee_site).id
        except KeyError as e:
            raise ValueError(f"{name}: the model has no joint/site {e}") from None
        self.qadr = np.array([self.model.jnt_qposadr[i] for i in ids])
        self.dofadr = np.array([self.model.jnt_dofadr[i] for i in ids])
        limited = np.array([self.model.jnt_limited[i] for i in ids], bool)
        ranges = np.array([self.model.jnt_range[i] for i in ids], float)
        self.lower = np.where(limited, ranges[:, 0], -np.pi)
        self.upper = np.where(limited, ranges[:, 1], np.pi)
        self.home = np.asarray(home, float)
        if self.home.shape != (len(joints),):
            raise ValueError(f"{name}: home has {self.home.size} joints, the arm {len(joints)}")
        self.dof = len(joints)

    def _set(self, q: np.ndarray) -> None:
        self.data.qpos[self.qadr] = q
        mujoco.mj_kinematics(self.model, self.data)

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """End-effector (position m, quaternion wxyz) at joints `q`."""
        self._set(np.asarray(q, float))
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
        return self.data.site_xpos[self.site].copy(), quat

    def jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positional and rotational site Jacobians (3 × dof each) at `q`."""
        self._set(np.asarray(q, float))
        mujoco.mj_comPos(self.model, self.data)
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        mujoco.mj_jacSite(self.model, self.data, jacp, jacr, self.site)
        return jacp[:, self.dofadr], jacr[:, self.dofadr]

    def clip(self, q: np.ndarray, margin: float = 0.0) -> np.ndarray:
        return np.clip(q, self.lower + margin, self.upper - margin)

    def ik(
        self,
        pos: np.ndarray,
        quat: np.ndarray | None,
        q0: np.ndarray,
        iters: int = 30,
        rot_weight: float = 0.5,
        nullspace_gain: float = 0.05,
    ) -> IKResult:
        """Joints reaching (pos, quat) from `q0` (warm start), within limits. `quat=None`: position only; an arm
        with fewer than 6 joints weighs orientation by `rot_weight` and reaches what its joints allow."""
        q = self.clip(np.asarray(q0, float))
        pos = np.asarray(pos, float)
        pos_err = rot_err = np.inf
        for _ in range(iters):
            cur_pos, cur_quat = self.fk(q)
            e_pos = pos - cur_pos
            pos_err = float(np.linalg.norm(e_pos))
            jacp, jacr = self.jacobian(q)
            e_rot = np.zeros(3) if quat is None else quat_error(quat, cur_quat)
            rot_err = float(np.linalg.norm(e_rot))
            if quat is None or self.dof < 6:  # position first; what joints are left over hold the orientation
                err, jac = e_pos, jacp
            else:
                err = np.concatenate([e_pos, rot_weight * e_rot])
                jac = np.vstack([jacp, rot_weight * jacr])
            if pos_err < IK_POS_TOL_M and (rot_err < IK_ROT_TOL_RAD or jac is jacp):
                break
            jjt = jac @ jac.T + IK_DAMPING**2 * np.eye(jac.shape[0])
            pinv = jac.T @ np.linalg.inv(jjt)
            dq = pinv @ err
            if self.dof > jac.shape[0]:  # in the primary task's null space: the orientation, else home
                null = np.eye(self.dof) - pinv @ jac
                if quat is not None:
                    jr = jacr @ null
                    dq += null @ (jr.T @ np.linalg.solve(jr @ jr.T + IK_DAMPING**2 * np.eye(3), e_rot - jacr @ dq))
                else:
                    dq += null @ (nullspace_gain * (self.home - q))
            scale = np.max(np.abs(dq)) / IK_MAX_JOINT_STEP_RAD
            q = self.clip(q + (dq / scale if scale > 1 else dq))
        reached = pos_err < 5 * IK_POS_TOL_M and (quat is None or self.dof < 6 or rot_err < 5 * IK_ROT_TOL_RAD)
        if quat is not None and self.dof < 6:
            if not reached:  # the orientation pulled a joint into its limit: the position alone, then
                result = self.ik(pos, None, q0, iters, rot_weight, nullspace_gain)
                result.rot_err_rad = float(np.linalg.norm(quat_error(quat, self.fk(result.q)[1])))
                return result
            rot_err = float(np.linalg.norm(quat_error(quat, self.fk(q)[1])))
        return IKResult(q, bool(reached), pos_err, rot_err)

    def reachable(self, pos: np.ndarray, samples: int = 4, seed: int = 0) -> bool:
        """Whether some joint configuration puts the end-effector at `pos` (IK from home and a few random starts)."""
        rng = np.random.default_rng(seed)
        starts = [self.home] + [rng.uniform(self.lower, self.upper) for _ in range(samples)]
        return any(self.ik(pos, None, q0, iters=60).ok for q0 in starts)
