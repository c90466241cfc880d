"""The pick task's cameras draw the arm with decimated visual meshes (env.mesh_detail): the same physics, nearly the
same pixels, a third of the rendering cost on a CPU."""

import time

import numpy as np
import pytest

from robo_rl.envs.render import render_cameras
from sim.pick_cube import PickCubeEnv

ACTIONS = [np.array([0.6, 0.3, -0.8, 1.0], np.float32), np.array([-0.4, -0.5, 0.2, -1.0], np.float32)]


@pytest.fixture(scope="module")
def envs():
    full = PickCubeEnv(cameras=["front", "wrist"], image_size=64, mesh_detail=1.0)
    lod = PickCubeEnv(cameras=["front", "wrist"], image_size=64, mesh_detail=0.3)
    yield full, lod
    full.close()
    lod.close()


def test_decimated_meshes_leave_the_physics_as_it_was(envs):
    full, lod = envs
    a, b = full.model, lod.model
    assert b.mesh_facenum.sum() < 0.4 * a.mesh_facenum.sum()
    for field in ("body_mass", "body_inertia", "body_ipos", "body_iquat", "geom_contype", "geom_conaffinity"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    colliding = a.geom_contype != 0
    np.testing.assert_array_equal(a.geom_size[colliding], b.geom_size[colliding])
    for seed in range(2):
        full.reset(seed=seed)
        lod.reset(seed=seed)
        for step in range(8):
            full.step(ACTIONS[step % 2])
            lod.step(ACTIONS[step % 2])
            np.testing.assert_array_equal(full.data.qpos, lod.data.qpos)


def test_decimated_meshes_draw_nearly_the_same_images_for_a_third_of_the_cpu(envs):
    full, lod = envs
    diffs = []
    for seed in range(3):
        obs_full, _ = full.reset(seed=seed)
        obs_lod, _ = lod.reset(seed=seed)
        for step in range(4):
            obs_full, *_ = full.step(ACTIONS[step % 2])
            obs_lod, *_ = lod.step(ACTIONS[step % 2])
            for camera in ("front", "wrist"):
                diffs.append(np.abs(obs_full["images"][camera].astype(int) - obs_lod["images"][camera]).mean())
    assert np.mean(diffs) < 2.0, f"mean absolute pixel difference {np.mean(diffs):.2f} of 255"
    assert max(diffs) < 4.0

    def cpu_ms(env) -> float:  # CPU time, not wall time: a busy machine slows both alike
        renderer = env._renderer(64)
        render_cameras(renderer, env.data, env.camera_names)
        start = time.process_time()
        for _ in range(10):
            render_cameras(renderer, env.data, env.camera_names)
        return (time.process_time() - start) * 100

    assert cpu_ms(lod) < 0.6 * cpu_ms(full)


def test_mesh_detail_out_of_range_is_refused_by_name():
    from robo_rl.config import ConfigError, load_config

    with pytest.raises(ValueError, match="mesh_detail must be a share of the mesh faces in \\(0, 1\\], got 0"):
        PickCubeEnv(cameras=["front"], mesh_detail=0.0)
    with pytest.raises(ConfigError, match="mesh_detail"):
        load_config(["env=pick_cube", "env.mesh_detail=1.5"])


def test_an_env_without_cameras_keeps_the_full_meshes_for_its_videos(envs):
    full, _ = envs
    env = PickCubeEnv(mesh_detail=0.3)
    assert env.model.mesh_facenum.sum() == full.model.mesh_facenum.sum()
    env.close()
