"""`robo-rl launch <layout>`: the processes a layout names (launch/layout.py: learner, actors, GUI, critic server)
started on this workstation or over SSH, each with its log in `<run>/logs/<name>.log`, watched with one status line
each; a crashed actor is restarted, a learner crash or its finished run ends the launch, Ctrl-C stops them all.

The format of a layout and when to use which launcher: launch/layouts/README.md. `launch/ray_launcher.py` places the
same processes on a Ray cluster through the same `Supervisor`.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from launch.layout import (
    OPTION_PREFIX,
    Layout,
    LayoutError,
    Process,
    layout_names,
    load_layout,
    merge_overrides,
    override_key,
    split_options,
)

START_ORDER = ("critic", "gui", "learner", "actor")  # servers first: actors find them up (they would reconnect anyway)

TRANSPORT_PORTS = ("transport.data_port", "transport.weights_port", "transport.ctrl_port")
GUI_PORTS = ("gui.zmq_port", "gui.port")
CRITIC_PORT = "critic"  # `robo-rl critic serve port=`: not a config key, so not passed to the other processes
GUI_PAGE_PORT = 8765  # the page a person types in: kept when free
SEED_STRIDE = 1000  # actor i runs seed + i * SEED_STRIDE, as `robo-rl train train.actors=N` does
EXIT_STOPPED = 130  # a process that stopped on purpose (Ctrl-C, an e-stop, the safety layer): never restarted
MAX_BACKOFF_S = 30.0  # restart delays double from restart_backoff_s up to this
TERM_GRACE_S = 5.0  # after SIGTERM, this long before SIGKILL
END_GRACE_S = 10.0  # after the learner's run is done, actors get this long to end by themselves
POLL_S = 0.2  # how often processes are checked
STATUS_EVERY_S = 1.0  # status lines redrawn this often on a terminal
PLAIN_STATUS_EVERY_S = 10.0  # and printed this often into a log or pipe (besides every change of state)
PLAIN_WIDTH = 160  # status line width when not on a terminal
LOG_TAIL_BYTES = 4096  # read from the end of a log for its last line
PROBE_TIMEOUT_S = 0.5  # a TCP connect to the learner's ctrl port: it is up once that port accepts

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
CHILD_ENV = {"PYTHONUNBUFFERED": "1"}  # logs written as they happen
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# ---- the processes' command lines -----------------------------------------------------------------------------------


@dataclass
class Network:
    """Where each server binds and is reached; the defaults (None) keep the config's loopback binds."""

    learner_address: str | None = None
    gui_address: str | None = None
    critic_address: str = "127.0.0.1"
    keys_dirs: dict[str, str] = field(default_factory=dict)  # process name -> its CURVE keys folder


def process_args(
    layout: Layout, proc: Process, overrides: list[str], ports: dict, net: Network, run_dir: Path | None, base_seed: int
) -> list[str]:
    """The `robo-rl <role> ...` arguments of one process: the layout's shared overrides, the command line's, the
    process's own, then what the launch decides (ports, run folder, actor id and seed, addresses, keys)."""
    keys_dir = net.keys_dirs.get(proc.name)
    if proc.role == "critic":  # its own options, not config overrides: model=<folder> [host=] [port=] [keys_dir=]
        given = {override_key(o) for o in proc.overrides}
        extra = [f"port={ports[CRITIC_PORT]}"] if "port" not in given else []
        extra += [f"host={net.critic_address}"] if "host" not in given else []
        extra += [f"keys_dir={keys_dir}"] if keys_dir and "keys_dir" not in given else []
        return ["critic", "serve", *proc.overrides, *extra]
    chosen = [f"{k}={v}" for k, v in ports.items() if "." in k]
    mine = merge_overrides(layout.overrides, overrides, proc.overrides)
    keys = {override_key(o) for o in mine}
    launch = ["logger.progress=false", *chosen]
    if run_dir is not None and (proc.role == "learner" or (proc.role == "actor" and proc.host is None)):
        launch.append(f"run_dir={run_dir}")  # one run folder for all; an actor elsewhere has no such folder
    if net.learner_address:
        launch.append(f"transport.host={net.learner_address}")
    if net.gui_address:
        launch.append(f"gui.zmq_host={net.gui_address}")
    if keys_dir:
        launch.append(f"transport.curve_keys_dir={keys_dir}")
    if proc.role == "actor":
        launch.append(f"actor.id={proc.name}")
        if "seed" not in {override_key(o) for o in proc.overrides}:
            launch.append(f"seed={base_seed + SEED_STRIDE * (proc.actor_index or 0)}")
        if layout.of_role("gui"):
            launch.append("gui.enabled=true")
        critics = layout.of_role("critic")
        if critics and "reward.model" not in keys:
            port = dict(o.split("=", 1) for o in critics[0].overrides).get("port", ports.get(CRITIC_PORT))
            launch += ["reward=model", f"reward.model=tcp://{net.critic_address}:{port}"]
    return [proc.role, *merge_overrides(mine, launch)]


