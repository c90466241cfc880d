"""The fast-render preset every simulated task uses for its cameras: no multisampling, shadows,
reflections, skybox, fog or haze (software EGL rendering on a CPU pays for each of them), and visual meshes with fewer
faces (`decimate_visual_meshes`: on a CPU, Mesa's llvmpipe transforms every vertex of every mesh for every image, so a
64x64 camera costs what the arm's 198k mesh faces cost, 26 ms an image on a 2-core machine)."""

from __future__ import annotations

import functools

import mujoco
import numpy as np

COSTLY_EFFECTS = ("SHADOW", "REFLECTION", "SKYBOX", "FOG", "HAZE")


def fast_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """A renderer for `model` with the costly effects off (sets the model's offscreen samples to 0)."""
    model.vis.quality.offsamples = 0
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, height)
    renderer = mujoco.Renderer(model, height, width)
    for effect in COSTLY_EFFECTS:
        renderer.scene.flags[getattr(mujoco.mjtRndFlag, f"mjRND_{effect}")] = False
    return renderer


def render_cameras(renderer: mujoco.Renderer, data: mujoco.MjData, cameras, scene_option=None) -> dict[str, np.ndarray]:
    """One uint8 HxWx3 image per named camera."""
    images = {}
    for name in cameras:
        renderer.update_scene(data, camera=name, scene_option=scene_option)
        images[name] = renderer.render()
    return images


def look_at_quat(pos, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Quaternion of a MuJoCo camera at `pos` looking at `target` (cameras look along their -z)."""
    z = np.asarray(pos, float) - np.asarray(target, float)
    z /= np.linalg.norm(z)
    x = np.cross(up, z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.stack([x, y, z], axis=1).ravel())
    return quat


def decimate_visual_meshes(spec: mujoco.MjSpec, keep: float) -> int:
    """Give every mesh geom of `spec` that takes no part in contacts (a visual geom) a mesh with about `keep` of its
    faces (quadric decimation, `fast_simplification`), in place; the number of faces left in all. Physics is
    untouched: collisions are the same and each body keeps the inertia the full meshes gave it (both checked by
    tests/test_render_detail.py). The decimated mesh is placed in the geom's body frame, so MuJoCo's re-centring of
    the new mesh cannot shift it."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"mesh detail {keep!r} is out of range: a share of the faces in (0, 1]")
    visual = [g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH and not g.contype and not g.conaffinity]
    if keep == 1.0 or not visual:
        return 0
    names = [g.name for g in visual]
    for i, geom in enumerate(visual):  # unnamed geoms get a name for the lookup below, then it is taken back
        geom.name = geom.name or f"__visual_{i}"
    model = spec.compile()
    for body in {g.parent.name: g.parent for g in visual}.values():  # its inertia as the full meshes gave it, kept
        if body.explicitinertial:  # given in the file: the geoms never counted
            continue
        b = model.body(body.name)
        body.mass, body.ipos, body.iquat, body.inertia = float(b.mass[0]), b.ipos, b.iquat, b.inertia
        body.explicitinertial = True
    used, faces_left = set(), 0
    for i, geom in enumerate(visual):
        g = model.geom(geom.name)
        mesh = model.mesh(int(g.dataid[0]))
        vert, face = _decimated(mesh.name, _mesh_arrays(model, int(mesh.id)), keep)
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, g.quat)
        in_body = vert @ rot.reshape(3, 3).T + g.pos
        spec.add_mesh(name=f"{mesh.name}__lod{i}", uservert=in_body.ravel().tolist(), userface=face.ravel().tolist())
        used.add(geom.meshname)
        geom.meshname, geom.pos, geom.quat = f"{mesh.name}__lod{i}", [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]
        geom.name = names[i]
        faces_left += len(face)
    still_used = {g.meshname for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH}
    for mesh in list(spec.meshes):
        if mesh.name in used and mesh.name not in still_used:
            spec.delete(mesh)
    return faces_left


def _mesh_arrays(model: mujoco.MjModel, i: int) -> tuple[np.ndarray, np.ndarray]:
    v0, nv, f0, nf = model.mesh_vertadr[i], model.mesh_vertnum[i], model.mesh_faceadr[i], model.mesh_facenum[i]
    return np.array(model.mesh_vert[v0 : v0 + nv], np.float64), np.array(model.mesh_face[f0 : f0 + nf], np.int32)


@functools.lru_cache(maxsize=256)
def _decimated_cached(name: str, vert_bytes: bytes, face_bytes: bytes, keep: float) -> tuple[np.ndarray, np.ndarray]:
    import fast_simplification

    vert = np.frombuffer(vert_bytes, np.float64).reshape(-1, 3)
    face = np.frombuffer(face_bytes, np.int32).reshape(-1, 3)
    if len(face) < 64:  # a handful of faces: nothing to gain
        return vert, face
    # one vertex per position (a compiled mesh repeats a vertex along its normals' seams): decimating an unwelded
    # mesh opens cracks along every seam
    vert, index = np.unique(np.round(vert, 7), axis=0, return_inverse=True)
    face = index.reshape(-1)[face].astype(np.int32)
    face = face[(face[:, 0] != face[:, 1]) & (face[:, 1] != face[:, 2]) & (face[:, 0] != face[:, 2])]
    out_vert, out_face = fast_simplification.simplify(vert.copy(), face.copy(), target_reduction=1.0 - keep)
    if len(out_vert) < 4 or len(out_face) < 4:  # decimated to nothing: MuJoCo needs a solid; the welded mesh it is
        return vert, face
    return np.asarray(out_vert, np.float64), np.asarray(out_face, np.int32)


def _decimated(name: str, arrays: tuple[np.ndarray, np.ndarray], keep: float) -> tuple[np.ndarray, np.ndarray]:
    """A mesh's (vertices, faces) with about `keep` of its faces, remembered per process (the same mesh, built again
    with another time step or image size, is not decimated again)."""
    vert, face = arrays
    return _decimated_cached(name, vert.tobytes(), face.tobytes(), float(keep))
