"""`robo-rl launch <layout> launch.ray=true` on a real Ray instance: Ray places the processes (each a child of a Ray
actor), the steps still travel over ZeroMQ (the actor's TCP connection to the learner's data port; neither process
loads Ray), and nothing of the launch is left behind. One node in the fast suite, two nodes in the slow tier."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from launch.layout import load_layout
from robo_rl.cli import main
from tests.test_launch import QUICK, RUN_TIMEOUT_S, gone, pids, run_dir_of, start_launch

ray = pytest.importorskip("ray", reason="the ray extra is not installed (uv sync --extra ray; .ci/run does)")

TINY = [*QUICK, "train.total_env_steps=200", "train.learning_starts=150", "demos.num_episodes=0", "eval.episodes=1"]
LISTEN, ESTABLISHED = "0A", "01"  # /proc/net/tcp socket states


def sockets_of(pid: int) -> list[tuple[int, int, str]]:
    """(local port, remote port, state) of each TCP socket the process holds, from /proc."""
    try:
        inodes = {
            link[len("socket:[") : -1]
            for fd in Path(f"/proc/{pid}/fd").iterdir()
            if (link := _readlink(fd)).startswith("socket:[")
        }
    except OSError:
        return []
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[9] in inodes:
                found.append((int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16), f[3]))
    return found


def _readlink(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:
        return ""


def loads_ray(pid: int) -> bool:
    """Ray's core library is mapped into the process: it imported ray."""
    try:
        return "_raylet" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def parent_of(pid: int) -> tuple[int, str]:
    """The parent's pid and its command line (a Ray worker shows its actor's name there)."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return ppid, Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return 0, ""


class DataPathWatch(threading.Thread):
    """While the launch runs: which TCP connections the learner and actor-0 hold, whether either loads Ray, and
    what process started the actor."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out, self.stop = out, threading.Event()
        self.data_port: int | None = None
        self.actor_links: set[tuple[int, int, str]] = set()
        self.learner_links: set[tuple[int, int, str]] = set()
        self.ray_loaded: dict[str, bool] = {}
        self.actor_parent: tuple[int, str] = (0, "")
        self.parent_loads_ray = False  # the probe's own check: the Ray actor that started the actor does load Ray

    def run(self) -> None:
        while not self.stop.wait(0.1):
            if not self.out.exists():
                continue
            run_dir = run_dir_of(self.out)
            if self.data_port is None and run_dir and (run_dir / "launch.json").exists():
                self.data_port = json.loads((run_dir / "launch.json").read_text())["ports"]["transport.data_port"]
            for name, links in (("actor-0", self.actor_links), ("learner", self.learner_links)):
                for pid in pids(self.out, name)[-1:]:
                    links.update(sockets_of(pid))
                    self.ray_loaded[name] = self.ray_loaded.get(name, False) or loads_ray(pid)
                    if name == "actor-0" and not self.actor_parent[0]:
                        self.actor_parent = parent_of(pid)
                        self.parent_loads_ray = loads_ray(self.actor_parent[0])


# slow until its placement flake is found: in a fresh-clone fast suite (2026-11-28, load 1-2) Ray's two ProcessHosts
# did not answer within the launcher's 120 s (165 s in all), as the two-node test once did; it passes alone in 17-28 s
@pytest.mark.slow
def test_one_node_ray_places_the_processes_and_the_steps_go_over_zeromq(tmp_path):
    from launch.ray_launcher import launch_on_ray

    start = time.monotonic()
    temp = short_temp_dir()
    # a new local instance (never one a ray_current_cluster file names), its session files in our own folder
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    started = time.monotonic() - start
    out = tmp_path / "launch.txt"
    watch = DataPathWatch(out)
    watch.start()
    try:
        overrides = [*TINY, f"outputs_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"]
        with open(out, "w") as f:
            code = launch_on_ray(load_layout("sim_one"), overrides, f)
    finally:
        watch.stop.set()
        watch.join()
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    text, run_dir = out.read_text(), run_dir_of(out)
    assert code == 0, text
    assert "on Ray: 2 processes on 1 node(s)" in text
    host_pid, host_title = watch.actor_parent
    assert "ray::ProcessHost" in host_title, host_title  # a Ray actor on its node started it
    # the data path: the actor's connection to the learner's data port, the learner's end of that same connection
    port = watch.data_port
    to_learner = {
        (mine, theirs) for mine, theirs, state in watch.actor_links if theirs == port and state == ESTABLISHED
    }
    from_actor = {
        (theirs, mine) for mine, theirs, state in watch.learner_links if mine == port and state == ESTABLISHED
    }
    assert to_learner and to_learner & from_actor, (port, watch.actor_links, watch.learner_links)
    assert (port, 0, LISTEN) in watch.learner_links
    # Ray holds no transitions: neither process that makes or takes them ever loads Ray
    assert watch.ray_loaded == {"actor-0": False, "learner": False} and watch.parent_loads_ray
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    episodes = [m for m in lines if m["kind"] == "episode"]
    assert episodes and {m["actor"] for m in episodes} == {"actor-0"}
    assert lines[-1]["kind"] == "end" and lines[-1]["reason"] == "done" and lines[-1]["env_steps"] >= 200
    assert all(gone(p) for name in ("learner", "actor-0") for p in pids(out, name))
    assert all_gone([host_pid])  # the Ray actor that placed it went with the launch and the instance
    took = time.monotonic() - start
    print(f"one-node Ray launch: {took:.1f} s ({started:.1f} s of it ray.init)")


