"""Real robots, cameras and teleop devices behind the same `robo_rl.envs.RobotEnv` interface as `sim/`."""

import os
import sys

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # the twins render offscreen; must be set before mujoco is imported
