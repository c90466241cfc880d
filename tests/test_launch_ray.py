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
from dataclasses import replace
from pathlib import Path

import pytest

from launch.layout import LayoutError, load_layout
from launch.ray_launcher import UV_RUN_HOOK
from robo_rl.cli import main
from tests.test_launch import QUICK, RUN_TIMEOUT_S, gone, pids, run_dir_of, start_launch

# before ray is imported: under `uv run pytest` (CI, the README) Ray would start its workers with `uv run` in a copy
# of this folder, in an environment without the ray extra (they die on `import ray`), as the launcher avoids
os.environ.setdefault(UV_RUN_HOOK, "0")
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
        while not self.stop.wait(0.05):  # the links last the actor's run: on a fast CPU under a second at 0.25 s
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


def test_a_ray_address_nothing_answers_at_is_one_line_not_minutes_of_retries(tmp_path, capsys):
    assert not ray.is_initialized()  # before local_ray's tests: an instance this process holds would be used instead
    address = f"127.0.0.1:{free_port()}"
    args = ["launch", "sim_one", "launch.ray=true", f"launch.ray_address={address}", f"outputs_dir={tmp_path}"]
    start = time.monotonic()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"no Ray cluster answers at {address}" in err and "ray_address" in err
    assert time.monotonic() - start < 10 and not ray.is_initialized()


def test_a_local_instance_is_sized_to_the_layout_a_running_cluster_is_joined_as_it_is(monkeypatch, capsys):
    """sim_four (five processes of one CPU each) on a 2-core machine: a local Ray told 2 CPUs placed two and refused
    the rest after 120 s. Ray's own init is replaced by a recorder here (starting Ray twice costs 30 s); its calls are
    checked against the real signature, and "auto" with no cluster raises what the real one does."""
    import inspect

    from launch import ray_launcher

    calls = []

    def init(**kwargs):
        inspect.signature(ray.init).bind(**kwargs)
        calls.append(kwargs)
        if kwargs.get("address") == "auto" and not cluster_running:
            raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_launcher.os, "cpu_count", lambda: 2)
    layout = load_layout("sim_four")
    cluster_running = False
    ray_launcher._init(ray, layout, sys.stdout)
    assert calls[-1] == {"num_cpus": 5, "log_to_driver": False}
    assert "asks for 5 CPUs and this machine has 2" in capsys.readouterr().out
    calls.clear()
    cluster_running = True  # a cluster's resources are its own: joined, never resized
    ray_launcher._init(ray, layout, sys.stdout)
    assert calls == [{"address": "auto", "log_to_driver": False}]
    layout.ray_address = "10.0.0.5:6379"
    calls.clear()
    ray_launcher._init(ray, layout, sys.stdout)
    assert calls == [{"address": "10.0.0.5:6379", "log_to_driver": False}]


@pytest.fixture(scope="module")
def local_ray(request):
    """A new local Ray instance (never one a ray_current_cluster file names) for this file's tests, its session files
    in our own folder: removed after, kept (and its logs' tails shown) when a test failed."""
    temp, failed = short_temp_dir(), request.session.testsfailed
    start = time.monotonic()
    for attempt in (1, 2):  # Ray waits a fixed 30 s for its raylet to register: on a loaded machine, once more
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
            break
        # Ray's own start-up gave up (e.g. its raylet waiting on a slow agent): say where and why
        except Exception as e:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                pytest.fail(f"ray.init: {e}\nRay's session files kept in {temp}{ray_log_tails(temp)}")
            print(f"ray.init gave up after {time.monotonic() - start:.1f} s ({e}): starting it once more")
    print(f"ray.init: {time.monotonic() - start:.1f} s")
    yield temp
    ray.shutdown()
    if request.session.testsfailed == failed:
        shutil.rmtree(temp, ignore_errors=True)


def test_one_node_ray_places_the_processes_and_the_steps_go_over_zeromq(local_ray, tmp_path):
    from launch.ray_launcher import launch_on_ray

    start = time.monotonic()
    out = tmp_path / "launch.txt"
    watch = DataPathWatch(out)
    watch.start()
    code, diagnosis = None, ""
    try:
        # 600 steps: on the faster EPYC VM a 200-step run once left the watch no sample of the data connection
        overrides = [
            *TINY,
            "train.total_env_steps=600",
            f"outputs_dir={tmp_path / 'out'}",
            f"cache_dir={tmp_path / 'cache'}",
        ]
        with open(out, "w") as f:
            code = launch_on_ray(load_layout("sim_one"), overrides, f)
    except LayoutError as e:
        diagnosis = f"\n{e}"
    finally:
        watch.stop.set()
        watch.join()
    if code != 0:  # Ray's own account of the failure
        diagnosis += f"\nRay's session files kept in {local_ray}" + ray_log_tails(local_ray)
    text, run_dir = out.read_text(), run_dir_of(out)
    assert code == 0, text + diagnosis
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
    assert all_gone([host_pid])  # the Ray actor that placed it went with the launch
    print(f"one-node Ray launch: {time.monotonic() - start:.1f} s")


