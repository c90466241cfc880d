"""Readers of real teleop devices (keyboard, gamepad, SpaceMouse, leader arm); the interface they implement is robo_rl.teleop."""
