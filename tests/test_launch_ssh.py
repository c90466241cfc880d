"""`robo-rl launch` with `host:` processes over real OpenSSH: a `sshd` on a loopback port with a host key and a login
key the test generates, the `two_robot_pcs` layout pointed at it (two "robot computers", 127.0.0.1 and localhost),
CURVE keys copied with `scp`, the actors started with `ssh -o BatchMode=yes` in a checkout whose path needs quoting,
the learner and GUI bound to this machine's own network address with CURVE, the actors stopped with `kill -INT` over
SSH on Ctrl-C, and no process left behind."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from launch.layout import LAYOUTS_DIR
from tests.test_launch import ROOT, gone, pids, run_dir_of, start_launch, wait_for

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
CLIENTS = all(shutil.which(c) for c in ("ssh", "scp", "ssh-keygen"))
pytestmark = pytest.mark.skipif(
    SSHD is None or not CLIENTS,
    reason="no OpenSSH server/client here (apt-get install openssh-server openssh-client; .ci/run does)",
)
SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_ed25519
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
# the test's files are not owned the way sshd's checks want for a login's home; the keys are the test's own
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
# OpenSSH 9's scp speaks SFTP
Subsystem sftp internal-sftp
LogLevel VERBOSE
"""
CLIENT_CONFIG = """Host 127.0.0.1 localhost
  Port {port}
  IdentityFile {d}/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile {d}/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
"""
# ssh and scp themselves, reading the test's client config (a user's ~/.ssh/config; ssh takes ~ from passwd, not $HOME)
WITH_CONFIG = '#!/bin/sh\nexec {real} -F {config} "$@"\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd(tmp_path):
    """A real sshd on a free loopback port; returns the folder holding `ssh`/`scp` that log in to it and its log."""
    d, port = tmp_path / "sshd", free_port()
    d.mkdir()
    for name in ("host_ed25519", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d / name], check=True)
    shutil.copy(d / "id_ed25519.pub", d / "authorized_keys")
    host_key = (d / "host_ed25519.pub").read_text().split()[:2]
    (d / "known_hosts").write_text("".join(f"[{h}]:{port} {' '.join(host_key)}\n" for h in ("127.0.0.1", "localhost")))
    (d / "sshd_config").write_text(SSHD_CONFIG.format(port=port, d=d))
    (d / "ssh_config").write_text(CLIENT_CONFIG.format(port=port, d=d))
    bin_dir = d / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "scp"):
        (bin_dir / tool).write_text(WITH_CONFIG.format(real=shutil.which(tool), config=d / "ssh_config"))
        (bin_dir / tool).chmod(0o755)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    log = d / "sshd.log"
    server = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", d / "sshd_config"], stdout=open(log, "w"), stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 20
        while server.poll() is None and time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        assert server.poll() is None and time.monotonic() < deadline, f"sshd did not start:\n{log.read_text()}"
        yield bin_dir, log
    finally:
        server.terminate()
        server.wait(timeout=10)