def test_a_process_ray_cannot_place_is_one_line_naming_what_ray_reports(local_ray, tmp_path, monkeypatch):
    """More CPUs than the cluster has: the launch names the process Ray left pending, its state and the room left,
    then stops what it did place; a ProcessHost Ray refuses outright (a node that does not exist) names Ray's reason."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import launch.ray_launcher as ray_launcher

    monkeypatch.setattr(ray_launcher, "PLACEMENT_TIMEOUT_S", 2.0)
    layout = load_layout("sim_one")
    overrides = [*TINY, f"outputs_dir={tmp_path / 'out'}"]
    learner, actor = layout.processes
    layout.processes = [learner, replace(actor, ray={"num_cpus": 3})]
    with pytest.raises(LayoutError) as pending:
        ray_launcher.launch_on_ray(layout, overrides)
    message = str(pending.value)
    assert "\n" not in message and message.startswith("Ray did not start the layout's processes within 2 s: "), message
    assert "actor-0 PENDING_CREATION (no room for it" in message and "CPUs free on 1 live node(s)" in message, message
    assert f"Ray's logs: {local_ray}" in message and not (tmp_path / "out").exists(), message
    monkeypatch.setattr(ray_launcher, "PLACEMENT_TIMEOUT_S", 60.0)
    gone_node = NodeAffinitySchedulingStrategy(node_id="ab" * 28, soft=False)
    layout.processes = [learner, replace(actor, ray={"scheduling_strategy": gone_node})]
    start = time.monotonic()
    with pytest.raises(LayoutError) as refused:
        ray_launcher.launch_on_ray(layout, overrides)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("Ray could not start actor-0: "), message
    assert "NodeAffinitySchedulingStrategy" in message and time.monotonic() - start < 30, message  # not the timeout
    deadline = time.monotonic() + 30  # the learner's ProcessHost, placed each time, gave its CPU back
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2


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


RAY_LOGS = ("raylet*.out", "gcs_server*.out", "python-core-worker-*.log", "worker-*.err", "dashboard_agent.log")


def ray_log_tails(temp: str, lines: int = 20) -> str:
    """The last lines of each Ray log that tells why a process was not placed: each node's raylet and the GCS (leases,
    worker starts, resources), each worker's core log and stderr (its start-up and registration), the dashboard agent
    (a raylet gives it 15 s at start to write its ports, then aborts)."""
    logs = [p for pattern in RAY_LOGS for p in sorted(Path(temp).glob(f"session_2*/logs/{pattern}"))]
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


def test_a_launch_started_by_uv_run_places_its_processes_with_the_nodes_python_not_uv_run(monkeypatch):
    """Ray (2.4x+) gives the workers of a driver under `uv run` that same `uv run` as their Python, in a copy of the
    working directory: a fresh environment per job without the ray extra, where the Ray worker cannot even import
    ray. The launcher turns that off unless the user set RAY_ENABLE_UV_RUN_RUNTIME_ENV themselves."""
    from ray._private import ray_constants, worker
    from ray._private.runtime_env import uv_runtime_env_hook

    from launch.ray_launcher import import_ray

    monkeypatch.setattr(uv_runtime_env_hook, "_get_uv_run_cmdline", lambda: ["uv", "run", "pytest"])
    monkeypatch.setattr(ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", True)  # as a ray imported before would have
    hooked = worker._maybe_modify_runtime_env({}, True)
    assert hooked["py_executable"].startswith("uv run"), hooked  # what Ray does left alone
    monkeypatch.delenv(UV_RUN_HOOK, raising=False)
    import_ray()
    assert worker._maybe_modify_runtime_env({}, True) == {}  # the node's own Python, the job's env as given
    monkeypatch.setenv(UV_RUN_HOOK, "1")  # a user who wants Ray's behaviour keeps it
    monkeypatch.setattr(ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", True)
    import_ray()
    assert ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV is True
