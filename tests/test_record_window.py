"""`robo-rl record` in simulation shows the person recording the rendered scene in a window where a display exists
(SDL's dummy video driver stands in for one here), and says how to get one where none does (issue 47)."""

import numpy as np
import pytest

from robo_rl.cli import main

RECORD = [
    "env=point_reach",
    "human=sim",
    "episodes=1",
    "actor.realtime=false",
    "human.devices.0.patience=1",
    "human.devices.0.reaction_delay=0",
    "human.devices.0.hold_steps=100",
    "logger.progress=false",
    "gui.view_size=96",
]


@pytest.fixture
def display(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a display that needs no X server


def test_the_window_shows_the_scene_after_each_step(display, tmp_path, capsys, monkeypatch):
    import sys

    from robo_rl.gui.scene_window import SceneWindow

    shown = []
    show = SceneWindow.show

    def show_and_compare(self):  # the window's pixels against the env's own render of the same moment
        show(self)
        on_screen = self.pygame.surfarray.array3d(self.pygame.display.get_surface()).swapaxes(0, 1)
        shown.append(np.array_equal(on_screen, self.env.unwrapped.render(size=96)))

    monkeypatch.setattr(SceneWindow, "show", show_and_compare)
    assert main(["record", str(tmp_path / "demos"), *RECORD]) == 0
    out = capsys.readouterr().out
    assert "kept 1 episodes" in out and "the scene: a 96x96 window" in out
    assert len(shown) >= 3 and all(shown), "every step's scene is what the window shows"
    assert not sys.modules["pygame"].display.get_init(), "the window closes with the session"


def test_without_a_display_record_says_so_once_and_records(tmp_path, capsys, monkeypatch):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    assert main(["record", str(tmp_path / "demos"), *RECORD]) == 0
    out = capsys.readouterr().out
    assert "kept 1 episodes" in out
    assert out.count("no display (DISPLAY is not set): the scene is not shown") == 1
