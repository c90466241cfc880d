"""Readers of real teleop devices (keyboard, gamepad, SpaceMouse, leader arm).

The interface they implement is `robo_rl.teleop`."""
