"""The pick task's MuJoCo scene: the gym_hil Panda + 2F-85 loaded in place, turned into a gravity-compensated arm on
joint position servos, with the table, the cube(s), optional end walls, lights and the front and wrist cameras added
with `MjSpec` (sim/pick_cube.py is the env that steps it)."""

from __future__ import annotations

import functools
import importlib.resources

import mujoco
import numpy as np

from robo_rl.envs.render import decimate_visual_meshes, look_at_quat

TABLE_HALF_SIZE_M = (0.45, 0.5, 0.02)
TABLE_CENTER_XY_M = (0.45, 0.0)  # the arm's base sits on the table top at the world origin
REST_QPOS = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])  # Panda "ready" pose: IK null-space target
ARM_KP = np.array([9000.0, 9000.0, 7000.0, 7000.0, 4000.0, 4000.0, 4000.0])  # N·m/rad, position servos
ARM_DAMPING_RATIO = 1.0  # critically damped at REST_QPOS: no overshoot, settles within one control step
ARM_TARGET_TIMECONST_S = 0.02  # servo targets are low-pass filtered: smooth motion without per-substep Python
# `end_walls`: two low walls across the table whose inner faces keep a cube's centre where the arm's top-down grasp
# reaches (x 0.30-0.80 m at table height from its ready posture; nearer the base only a folded posture near the joint
# limits does). A cube squeezed out of half-closed fingers leaves at up to 1.4 m/s and can come to rest beside the base
# (x 0.11-0.23 m: bench/pick_squeeze.py); all 10 human calls of a 1.75-hour unattended run were cubes at rest beyond
# that reach (x 0.19-0.24 or 0.80-0.85 m). A real cell keeps its objects in a bin for the same reason.
END_WALL_INNER_X_M = (0.28, 0.81)  # near and far inner faces: the cube's centre then lies in x 0.30-0.79 m
END_WALL_HEIGHT_M = 0.08  # a launched cube flew with its centre up to 7 cm high
END_WALL_HALF_THICKNESS_M = 0.01
STIFF_CONTACT_SOLIMP = [0.95, 0.99, 0.001, 0.5, 2.0]  # cube and table: millimetre penetration even when the arm presses


def panda_xml_path() -> str:
    """The Panda + 2F-85 MJCF shipped by gym_hil (Apache-2.0); loaded in place, never copied."""
    return str(importlib.resources.files("gym_hil") / "assets" / "panda.xml")