def test_a_ray_address_nothing_answers_at_is_one_line_not_minutes_of_retries(tmp_path, capsys):
    address = f"127.0.0.1:{free_port()}"
    args = ["launch", "sim_one", "launch.ray=true", f"launch.ray_address={address}", f"outputs_dir={tmp_path}"]
    start = time.monotonic()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"no Ray cluster answers at {address}" in err and "ray_address" in err
    assert time.monotonic() - start < 10 and not ray.is_initialized()


@pytest.mark.slow  # two Ray nodes (two `ray start` on this machine) take 1-2 minutes on 2 cores
def test_two_ray_nodes_the_actor_reaches_the_learner_with_curve_keys_sent_through_ray(tmp_path):
    """`robo-rl launch sim_one launch.ray=true launch.ray_address=...` on two `ray start` nodes of this machine: the
    learner on the head (one CPU, its own), the actor on the worker node, reaching the learner at its node's address
    (Ray gives a node this machine's own address, never loopback) with CURVE keys the launch sent through Ray and
    removes again."""
    port = free_port()
    # a joining node and the launch need the head's token: one the test makes (Ray reads it once, at import)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    temp = short_temp_dir()
    head = ["--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={temp}"]
    worker = ["--address", f"127.0.0.1:{port}", "--num-cpus=2"]
    nodes: list[subprocess.Popen] = []
    try:
        for i, args in enumerate((head, worker)):
            start_node([*args, "--block", "--disable-usage-stats"], tmp_path / f"node{i}.log", env, nodes)
        proc, out = start_launch(
            tmp_path, "sim_one", *TINY[len(QUICK) :], "launch.ray=true", f"launch.ray_address=127.0.0.1:{port}", env=env
        )
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S * 2)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # the launch stops its processes on its nodes
            code = proc.wait(timeout=90)
        diagnosis = ray_log_tails(temp) if code != 0 else ""
    finally:
        for node in reversed(nodes):
            stop_node(node)
        shutil.rmtree(temp, ignore_errors=True)
    text = out.read_text()
    assert code == 0, text + diagnosis
    run_dir = run_dir_of(out)
    end = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert end["reason"] == "done" and end["env_steps"] >= 200
    actor_args = json.loads((run_dir / "launch.json").read_text())["processes"]["actor-0"]["args"]
    keys = [a.split("=", 1)[1] for a in actor_args if a.startswith("transport.curve_keys_dir=")]
    address = next(a.split("=", 1)[1] for a in actor_args if a.startswith("transport.host="))
    assert "on Ray: 2 processes on 2 node(s)" in text and len(keys) == 1 and not address.startswith("127.")
    assert not Path(keys[0]).exists()  # the secret keys do not stay behind on the node
    assert all_gone([n.pid for n in nodes])


def all_gone(pids: list[int], timeout_s: float = 10.0) -> bool:
    """Each process and its group are gone within the timeout (an orphan is reaped by init a moment later)."""
    deadline = time.monotonic() + timeout_s
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return all(gone(p) for p in pids)


def ray_log_tails(temp: str, lines: int = 20) -> str:
    """The last lines of each node's raylet log, for a failed launch's message (the folder goes with the test)."""
    logs = sorted(Path(temp).glob("session_2*/logs/raylet*.out"))
    return "".join(f"\n--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) for p in logs)


def short_temp_dir() -> str:
    """A folder for Ray's session files, short enough for its socket paths (107 bytes at most on Linux)."""
    return tempfile.mkdtemp(prefix="ray_", dir="/tmp")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(args: list[str], log: Path, env: dict, nodes: list, timeout_s: float = 180) -> None:
    """`ray start --block` (into `nodes` at once), waited for until it says the node is up: a node lives as long as
    its `ray start` process (its session), so the test stops only its own."""
    ray_cli = Path(sys.executable).parent / "ray"  # the venv's own `ray`
    with open(log, "w") as f:
        node = subprocess.Popen(
            [str(ray_cli), "start", *args], stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    nodes.append(node)
    deadline = time.monotonic() + timeout_s
    while "Ray runtime started" not in log.read_text() and node.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "Ray runtime started" in log.read_text(), log.read_text()[-2000:]


def stop_node(node: subprocess.Popen) -> None:
    node.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes on SIGTERM
    try:
        node.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(node.pid, signal.SIGKILL)  # whatever of its session is left
    except ProcessLookupError:
        pass
    node.wait()
