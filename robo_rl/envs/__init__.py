"""The environment interface shared by simulators (`sim/`) and robots (`hardware/`)."""

from robo_rl.envs.base import (
    ENDED_BY,
    INFO_KEYS,
    RobotEnv,
    RobotWrapper,
    SafetyStop,
    check_action,
    check_observation,
    make_observation_space,
)

__all__ = ["make_observation_space", "ENDED_BY", "INFO_KEYS", "RobotEnv", "RobotWrapper", "SafetyStop", "check_action",
           "check_observation"]
