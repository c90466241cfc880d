"""`robo-rl launch <layout>`: the processes a layout names (launch/layout.py: learner, actors, GUI, critic server)
started on this workstation or over SSH, each with its log in `<run>/logs/<name>.log`, watched with one status line
each; a crashed actor is restarted, a learner crash or its finished run ends the launch, Ctrl-C stops them all.

The format of a layout and when to use which launcher: launch/layouts/README.md. One idea a module, lowest first:
`ports`, `command_lines` (each process's arguments), `processes` (a local process and its log), `ssh` (other
machines), `prepare` (checks and the run folder), `slots`, `board` (status lines), `supervisor` (start, restart,
stop), `local` (this machine's placement), `command` (`cmd_launch`). `launch/ray_launcher.py` places the same
processes on a Ray cluster through the same `Supervisor`, importing only the modules below `command`.
"""

from launch.launcher.board import LearnerProgress, StatusBoard
from launch.launcher.command import cmd_launch
from launch.launcher.command_lines import SEED_STRIDE, Network, arg_value, process_args
from launch.launcher.local import launch_local
from launch.launcher.ports import CRITIC_PORT, GUI_PORTS, TRANSPORT_PORTS, choose_ports, port_open
from launch.launcher.prepare import Prepared, prepare
from launch.launcher.processes import CHILD_ENV, LocalProcess, last_line
from launch.launcher.slots import START_ORDER, Slot, make_slots
from launch.launcher.ssh import (
    REMOTE_PID_MARK,
    SSHProcess,
    key_deploy_commands,
    machine_address,
    remote_keys_dir,
    remote_process_command,
    scp_argv,
    ssh_argv,
    ssh_network,
    ssh_signal_argv,
)
from launch.launcher.supervisor import EXIT_STOPPED, Supervisor
from launch.layout import LayoutError

__all__ = [
    "CHILD_ENV",
    "CRITIC_PORT",
    "EXIT_STOPPED",
    "GUI_PORTS",
    "REMOTE_PID_MARK",
    "SEED_STRIDE",
    "START_ORDER",
    "TRANSPORT_PORTS",
    "LayoutError",
    "LearnerProgress",
    "LocalProcess",
    "Network",
    "Prepared",
    "SSHProcess",
    "Slot",
    "StatusBoard",
    "Supervisor",
    "arg_value",
    "choose_ports",
    "cmd_launch",
    "key_deploy_commands",
    "last_line",
    "launch_local",
    "machine_address",
    "make_slots",
    "port_open",
    "prepare",
    "process_args",
    "remote_keys_dir",
    "remote_process_command",
    "scp_argv",
    "ssh_argv",
    "ssh_network",
    "ssh_signal_argv",
]
