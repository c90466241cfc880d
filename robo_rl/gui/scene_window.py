"""A desktop window showing the simulated scene to the person driving it (`robo-rl record` in simulation): the
keyboard and the other devices move the arm, and this is where the person sees it move."""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np

log = logging.getLogger(__name__)

DISPLAY_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")  # any of them: SDL can open a window


class SceneWindow:
    """The env's rendered scene (`env.unwrapped.render(size=...)`), square, redrawn by `show()` after each step."""

    def __init__(self, env, size: int, title: str) -> None:
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        with warnings.catch_warnings():  # pygame's own import-time deprecation notices are not the user's to fix
            warnings.simplefilter("ignore")
            import pygame
        self.pygame, self.env, self.size, self.open = pygame, env, size, True
        pygame.display.init()
        self.screen = pygame.display.set_mode((size, size))
        pygame.display.set_caption(title)

    def show(self) -> None:
        if not self.open:
            return
        try:
            frame = np.asarray(self.env.unwrapped.render(size=self.size), np.uint8)
        except Exception as e:  # noqa: BLE001 - an env without a sized render: no window, said once, the recording goes on
            log.warning("no window on the scene (%s: %s); gui.view_size=0 turns it off", type(e).__name__, e)
            self.close()
            return
        self.screen.blit(self.pygame.surfarray.make_surface(frame.swapaxes(0, 1)), (0, 0))
        self.pygame.display.flip()
        self.pygame.event.pump()  # a window whose events are never read is shown as not responding

    def close(self) -> None:
        self.open = False
        self.pygame.display.quit()


def open_scene_window(env, size: int, title: str, say=print) -> SceneWindow | None:
    """A window on the scene of a simulated env where a display exists; otherwise None, and one line saying why."""
    if size <= 0 or env.unwrapped.drives_robot:  # turned off, or a robot: the person watches the robot itself
        return None
    if not any(os.environ.get(v) for v in DISPLAY_VARIABLES):
        say("no display (DISPLAY is not set): the scene is not shown; record where a desktop shows a window")
        return None
    try:
        window = SceneWindow(env, size, title)
    except Exception as e:  # noqa: BLE001 - no window is no reason to stop a recording: said once
        say(f"no window on the scene ({type(e).__name__}: {e}); gui.view_size=0 turns it off")
        return None
    say(f"the scene: a {size}x{size} window (gui.view_size sets its side)")
    return window
