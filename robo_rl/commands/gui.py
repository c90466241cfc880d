"""`robo-rl gui`: the intervention page for running actors."""

from __future__ import annotations

from robo_rl.commands.common import setup_logging, sigterm_as_interrupt


def cmd_gui(overrides: list[str]) -> int:
    """The GUI process: actors connect to gui.zmq_host:zmq_port, pages to http://gui.host:gui.port/."""
    from robo_rl.config import load_config
    from robo_rl.gui.server import serve

    cfg = load_config(overrides)
    setup_logging(cfg)
    sigterm_as_interrupt()
    try:
        serve(cfg)
    except KeyboardInterrupt:
        pass
    return 0