@functools.lru_cache(maxsize=4)
def build_pick_scene(
    physics_dt_s: float,
    image_size: int,
    cube_half_size_m: float,
    cube_mass_kg: float,
    extra_cubes: tuple = (),
    end_walls: bool = False,
    mesh_detail: float = 1.0,
) -> mujoco.MjModel:
    """The compiled scene, cached per setting (an env copies it); `mesh_detail` < 1 decimates the visual meshes."""
    spec = mujoco.MjSpec.from_file(panda_xml_path())
    spec.option.timestep = physics_dt_s
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST  # implicit servo damping: large stable dt
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC  # with impratio, a grasp holds without noslip iterations
    spec.option.impratio = 10.0
    spec.option.noslip_iterations = 0
    for geom in list(spec.geoms):  # collide with primitives only: keep the finger pad boxes, drop mesh hulls
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH and geom.contype:
            spec.delete(geom)
    for sensor in list(spec.sensors):  # the observation is computed directly; sensors would cost every substep
        spec.delete(sensor)
    for camera in list(spec.cameras):
        spec.delete(camera)
    for body in spec.bodies:
        if body.name not in ("world", "link0"):
            body.gravcomp = 1.0  # gravity compensated, as on the real arm: servos only track
    for actuator in spec.actuators[:7]:  # torque motors -> joint position servos (gains set after compile)
        torque_limit = actuator.ctrlrange.copy()  # the Panda's joint torque limits, 87 / 12 N·m
        actuator.ctrlrange, actuator.ctrllimited = [0.0, 0.0], 0
        actuator.set_to_position(kp=1.0, inheritrange=1.0)
        actuator.forcerange, actuator.forcelimited = torque_limit, 1
        actuator.dyntype = mujoco.mjtDyn.mjDYN_FILTEREXACT
        actuator.dynprm[0] = ARM_TARGET_TIMECONST_S

    world = spec.worldbody
    box = mujoco.mjtGeom.mjGEOM_BOX
    spec.add_material(name="table", rgba=[0.72, 0.62, 0.5, 1], specular=0.05)
    world.add_geom(
        name="table",
        type=box,
        size=TABLE_HALF_SIZE_M,
        material="table",
        solimp=STIFF_CONTACT_SOLIMP,
        pos=[*TABLE_CENTER_XY_M, -TABLE_HALF_SIZE_M[2]],
    )
    if end_walls:
        t, h = END_WALL_HALF_THICKNESS_M, END_WALL_HEIGHT_M / 2
        near, far = END_WALL_INNER_X_M
        for name, centre_x in (("near_wall", near - t), ("far_wall", far + t)):  # each outside its inner face
            world.add_geom(
                name=name,
                type=box,
                size=[t, TABLE_HALF_SIZE_M[1], h],
                material="table",
                solimp=STIFF_CONTACT_SOLIMP,
                pos=[centre_x, TABLE_CENTER_XY_M[1], h],
            )
    world.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[2, 2, 0.1], pos=[0, 0, -0.75], rgba=[0.3, 0.32, 0.35, 1]
    )  # catches a cube pushed off the table
    for i, (name, rgba) in enumerate((("cube", (0.85, 0.12, 0.1, 1)), *extra_cubes)):  # extra: (name, rgba) each
        spec.add_material(name=name, rgba=list(rgba), specular=0.2)
        cube = world.add_body(name=name, pos=[0.5, 0.1 * i, cube_half_size_m])
        cube.add_freejoint(name=name)
        cube.add_geom(
            name=name,
            type=box,
            size=[cube_half_size_m] * 3,
            mass=cube_mass_kg,
            material=name,
            solimp=STIFF_CONTACT_SOLIMP,
        )
    world.add_light(
        name="top",
        pos=[0.5, 0.0, 1.5],
        dir=[0, 0, -1],
        castshadow=False,
        diffuse=[0.5, 0.5, 0.5],
        specular=[0.1, 0.1, 0.1],
    )
    world.add_light(
        name="side",
        pos=[1.2, -0.8, 0.8],
        dir=[-0.6, 0.6, -0.5],
        castshadow=False,
        diffuse=[0.3, 0.3, 0.3],
        specular=[0.0, 0.0, 0.0],
    )
    front_pos = [1.05, 0.0, 0.5]
    world.add_camera(name="front", pos=front_pos, quat=look_at_quat(front_pos, [0.5, 0.0, 0.1]), fovy=50)
    wrist_pos = [-0.07, 0.0, 0.02]  # in the gripper base frame, whose +z points from the wrist to the fingertips
    spec.body("base").add_camera(
        name="wrist", pos=wrist_pos, quat=look_at_quat(wrist_pos, [0, 0, 0.2], (-1, 0, 0)), fovy=70
    )

    spec.visual.global_.offwidth = spec.visual.global_.offheight = image_size
    spec.visual.quality.offsamples = 0  # no multi-sample anti-aliasing
    spec.visual.quality.shadowsize = 0
    spec.visual.headlight.ambient = [0.3, 0.3, 0.3]
    spec.visual.headlight.diffuse = [0.3, 0.3, 0.3]
    spec.visual.headlight.specular = [0.0, 0.0, 0.0]
    decimate_visual_meshes(spec, mesh_detail)  # the arm's visual meshes: what a CPU-rendered image costs
    model = spec.compile()

    # Damping from the joint-space inertia at the rest pose, so each joint is critically damped there.
    data = mujoco.MjData(model)
    data.qpos[:7] = REST_QPOS
    mujoco.mj_forward(model, data)
    inertia = np.array([data.qM[model.dof_Madr[i]] for i in range(7)])  # diagonal, armature included
    kv = 2.0 * ARM_DAMPING_RATIO * np.sqrt(ARM_KP * inertia)
    model.actuator_gainprm[:7, 0] = ARM_KP
    model.actuator_biasprm[:7, :3] = np.stack([np.zeros(7), -ARM_KP, -kv], axis=1)
    return model
