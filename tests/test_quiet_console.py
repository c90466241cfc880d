"""A quiet console: the library lines a user cannot act on (robosuite's macro file and optional robots, PyOpenGL's
missing accelerator, lerobot's torchcodec traceback) never reach a robo_rl process's log, and those libraries' other
messages still do (robo_rl/quiet.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from robo_rl.quiet import DropMessages, quiet_library_noise

# a process that configures its logging as every robo_rl process does, then imports the noisy libraries
CHILD = """
import logging, types
from robo_rl.commands.common import setup_logging
setup_logging(types.SimpleNamespace(logger=types.SimpleNamespace(level="INFO")))
import robosuite
from robosuite.controllers import load_composite_controller_config
load_composite_controller_config(robot="Panda")  # what each robosuite env's creation logs the path of
import OpenGL.GL
from lerobot.utils.import_utils import get_safe_default_video_backend
print("backend", get_safe_default_video_backend())
logging.getLogger("robosuite_logs").warning("a robosuite problem the user should see")
logging.getLogger("OpenGL.acceleratesupport").warning("an OpenGL problem the user should see")
"""

NOISE = (
    "No OpenGL_accelerate",
    "private macro file",
    "setup_macros.py",
    "robosuite_models",
    "mink-based whole-body IK",
    "Loading controller configuration",
    "torchcodec",
    "Traceback",
)


def test_a_robo_rl_process_prints_no_library_noise_and_keeps_the_rest():
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONWARNINGS": "default"}  # every warning shown once, as with -W
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env, check=True
    )
    text = out.stdout + out.stderr
    assert "backend pyav" in text  # lerobot did fall back (the traceback's occasion happened)
    assert [line for line in text.splitlines() if any(n in line for n in NOISE)] == []
    assert "a robosuite problem the user should see" in text  # only the named messages are dropped
    assert "an OpenGL problem the user should see" in text


def test_installing_twice_adds_one_filter_per_logger():
    quiet_library_noise()
    quiet_library_noise()
    for name in ("robosuite_logs", "lerobot.utils.import_utils"):
        assert sum(isinstance(f, DropMessages) for f in logging.getLogger(name).filters) == 1
    assert logging.getLogger("OpenGL.acceleratesupport").level == logging.WARNING


def test_uv_run_neither_recompiles_the_environment_nor_says_so_and_ci_compiles_it_once():
    """`[tool.uv] compile-bytecode` made every `uv run` re-walk all of site-packages and print "Bytecode compiled 24929
    files" (3-12 s: uv issue #12202); the environment is compiled once where it is installed (.ci/run) instead."""
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[1]
    uv_settings = tomllib.loads((root / "pyproject.toml").read_text()).get("tool", {}).get("uv", {})
    assert "compile-bytecode" not in uv_settings, "every `uv run` would recompile and print it"
    syncs = [line for line in (root / ".ci" / "run").read_text().splitlines() if line.startswith("uv sync")]
    assert syncs and all("--compile-bytecode" in line for line in syncs), syncs
