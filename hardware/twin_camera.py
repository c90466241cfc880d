"""A camera of a twin's scene, behind the same `Camera` interface (capture thread, frame ages) as a USB camera."""

from __future__ import annotations

import time

from hardware.cameras import Camera, CameraError, CameraSpecError
from hardware.twin import ArmTwin


class TwinCamera(Camera):
    """A camera of the twin's scene on its own capture thread, like a USB camera: a dry run and the twin's tests go
    through the same frame-age and alignment checks as the metal. In a config:
    `{_target_: hardware.twin_camera.TwinCamera, view: front}`; the env passes its arm's twin."""

    host_options = ("twin",)

    def __init__(
        self,
        name: str,
        twin: ArmTwin | None,
        width: int = 128,
        height: int = 128,
        fps: float = 30.0,
        view: str = "front",
        **kw,
    ) -> None:
        if twin is None:
            raise CameraSpecError(
                f"camera '{name}': a twin camera needs the arm's twin: hardware.dry_run=true or env.driver.twin=true"
            )
        super().__init__(name, width, height, fps=fps, **kw)
        self.twin, self.view = twin, view
        self._next = 0.0

    def _open(self) -> None:
        if self.view not in self.twin.cameras:
            raise CameraError(
                f"camera '{self.name}': the twin has no view '{self.view}' (it has {', '.join(self.twin.cameras)})"
            )

    def _grab(self):
        delay = self._next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self._next = time.monotonic() + 1.0 / self.fps
        return self.twin.render(self.view, self.height, self.width), None

    def _close(self) -> None:
        pass