def choose_ports(layout: Layout, overrides: list[str], host: str = "127.0.0.1") -> dict:
    """A free port for each link the layout uses, chosen once per launch; a port given in the overrides is kept."""
    from robo_rl.transport.link import free_ports

    given = {override_key(o) for o in [*layout.overrides, *overrides]}
    keys = [*TRANSPORT_PORTS]
    if layout.of_role("gui"):
        keys += GUI_PORTS
    if layout.of_role("critic"):
        keys.append(CRITIC_PORT)
    keys = [k for k in keys if k not in given]
    ports = dict(zip(keys, free_ports(len(keys), host), strict=True))
    if "gui.port" in ports and _port_free(GUI_PAGE_PORT, host):
        ports["gui.port"] = GUI_PAGE_PORT  # the address a person has bookmarked, when nothing else holds it
    return ports


def _port_free(port: int, host: str) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port (the learner binds its ports before anything else)."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


# ---- SSH: pure command builders (tested for their exact argv), then their use -----------------------------------


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


# ---- processes ------------------------------------------------------------------------------------------------------


def _child_setup() -> Callable[[], None]:
    """A preexec hook: signals unblocked (a Ray worker's thread blocks SIGINT, and a child would inherit that), and
    on Linux SIGTERM (a clean stop) to the child if the launcher itself is killed."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: the hook only calls it
    except (OSError, AttributeError):
        prctl = None
    pr_set_pdeathsig = 1

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        if prctl is not None:
            prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return setup


def last_line(path: Path) -> str:
    """The last non-blank line of a log (a progress bar's last redraw counts), without terminal escapes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [ANSI.sub("", s).strip() for s in re.split(r"[\r\n]", text)]
    return next((s for s in reversed(lines) if s), "")


class LocalProcess:
    """One OS process in its own process group (so a stop reaches its children), output appended to its log."""

    def __init__(self, argv: list[str], log_path: Path, cwd: str | None = None) -> None:
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**os.environ, **CHILD_ENV},
                start_new_session=True,
                preexec_fn=_child_setup(),
            )
        self.pid = self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def last_line(self) -> str:
        return last_line(self.log_path)


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


# ---- supervision ----------------------------------------------------------------------------------------------------


@dataclass
class Slot:
    """One process of the layout over the launch: its current OS process and what happened to it."""

    proc: Process
    args: list[str]
    log: Path
    handle: object | None = None
    state: str = "waiting"  # waiting | running | restarting | stopping | exited | crashed
    code: int | None = None
    restarts: int = 0
    restart_at: float = 0.0
    stopping: bool = False
    pids: list[int] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.handle is not None and self.code is None

    def label(self, now: float) -> str:
        if self.state == "restarting":
            return f"restarting in {max(0.0, self.restart_at - now):.0f}s"
        if self.state in ("exited", "crashed"):
            return f"{self.state}({self.code})"
        return self.state


class LearnerProgress:
    """The learner's env steps and updates, read as they are appended to its metrics.jsonl."""

    def __init__(self, path: Path | None, total: int | None) -> None:
        self.path, self.total, self.offset, self.text = path, total, 0, ""

    def read(self) -> str:
        if self.path is None or not self.path.exists():
            return self.text
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        data = data[: data.rfind(b"\n") + 1]  # whole lines only
        self.offset += len(data)
        for line in data.splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("kind") == "learner":
                total = f"/{self.total}" if self.total else ""
                self.text = f"env steps {m.get('env_steps')}{total}, updates {m.get('updates')}"
        return self.text


