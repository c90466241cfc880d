"""`robo-rl launch <layout>`: the launchers are not part of the core; this command reaches them."""

from __future__ import annotations


def cmd_launch(args: list[str]) -> int:
    from launch.launcher import cmd_launch as launch_layout

    return launch_layout(args)
