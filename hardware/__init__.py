"""Real robots, cameras and teleop devices behind the same `robo_rl.envs.RobotEnv` interface as `sim/`."""