class StatusBoard:
    """One line per process: name, pid, state, restarts, (the learner's progress,) the last line of its log.
    Redrawn in place about once a second on a terminal; elsewhere printed on every change of state."""

    def __init__(self, slots: list[Slot], progress: LearnerProgress, out=None) -> None:
        self.slots, self.progress, self.out = slots, progress, out or sys.stdout
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.drawn, self.last_draw, self.last_key = 0, 0.0, None
        self.start = time.monotonic()

    def lines(self, now: float) -> list[str]:
        width = os.get_terminal_size(self.out.fileno()).columns if self.tty else PLAIN_WIDTH
        name_w = max(len(s.proc.name) for s in self.slots)
        state_w = max(len(s.label(now)) for s in self.slots)
        out = []
        for s in self.slots:
            pid = s.pids[-1] if s.pids else "-"
            extra = self.progress.read() if s.proc.role == "learner" else ""
            log = s.handle.last_line() if s.handle is not None else ""
            text = f"{s.proc.name:<{name_w}}  pid {pid!s:>7}  {s.label(now):<{state_w}}  restarts {s.restarts}"
            text += f"  {extra}" if extra else ""
            out.append((text + (f" | {log}" if log else ""))[: width - 1])
        return out

    def draw(self, force: bool = False) -> None:
        now = time.monotonic()
        key = [(s.state, s.pids[-1:], s.restarts) for s in self.slots]
        due = now - self.last_draw >= (STATUS_EVERY_S if self.tty else PLAIN_STATUS_EVERY_S)
        if not (force or due or key != self.last_key):
            return
        lines = self.lines(now)
        if self.tty:
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            self.out.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        else:
            self.out.write(f"[launch {now - self.start:.0f} s]\n" + "".join(f"  {line}\n" for line in lines))
        self.out.flush()
        self.drawn, self.last_draw, self.last_key = len(lines), now, key

    def say(self, text: str) -> None:
        """A message above the status lines (they are redrawn below it)."""
        if self.tty and self.drawn:
            self.out.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0
        self.out.write(text + "\n")
        self.out.flush()
        self.last_key = None


