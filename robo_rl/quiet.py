"""Library noise that is not the user's to fix, hidden by name: the loggers and messages below, no blanket silence.

Each entry is a line a library prints on import or on a fallback that works: robosuite's advice to write a private
macro file, its optional robosuite_models / mink (GR1 whole-body IK) imports and the path of the controller file
it loads for every env (once per process), PyOpenGL's "No OpenGL_accelerate"
(an optional speed-up of its Python wrappers; MuJoCo renders without it), and lerobot's 90-line torchcodec loading
traceback on its fallback to PyAV (robo_rl decodes LeRobot videos with PyAV and says so once:
robo_rl/data/datasets/lerobot_v3.py). Installed where a process configures its logging (the `robo-rl` entry point,
`setup_logging`, the evaluation workers); installing twice adds nothing.
"""

from __future__ import annotations

import logging

# logger name -> the level below which its records are noise (PyOpenGL says its optional accelerator is missing)
QUIET_LEVELS = {"OpenGL.acceleratesupport": logging.WARNING}

# logger name -> substrings of the messages dropped from it; other messages of that logger still show
QUIET_MESSAGES = {
    "robosuite_logs": (
        "No private macro file found",
        "It is recommended to use a private macro file",
        "scripts/setup_macros.py",
        "Could not import robosuite_models",
        "Could not load the mink-based whole-body IK",
        "Loading controller configuration from",  # at each env's creation: a path inside robosuite, not a choice
    ),
    "lerobot.utils.import_utils": (
        "libtorchcodec",
        "'torchcodec' is installed but cannot be loaded",
        "'torchcodec' is not available in your platform",
    ),
}


class DropMessages(logging.Filter):
    """Drops a logger's records whose message contains one of `needles`."""

    def __init__(self, needles: tuple[str, ...]) -> None:
        super().__init__()
        self.needles = needles

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(n in text for n in self.needles)


def quiet_library_noise() -> None:
    """Set the named loggers' levels and filter the named messages; idempotent. (None of these is a Python warning:
    a child run with -W default shows none, so no warnings filter is installed.)"""
    for name, level in QUIET_LEVELS.items():
        logger = logging.getLogger(name)
        if logger.level < level:
            logger.setLevel(level)
    for name, needles in QUIET_MESSAGES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in logger.filters):
            logger.addFilter(DropMessages(needles))
