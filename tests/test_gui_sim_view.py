"""The intervention page's rendered view in simulation: a state-only sim shows the robot by default (the person asked to
take over must see what they steer); a sim whose policy has cameras, or a robot, shows its cameras and nothing more.
A real actor and learner, the GUI app under uvicorn, Debian's chromium driven by Playwright (as tests/test_gui.py)."""

from __future__ import annotations

import base64
import io
import time

import numpy as np
import pytest
from PIL import Image

from robo_rl.configs.gui import AUTO_VIEW_SIZE
from robo_rl.gui.actor_view import VIEW_LOOP_SHARE, view_size_for
from tests.test_gui import (  # noqa: F401 - browser, chromium: fixtures
    POINT_WITH_CAMERA,
    GuiRun,
    browser,
    chromium,
    open_page,
)
from tests.waiting import wait_until

ROW = '.actor[data-actor="actor-0"]'


class SimRun(GuiRun):
    """`tests/test_gui.py`'s run (the GUI app, a learner and a real-time actor) with the gui block's view at its
    default and no demonstrations; every call of the env's `render` is timed."""

    def __init__(self, tmp_path, *task):
        self.renders: list[tuple[float, float]] = []  # (start, duration) of each render call, monotonic seconds
        super().__init__(tmp_path, "demos.num_episodes=0", task=task, view_size=None)
        assert self.cfg.gui.view_size is None, "the default is what this file tests"

    def _spy_on_env(self):
        super()._spy_on_env()
        env = self.actor.env.unwrapped
        render = env.render

        def timed_render(*args, **kwargs):
            start = time.monotonic()
            frame = render(*args, **kwargs)
            self.renders.append((start, time.monotonic() - start))
            return frame

        env.render = timed_render

    @property
    def actor_state(self):
        return self.hub.actors.get("actor-0")


@pytest.fixture
def sim_run(tmp_path):
    runs = []

    def start(*task):
        runs.append(SimRun(tmp_path / f"run{len(runs)}", *task))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


def decoded(img) -> np.ndarray:
    src = img.get_attribute("src")
    assert src.startswith("data:image/jpeg;base64,"), src[:40]
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(src.partition(",")[2]))).convert("RGB"))


def test_a_state_only_sim_shows_a_rendered_view_while_a_page_watches(sim_run, browser):  # noqa: F811 (the fixture imported above)
    run = sim_run("env=pick_cube")  # the default task, state only
    wait_until(lambda: run.actor.sent_steps >= 5, timeout_s=30, what="the actor to step")
    assert run.renders == [], "nobody watches: nothing is rendered"

    page = open_page(browser, run, "alice")
    view = page.locator(f"{ROW} img.view")
    view.wait_for(timeout=45000)  # the first render under a suite at load 10+: seconds
    first = decoded(view)
    assert first.shape == (AUTO_VIEW_SIZE, AUTO_VIEW_SIZE, 3)
    assert first.std() > 20, "the view is not blank"
    r, g, b = (first[..., i].astype(int) for i in range(3))
    table = (r > 120) & (r > g) & (g > b) & (r - b > 30) & (r - b < 100)  # the tan table top: the front camera's scene
    assert 0.3 < table.mean() < 0.95, table.mean()
    wait_until(lambda: not np.array_equal(decoded(view), first), timeout_s=45, what="the view to follow the robot")
    assert page.locator(f"{ROW} img.camera").count() == 0  # the policy has no camera

    # the view's cost stays under its share of the control loop: each render (after the first, which builds the
    # renderer) waits out its cost / share
    renders = wait_until(lambda: run.renders[1:] if len(run.renders) >= 3 else None, what="three renders")
    for (start, took), (next_start, _) in zip(renders, renders[1:], strict=False):
        assert next_start - start >= took / VIEW_LOOP_SHARE - 1e-3, (start, took, next_start)
    assert page.js_errors == []


def test_a_sim_with_a_camera_shows_it_and_no_extra_view(sim_run, browser):  # noqa: F811 (the fixture imported above)
    run = sim_run(*POINT_WITH_CAMERA)
    page = open_page(browser, run, "bob")
    tile = page.locator(f'{ROW} img.camera[data-camera="top"]')
    tile.wait_for(timeout=45000)
    first = tile.screenshot()
    wait_until(lambda: tile.screenshot() != first, what="a few camera frames")
    assert page.locator(f"{ROW} img.view").count() == 0
    assert run.actor_state.views == {} and run.renders == []


def test_the_default_view_is_for_a_sim_without_cameras_and_an_explicit_size_wins():
    from hardware.arm import VirtualClock
    from hardware.env import ArmEnv
    from hardware.so101 import SO101Driver
    from sim.pick_cube import PickCubeEnv

    state_only, with_camera = PickCubeEnv(), PickCubeEnv(cameras=("front",), image_size=32)
    robot = ArmEnv(SO101Driver(twin=True, clock=VirtualClock()))  # no camera, but a robot: it shows its cameras
    try:
        assert view_size_for(None, state_only) == AUTO_VIEW_SIZE
        assert view_size_for(None, with_camera) == 0 and view_size_for(None, robot) == 0
        assert view_size_for(0, state_only) == 0 and view_size_for(64, with_camera) == 64
        assert view_size_for(48, robot) == 48
        state_only.reset(seed=0)
        assert state_only.render(size=AUTO_VIEW_SIZE).shape == (AUTO_VIEW_SIZE, AUTO_VIEW_SIZE, 3)
        assert state_only.render().shape == (128, 128, 3), "eval videos keep the env's image_size"
    finally:
        for env in (state_only, with_camera, robot):
            env.close()