class Supervisor:
    """Starts the slots (servers, the learner, then, once its ports accept, the actors), restarts a crashed one
    (non-zero exit it did not cause, except EXIT_STOPPED) up to `max_restarts` with doubling delays, ends the launch
    when the learner ends (exit 0: done; otherwise: a failure) or no actor is left, and stops everything on Ctrl-C
    or SIGTERM: SIGINT to each process group, SIGTERM after `stop_timeout_s`, SIGKILL after TERM_GRACE_S."""

    def __init__(
        self,
        layout: Layout,
        slots: list[Slot],
        start: Callable[[Slot], object],
        learner_up: Callable[[], bool],
        board: StatusBoard,
    ) -> None:
        self.layout, self.slots, self.start_fn, self.learner_up, self.board = layout, slots, start, learner_up, board
        self.learner = next(s for s in slots if s.proc.role == "learner")
        self.actors = [s for s in slots if s.proc.role == "actor"]
        self.learner_ready = False
        self.ended_at: float | None = None  # when the learner finished its run

    def run(self) -> int:
        previous = _signals_interrupt()
        try:
            try:
                for role in ("critic", "gui", "learner"):
                    for s in self.slots:
                        if s.proc.role == role:
                            self._start(s)
                code = self._watch()
            except KeyboardInterrupt:
                self.board.say("interrupted: stopping every process (the learner writes a checkpoint) ...")
                code = EXIT_STOPPED
            self._stop_all()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.board.draw(force=self.board.tty)  # the final states (a log already has every change)
        return code

    def _watch(self) -> int:
        while True:
            now = time.monotonic()
            for s in self.slots:
                self._check(s, now)
            if not self.learner_ready and self.learner.alive and self.learner_up():
                self.learner_ready = True
                for s in self.actors:
                    self._start(s)
            code = self._outcome(now)
            if code is not None:
                return code
            self.board.draw()
            time.sleep(POLL_S)

    def _start(self, s: Slot) -> None:
        if s.handle is not None:  # a restart: mark it in the log the new process appends to
            try:
                with open(s.log, "a") as f:
                    f.write(f"\n--- launch: restart {s.restarts} at {dt.datetime.now():%H:%M:%S} (exit {s.code}) ---\n")
            except OSError:  # a log on another Ray node
                pass
        s.handle, s.code, s.state, s.stopping = self.start_fn(s), None, "running", False
        s.pids.append(s.handle.pid)

    def _check(self, s: Slot, now: float) -> None:
        if s.state == "restarting" and now >= s.restart_at and self.ended_at is None:
            s.restarts += 1
            self._start(s)
            return
        if not s.alive or (code := s.handle.poll()) is None:
            return
        s.code = code
        s.handle.signal(signal.SIGKILL)  # whatever it started in its group goes with it (its pid is not reused yet)
        if s.stopping or code in (0, EXIT_STOPPED) or s.proc.role == "learner":
            s.state = "exited" if s.stopping or code in (0, EXIT_STOPPED) else "crashed"
            if s.proc.role == "learner" and code == 0:
                self.ended_at = now
            return
        if s.proc.restart == "on-failure" and s.restarts < self.layout.max_restarts and self.ended_at is None:
            delay = min(MAX_BACKOFF_S, self.layout.restart_backoff_s * 2**s.restarts)
            s.state, s.restart_at = "restarting", now + delay
            self.board.say(f"{s.proc.name} exited with code {code}: restarting in {delay:.0f} s ({s.log})")
        else:
            s.state = "crashed"
            self.board.say(f"{s.proc.name} exited with code {code}: {s.handle.last_line()} ({s.log})")

    def _outcome(self, now: float) -> int | None:
        learner = self.learner
        if learner.code is not None and learner.code != 0:
            self.board.say(
                f"the learner exited with code {learner.code}: {learner.handle.last_line()} "
                f"({learner.log}); stopping the others"
            )
            return EXIT_STOPPED if learner.code == EXIT_STOPPED else 1
        if self.ended_at is not None:  # the run is done: actors end by themselves, the rest is stopped
            if all(not s.alive for s in self.actors) or now - self.ended_at > END_GRACE_S:
                return 0
            return None
        active = [s for s in self.actors if s.alive or s.state in ("waiting", "restarting")]
        failed = [s for s in self.actors if s.code not in (None, 0)]
        if self.actors and not active and failed:  # all data sources gone: the learner would wait forever
            self.board.say(
                f"no actor is left running ({failed[-1].proc.name}: exit {failed[-1].code}): stopping "
                "the learner (it writes a checkpoint)"
            )
            return 1
        return None

    def _stop_all(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to whatever still runs; a second Ctrl-C skips to SIGKILL."""
        for s in self.slots:
            if s.state in ("waiting", "restarting"):
                s.state = "exited" if s.code is not None else "not started"
        try:
            for sig, wait_s in ((signal.SIGINT, self.layout.stop_timeout_s), (signal.SIGTERM, TERM_GRACE_S)):
                live = [s for s in self.slots if s.alive]
                if not live:
                    break
                for s in live:
                    s.stopping, s.state = True, "stopping"
                    s.handle.signal(sig)
                deadline = time.monotonic() + wait_s
                while any(s.alive for s in live) and time.monotonic() < deadline:
                    for s in live:
                        self._check(s, time.monotonic())
                    self.board.draw()
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.board.say("interrupted again: killing every process")
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):  # the kills below are quick and must all happen
                signal.signal(sig, signal.SIG_IGN)
            for s in self.slots:
                if s.alive:
                    s.stopping = True
                    s.handle.signal(signal.SIGKILL)
                    while s.handle.poll() is None:
                        time.sleep(POLL_S / 4)
                    self._check(s, time.monotonic())


def _signals_interrupt() -> dict:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the launcher (the children have their own process groups, so a
    terminal's Ctrl-C reaches only us and we stop them in order)."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for s in previous:
        signal.signal(s, interrupt)
    return previous


# ---- the command ----------------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """A checked layout with its run folder: what every launcher (local, SSH, Ray) starts from."""

    layout: Layout
    overrides: list[str]
    run_dir: Path
    base_seed: int
    total_env_steps: int


def prepare(layout: Layout, overrides: list[str], ports: dict) -> Prepared:
    """Check every process's config (a bad override is one line naming the process) before anything starts, then
    make the run folder (the learner's: a new one, or `run_dir=` / `resume=` as given) with its logs/ folder."""
    from robo_rl.config import ConfigError, config_hash, load_config
    from robo_rl.runs import new_run_dir

    cfgs = {}
    for p in layout.processes:
        if p.role == "critic":
            if not any(o.startswith("model=") for o in p.overrides):
                raise LayoutError(f"layout {layout.name}: {p.name}: a critic needs overrides: [model=<folder>]")
            continue
        args = process_args(layout, p, overrides, ports, Network(), None, 0)
        try:
            cfgs[p.name] = load_config(args[1:])
        except ConfigError as e:
            raise LayoutError(f"layout {layout.name}: {p.name}: {e}") from None
    cfg = cfgs[layout.learner.name]
    for p in layout.of_role("actor"):
        if config_hash(cfgs[p.name]) != config_hash(cfg):  # the learner would refuse its hello: say why now
            keys = ", ".join(_differing_keys(cfgs[p.name], cfg)[:3])
            raise LayoutError(
                f"layout {layout.name}: {p.name}: its env/policy config differs from the learner's in "
                f"{keys}: the learner would refuse it (config hash)"
            )
    if cfg.resume:
        run_dir = Path(cfg.resume)
    elif cfg.run_dir:
        run_dir = Path(cfg.run_dir)
    else:
        run_dir = new_run_dir(cfg.outputs_dir, cfg.name)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return Prepared(layout, overrides, run_dir, int(cfg.seed), int(cfg.train.total_env_steps))


def _differing_keys(a, b) -> list[str]:
    from omegaconf import OmegaConf

    from robo_rl.config import SHARED_KEYS

    def flat(node, prefix: str) -> dict:
        if not isinstance(node, dict):
            return {prefix: node}
        return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}.{key}").items()}

    fa, fb = (
        {k: v for key in SHARED_KEYS for k, v in flat(OmegaConf.to_container(c[key], resolve=True), key).items()}
        for c in (a, b)
    )
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))


