"""The environment interface shared by simulators (`sim/`) and robots (`hardware/`)."""

from robo_rl.envs.base import (
    DISCRETE_GRIPPER_DEADBAND,
    ENDED_BY,
    INFO_KEYS,
    RobotEnv,
    RobotWrapper,
    SafetyStop,
    check_action,
    check_observation,
    gripper_target,
    make_observation_space,
)

__all__ = [
    "make_observation_space",
    "DISCRETE_GRIPPER_DEADBAND",
    "ENDED_BY",
    "INFO_KEYS",
    "RobotEnv",
    "RobotWrapper",
    "SafetyStop",
    "check_action",
    "check_observation",
    "gripper_target",
]
