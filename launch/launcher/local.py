"""The local placement: the layout's processes on this machine, those with a `host:` over SSH."""

from __future__ import annotations

import sys

from launch.launcher.board import LearnerProgress, StatusBoard
from launch.launcher.command_lines import Network, arg_value
from launch.launcher.ports import port_open
from launch.launcher.prepare import Prepared
from launch.launcher.processes import CHILD_ENV, LocalProcess
from launch.launcher.slots import Slot, make_slots
from launch.launcher.ssh import SSHProcess, remote_process_command, ssh_argv, ssh_network
from launch.launcher.supervisor import Supervisor


def launch_local(prep: Prepared, ports: dict, out=None) -> int:
    """Run the layout on this machine (processes with a `host:` over SSH) until the learner ends or Ctrl-C."""
    layout = prep.layout
    net = ssh_network(layout, prep.run_dir) if layout.distributed else Network()
    slots = make_slots(prep, ports, net)

    def start(s: Slot):
        if s.proc.host:
            line = remote_process_command(layout.remote_dir, layout.remote_python, s.args, CHILD_ENV)
            return SSHProcess(s.proc.host, ssh_argv(s.proc.host, line), s.log)
        return LocalProcess([sys.executable, "-m", "robo_rl.cli", *s.args], s.log)

    probe_host = net.learner_address or "127.0.0.1"
    ctrl_port = int(arg_value(next(s for s in slots if s.proc.role == "learner").args, "transport.ctrl_port"))
    metrics = None if layout.learner.host else prep.run_dir / "metrics.jsonl"
    board = StatusBoard(slots, LearnerProgress(metrics, prep.total_env_steps), out)
    return Supervisor(layout, slots, start, lambda: port_open(probe_host, ctrl_port), board).run()