def make_slots(prep: Prepared, ports: dict, net: Network) -> list[Slot]:
    order = {role: i for i, role in enumerate(START_ORDER)}
    procs = sorted(prep.layout.processes, key=lambda p: order[p.role])
    slots = [
        Slot(
            p,
            process_args(prep.layout, p, prep.overrides, ports, net, prep.run_dir, prep.base_seed),
            prep.run_dir / "logs" / f"{p.name}.log",
        )
        for p in procs
    ]
    record = {
        "layout": prep.layout.name,
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "ports": ports,
        "processes": {s.proc.name: {"role": s.proc.role, "host": s.proc.host, "args": s.args} for s in slots},
    }
    (prep.run_dir / "launch.json").write_text(json.dumps(record, indent=1))  # what ran, to repeat it by hand
    return slots


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


def arg_value(args: list[str], key: str) -> str:
    """The value a process's arguments give `key` (every port is in them: chosen, or pinned by an override)."""
    return [o.split("=", 1)[1] for o in args if override_key(o) == key][-1]


def cmd_launch(args: list[str], out=None) -> int:
    """robo-rl launch <layout or path.yaml> [launch.<setting>=<value> ...] [overrides ...]"""
    out = out or sys.stdout
    if not args or args[0].startswith(("-", OPTION_PREFIX)) or "=" in args[0]:
        names = layout_names()
        width = max(len(n) for n in names)
        print(
            "usage: robo-rl launch <layout or path.yaml> [launch.<setting>=<value> ...] [overrides ...]\n\nlayouts:\n"
            + "\n".join(f"  {n:<{width}}  {text}" for n, text in names.items()),
            file=out,
        )
        return 2
    options, overrides = split_options(args[1:])
    on_ray = bool(options.pop("ray", False))
    layout = load_layout(args[0], options)
    if on_ray:
        from launch.ray_launcher import launch_on_ray

        code = launch_on_ray(layout, overrides, out)
    else:
        ports = choose_ports(layout, overrides, "0.0.0.0" if layout.distributed else "127.0.0.1")
        prep = prepare(layout, overrides, ports)
        print(f"run folder: {prep.run_dir} (logs in {prep.run_dir / 'logs'}); Ctrl-C stops every process", file=out)
        code = launch_local(prep, ports, out)
    print(f"launch: {'done' if code == 0 else 'stopped' if code == EXIT_STOPPED else 'failed'}", file=out)
    return code
