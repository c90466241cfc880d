"""Processes on other machines over SSH: pure command builders (tested for their exact argv), the CURVE keys
deployed to each machine, and the handle of a process started through a local `ssh` client."""

from __future__ import annotations

import shlex
import signal
import socket
import subprocess
from pathlib import Path

from launch.launcher.command_lines import Network
from launch.launcher.processes import LOG_TAIL_BYTES, LocalProcess
from launch.layout import Layout, LayoutError

REMOTE_PID_MARK = "launch: remote pid "  # the first line of a process started over SSH: its pid there
REMOTE_KEYS_DIR = ".robo_rl_keys"  # under remote_dir: each launch's CURVE keys on the other machines
SSH_CONNECT_TIMEOUT_S = 10
SSH_ALIVE_INTERVAL_S = 5  # a dead link is noticed within a few of these
SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",
    "-o",
    f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
    "-o",
    f"ServerAliveInterval={SSH_ALIVE_INTERVAL_S}",
)
SSH_COMMAND_TIMEOUT_S = 60.0  # mkdir, scp, kill over SSH


def ssh_argv(host: str, remote_command: str) -> list[str]:
    return ["ssh", *SSH_OPTIONS, host, remote_command]


def remote_process_command(remote_dir: str, python: str, args: list[str], env: dict[str, str]) -> str:
    """The shell line a process runs on another machine: in the checkout, its pid first (to signal it later)."""
    assignments = [f"{k}={v}" for k, v in env.items()]
    command = shlex.join(["env", *assignments, python, "-m", "robo_rl.cli", *args])
    return f"cd {shlex.quote(remote_dir)} && echo {shlex.quote(REMOTE_PID_MARK)}$$ && exec {command}"


def scp_argv(files: list[str | Path], host: str, remote_path: str) -> list[str]:
    return ["scp", *SSH_OPTIONS, "-p", *(str(f) for f in files), f"{host}:{remote_path}/"]


def ssh_signal_argv(host: str, pid: int, sig: int) -> list[str]:
    return ssh_argv(host, f"kill -{signal.Signals(sig).name.removeprefix('SIG')} {int(pid)}")


def remote_keys_dir(layout: Layout, run_dir: Path) -> str:
    return f"{layout.remote_dir.rstrip('/')}/{REMOTE_KEYS_DIR}/{run_dir.name}"


def key_deploy_commands(layout: Layout, keys_dir: Path, run_dir: Path) -> list[list[str]]:
    """Per machine: make its keys folder, copy only the keys its processes need (an actor: its own pair and the
    learner's public key; a server: the learner's pair and the authorised actors' public keys)."""
    from robo_rl.transport.security import AUTHORIZED_DIR, LEARNER_KEY

    remote = remote_keys_dir(layout, run_dir)
    commands = []
    for host in dict.fromkeys(p.host for p in layout.processes if p.host):
        procs = [p for p in layout.processes if p.host == host]
        files = [keys_dir / f"{LEARNER_KEY}.key"]
        authorized = []
        for p in procs:
            if p.role == "actor":
                files += [keys_dir / f"{p.name}.key", keys_dir / f"{p.name}.key_secret"]
            elif not authorized:
                files.append(keys_dir / f"{LEARNER_KEY}.key_secret")
                authorized = sorted((keys_dir / AUTHORIZED_DIR).glob("*.key"))
        q = shlex.quote(remote)
        commands.append(ssh_argv(host, f"mkdir -p {q}/{AUTHORIZED_DIR} && chmod 700 {q}"))
        commands.append(scp_argv(list(dict.fromkeys(files)), host, remote))
        if authorized:
            commands.append(scp_argv(authorized, host, f"{remote}/{AUTHORIZED_DIR}"))
    return commands


def ssh_network(layout: Layout, run_dir: Path) -> Network:
    """Processes on other machines: every server binds its machine's address (never all interfaces) with CURVE keys
    generated once into <run>/keys and copied to each machine before its processes start."""
    from robo_rl.transport.security import generate_keys

    keys_dir = run_dir / "keys"
    if not (keys_dir / "learner.key_secret").exists():
        generate_keys(keys_dir, [p.name for p in layout.of_role("actor")])
    net = Network()
    net.learner_address = machine_address(layout, layout.learner.host)
    guis, critics = layout.of_role("gui"), layout.of_role("critic")
    if guis:
        net.gui_address = machine_address(layout, guis[0].host)
    if critics:
        net.critic_address = machine_address(layout, critics[0].host)
    for p in layout.processes:
        net.keys_dirs[p.name] = remote_keys_dir(layout, run_dir) if p.host else str(keys_dir)
    for argv in key_deploy_commands(layout, keys_dir, run_dir):
        _run_checked(argv)
    return net


def machine_address(layout: Layout, host: str | None) -> str:
    """The address other machines reach `host` at (user@machine → machine); this machine's is `address:`, else the
    one its traffic to the first other machine leaves from."""
    if host:
        return host.rpartition("@")[2]
    if layout.address:
        return layout.address
    other = next(p.host for p in layout.processes if p.host).rpartition("@")[2]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((other, 22))  # a UDP connect sends nothing: it only picks the route
            return s.getsockname()[0]
    except OSError as e:
        raise LayoutError(
            f"cannot tell this machine's address toward {other} ({e}): set address: in the layout"
        ) from None


def _run_checked(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SSH_COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LayoutError(f"{shlex.join(argv[:1] + argv[-2:])}: {e}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LayoutError(f"{shlex.join([argv[0], *argv[-2:]])} failed ({done.returncode}): {why}")


class SSHProcess(LocalProcess):
    """A process on another machine through a local `ssh` client: stopped with `kill` over SSH, then by closing
    the connection."""

    def __init__(self, host: str, argv: list[str], log_path: Path) -> None:
        self.host = host
        self.log_start = Path(log_path).stat().st_size if Path(log_path).exists() else 0
        super().__init__(argv, log_path)
        self.remote_pid: int | None = None

    def signal(self, sig: int) -> None:
        if sig != signal.SIGKILL and self.poll() is None and self._remote_pid() is not None:
            try:
                subprocess.run(
                    ssh_signal_argv(self.host, self.remote_pid, sig), capture_output=True, timeout=SSH_COMMAND_TIMEOUT_S
                )
                return
            except (OSError, subprocess.TimeoutExpired):
                pass
        super().signal(sig)

    def _remote_pid(self) -> int | None:
        if self.remote_pid is None:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_start)
                for line in f.read(LOG_TAIL_BYTES).decode(errors="replace").splitlines():
                    if line.startswith(REMOTE_PID_MARK):
                        self.remote_pid = int(line[len(REMOTE_PID_MARK) :])
                        break
        return self.remote_pid
