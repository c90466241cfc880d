"""The intervention page's block (`gui`): one typed field per setting, with its default, range and meaning, the only
place they are written. `launch/conf/config.yaml` does not repeat them; `gui=true` is short for `gui.enabled=true`.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_rl.configs.typed import FIXED, setting

DEADMAN = ("pause", "continue")  # what an actor does when the watching or controlling page goes away
AUTO_VIEW_SIZE = 256  # the view a simulator renders when the policy has no camera: a person must see what they steer


@dataclass
class GuiConfig:
    """`robo-rl gui` and the actors' link to it (`robo-rl train gui=true` starts it beside the run)."""

    enabled: bool = setting(
        False, "actors talk to the GUI process, a web device joining the human's devices (`gui=true` for short)"
    )
    host: str = setting("127.0.0.1", "the page's HTTP/WebSocket bind address (off loopback a token is required)")
    port: int = setting(8765, "the page's HTTP port", low=1, high=65535)
    token: str | None = setting(None, "the page's access token (?token=...; off loopback one is made when null)")
    zmq_host: str = setting(
        "127.0.0.1", "the GUI's socket for actors (off loopback: CURVE keys, transport.curve_keys_dir)"
    )
    zmq_port: int = setting(5590, "the GUI's port for actors", low=1, high=65535)
    frame_hz: float = setting(10.0, "camera frames sent per second per actor (0: none)", low=0, high=120)
    view_size: int | None = setting(
        None,
        f"pixels of a larger rendered view, square, rendered in the control loop while a page watches (null: "
        f"{AUTO_VIEW_SIZE} in simulation when the observation has no camera, else none; 0: none)",
        low=0,
        high=2048,
    )
    state_hz: float = setting(
        20.0, "page updates per second at most (each as soon as an actor has news)", low=0.5, high=60
    )
    jpeg_quality: int = setting(90, "JPEG quality of the camera tiles", low=10, high=100)
    deadman: str | None = setting(
        None,
        "when the last or the controlling page goes away, or the GUI dies: pause (the robot holds until a page "
        "resumes) | continue (the policy carries on) | null: pause where the env drives a robot, continue in "
        "simulation (a closed tab does not stop a simulated run)",
        choices=DEADMAN,
    )
    deadman_timeout_s: float = setting(2.0, "the GUI's silence that counts as gone, seconds", above=0)
    deadman_grace_s: float = setting(
        1.0, "how long the last page may be gone (a reload) before the dead man applies, seconds", low=0
    )


BLOCKS: dict[str, dict[str | None, type]] = {"gui": {FIXED: GuiConfig}}
