"""Teach a reset once: a person drives the arm with a teleop device (a keyboard, a SpaceMouse, a leader arm) from where
an episode ends to where the next should start, and the task's pose along the way becomes the reset trajectory that
`env.reset_mode=taught env.reset_trajectory=<file>` replays under the safety layer (robo_rl/envs/resets.py)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from robo_rl.envs.resets import save_trajectory
from robo_rl.teleop.base import AXES, TeleopDevice


def record_reset_trajectory(
    env, device: TeleopDevice, path: str | Path, steps: int, every: int = 1, realtime: bool = False
) -> Path:
    """Record up to `steps` steps of `device` driving `env` (the device's whole action, or its end-effector motion and
    gripper); the task's `reset_pose()` is kept every `every` steps and at the end. The person ends it where an
    episode should start (a `success` press ends it early): the file's last waypoint is what the reset check then
    expects, and a replay reaches its first waypoint by a direct move. `realtime` paces the steps at the env's
    control rate, as a person drives."""
    if steps < 1 or every < 1:
        raise ValueError(
            f"a reset is taught over at least one step, one waypoint every `every` >= 1 ({steps}, {every})"
        )
    if not device.started:
        device.start()
    task = env.unwrapped
    kind, names = task.reset_pose_names()
    action_names = tuple(task.action_names)
    waypoints = [task.reset_pose()]
    action = np.zeros(env.action_space.shape, np.float32)
    if "gripper" in action_names:
        action[action_names.index("gripper")] = -1.0  # open until the device says otherwise
    period, next_tick = 1.0 / float(task.control_hz), time.monotonic()
    for step in range(1, steps + 1):
        device.observe(None, action)
        reading = device.read()
        action = _as_action(reading, action_names, action)
        env.step(np.clip(action, -1.0, 1.0))
        done = "success" in reading.events
        if step % every == 0 or step == steps or done:
            waypoints.append(task.reset_pose())
        if done:
            break
        if realtime:
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
    return save_trajectory(path, kind, list(names), waypoints)


def _as_action(reading, action_names: tuple[str, ...], last: np.ndarray) -> np.ndarray:
    """A device's reading as an env action: its whole action, else its motion per named axis (a gripper it does not
    command keeps its last command)."""
    if reading.action is not None:
        return np.asarray(reading.action, np.float32)
    out = np.zeros(len(action_names), np.float32)
    for i, name in enumerate(action_names):
        if name in AXES and reading.motion is not None:
            out[i] = reading.motion[AXES.index(name)]
        elif name == "gripper":
            out[i] = last[i] if reading.gripper is None else reading.gripper
    return out
