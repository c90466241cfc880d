"""`robo-rl doctor` and `robo-rl calibrate`: robot tools live with the drivers (`hardware/`); these commands reach
them, so the core never imports a driver itself."""

from __future__ import annotations


def cmd_doctor(args: list[str]) -> int:
    from hardware.doctor import cmd_doctor as check_workstation

    return check_workstation(args)


def cmd_calibrate(args: list[str]) -> int:
    from hardware.calibrate import cmd_calibrate as record_workspace

    return record_workspace(args)
