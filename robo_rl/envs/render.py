"""The fast-render preset every simulated task uses for its cameras: no multisampling, shadows,
reflections, skybox, fog or haze (software EGL rendering on a CPU pays for each of them)."""

from __future__ import annotations

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
