"""Simulated tasks behind the shared `robo_rl.envs.RobotEnv` interface, with scripted experts.

Plugged in by hydra `_target_` (e.g. `sim.pick_cube.PickCubeEnv`); the core never imports this package.
"""