def parent_title(pid: int) -> str:
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def own_address() -> str:
    """This machine's address on its network (where its default route leaves from), else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.254.254.254", 9))  # a UDP connect sends nothing: it only picks the route
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def zmtp_mechanism(host: str, port: int) -> str:
    """The security mechanism a ZeroMQ socket announces in its ZMTP 3 greeting (NULL, PLAIN, CURVE)."""
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03")  # signature and major version: the peer sends its greeting
        got = b""
        while len(got) < 64 and (chunk := s.recv(64 - len(got))):
            got += chunk
    return got[12:32].rstrip(b"\0").decode(errors="replace")


def episodes_by(run_dir: Path | None) -> set[str]:
    metrics = run_dir / "metrics.jsonl" if run_dir else None
    if metrics is None or not metrics.exists():
        return set()
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line]
    return {m["actor"] for m in lines if m.get("kind") == "episode"}


def test_two_robot_pcs_over_real_ssh_keys_copied_curve_on_and_ctrl_c_leaves_no_process(tmp_path, sshd):
    bin_dir, sshd_log = sshd
    start = time.monotonic()
    remote = tmp_path / "robot pc" / "robo rl"  # the checkout there: a path the remote shell must get quoted
    remote.mkdir(parents=True)
    (remote / ".venv").symlink_to(ROOT / ".venv")  # remote_python stays the layout's .venv/bin/python
    layout = yaml.safe_load((LAYOUTS_DIR / "two_robot_pcs.yaml").read_text())
    user = getpass.getuser()
    hosts = {"arm-left": f"{user}@127.0.0.1", "arm-right": f"{user}@localhost"}
    for p in layout["processes"]:
        p["host"] = hosts.get(p["name"], p.get("host"))
    assert [p["name"] for p in layout["processes"]] == ["learner", "gui", "arm-left", "arm-right"]
    layout["remote_dir"] = str(remote)
    layout["address"] = address = own_address()  # the workstation's address on the robots' network: servers bind it
    path = tmp_path / "two_robot_pcs.yaml"
    path.write_text(yaml.safe_dump(layout))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # simulated arms (point_reach has no arm for the safety layer); the layout's other settings stay, its no-demos
    # among them (QUICK's demos replaced); 5-step episodes: at the layout's real-time 10 Hz each arm's first is 0.5 s
    proc, out = start_launch(
        tmp_path,
        str(path),
        "env=point_reach",
        "env.max_episode_steps=5",
        "safety=none",
        "demos.num_episodes=0",
        "train.total_env_steps=100000",
        env=env,
    )
    wait_for(lambda: episodes_by(run_dir_of(out)) == set(hosts), proc, out, "episodes from both remote actors")
    run_dir = run_dir_of(out)

    # keys: one folder per run on each machine, only what its actors need, never the learner's secret
    folder = remote / ".robo_rl_keys" / run_dir.name
    copied = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert copied == ["arm-left.key", "arm-left.key_secret", "arm-right.key", "arm-right.key_secret", "learner.key"]
    assert folder.stat().st_mode & 0o777 == 0o700
    args = {n: p["args"] for n, p in json.loads((run_dir / "launch.json").read_text())["processes"].items()}
    assert f"transport.curve_keys_dir={run_dir / 'keys'}" in args["learner"]  # CURVE on: the learner needs keys
    assert f"transport.host={address}" in args["learner"]
    for arm in hosts:
        assert f"transport.curve_keys_dir={folder}" in args[arm] and f"gui.zmq_host={address}" in args[arm]
    ports = json.loads((run_dir / "launch.json").read_text())["ports"]
    learner_ports = [ports[f"transport.{k}_port"] for k in ("data", "weights", "ctrl")]
    assert [zmtp_mechanism(address, p) for p in learner_ports] == ["CURVE"] * 3
    # the GUI's actor socket takes keys off loopback only (a loopback bind is this machine's own)
    gui_mechanism = "NULL" if address.startswith("127.") else "CURVE"
    assert zmtp_mechanism(address, ports["gui.zmq_port"]) == gui_mechanism

    # the actors run under sshd (their shell's pid was printed first, then exec'd into python); the newest such line:
    # on a loaded machine an actor may have been restarted (its log appended), and the first pid be gone (load 16)
    remote_pids = {}
    for arm in hosts:
        marks = re.findall(r"^launch: remote pid (\d+)$", (run_dir / "logs" / f"{arm}.log").read_text(), re.M)
        remote_pids[arm] = int(marks[-1])
        assert parent_title(remote_pids[arm]).startswith("sshd"), parent_title(remote_pids[arm])
        cmdline = Path(f"/proc/{remote_pids[arm]}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "robo_rl.cli actor" in cmdline and f"actor.id={arm}" in cmdline
        assert Path(f"/proc/{remote_pids[arm]}/cwd").resolve() == remote.resolve()  # `cd 'robot pc/robo rl'` quoted
    logins = sshd_log.read_text().count(f"Accepted publickey for {user} from 127.0.0.1")
    assert logins >= 2 * 2 + 2, sshd_log.read_text()[-2000:]  # per machine: mkdir, scp; then each actor's login

    children = [*remote_pids.values(), *(p for n in ("learner", "gui", *hosts) for p in pids(out, n))]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=90) == 130, out.read_text()[-3000:]
    text = out.read_text()
    for arm in hosts:  # stopped by `kill -INT <pid>` over ssh: it ends on its own, as interrupted
        assert re.search(rf"{arm}\s+pid\s+\d+\s+exited\(130\)", text), text[-3000:]
        assert f"{arm}: interrupted" in (run_dir / "logs" / f"{arm}.log").read_text()
    assert all(gone(p) for p in children), children
    end = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert end["kind"] == "end" and end["reason"].startswith("interrupted") and end["checkpoint"]
    assert "interrupted: stopping every process" in text
    assert sshd_log.read_text().count(f"Accepted publickey for {user} from 127.0.0.1") >= logins + 2  # the kills
    print(f"two_robot_pcs over real ssh: {time.monotonic() - start:.1f} s", file=sys.stderr)
