"""`robo-rl launch <layout> launch.ray=true`: the same layout's processes placed on a Ray cluster.

Each process gets a small Ray actor (`ProcessHost`) that runs the same `robo-rl <role> ...` command line as the local
launcher and reports its exit and its log's last line; the `Supervisor` of launch/launcher/supervisor.py restarts,
stops and shows them as it does locally. Ray only places and watches processes: the data path stays ZeroMQ between
them. It imports the launcher's lower modules only; `robo-rl launch` imports this module only for launch.ray=true.
The learner, GUI and critic run on this machine's node (the run folder is here) unless their `ray:` entry says
otherwise; actors go wherever the cluster has room (`ray: {num_cpus: 1}` each by default). Nodes other than the
learner's reach it at its node's address, authenticated with CURVE keys shipped to each process through Ray.

When: many simulated actors (PPO rollouts, evaluation sweeps) on machines that already form a Ray cluster. A
workstation with a robot or two does not need it: `robo-rl launch` (with `host:` for other machines) is enough.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

from launch.launcher.board import LearnerProgress, StatusBoard
from launch.launcher.command_lines import Network, arg_value
from launch.launcher.ports import TRANSPORT_PORTS, choose_ports, port_open
from launch.launcher.prepare import prepare
from launch.launcher.processes import LocalProcess
from launch.launcher.slots import Slot, make_slots
from launch.launcher.supervisor import Supervisor
from launch.layout import LayoutError

RAY_MISSING = "launch.ray=true needs Ray: uv sync --extra ray (or pip install 'ray[default]>=2.60')"
PLACEMENT_TIMEOUT_S = 120.0  # a process the cluster has no room for is an error after this long
CALL_TIMEOUT_S = 30.0  # one call to a process's Ray actor
LOST = -1  # the exit code of a process whose Ray actor (or its node) is gone
DEFAULT_CPUS = 1  # a process's Ray placement when its layout entry has no ray: num_cpus
CLUSTER_PROBE_S = 5.0  # a TCP connect to ray_address's GCS port before ray.init
ON_THIS_NODE = ("learner", "gui", "critic")  # roles placed on the launching machine's node unless told otherwise


class ProcessHost:
    """Lives on a Ray node: starts one process there (again on a restart), reports on it, forwards signals."""

    def __init__(self) -> None:
        self.process: LocalProcess | None = None
        self.keys: Path | None = None

    def node(self) -> tuple[str, str]:
        import ray

        return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()

    def choose_ports(self, layout, overrides: list[str], host: str) -> dict:
        return choose_ports(layout, overrides, host)

    def port_open(self, host: str, port: int) -> bool:
        return port_open(host, port)

    def write_keys(self, files: dict[str, bytes], folder: str) -> str:
        """CURVE key files into a private folder on this node; returns it (the process's transport.curve_keys_dir)."""
        self.keys = Path(tempfile.gettempdir()) / "robo_rl_keys" / folder
        (self.keys / "authorized").mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, data in files.items():
            path = self.keys / name
            path.write_bytes(data)
            path.chmod(0o600)
        return str(self.keys)

    def forget_keys(self) -> None:
        """The launch is over: its secret keys do not stay behind on the node."""
        if self.keys is not None:
            shutil.rmtree(self.keys, ignore_errors=True)

    def start(self, args: list[str], cwd: str, log_path: str) -> int:
        cwd = cwd if os.path.isdir(cwd) else None  # another node may not have the launching machine's folder
        self.process = LocalProcess([sys.executable, "-m", "robo_rl.cli", *args], Path(log_path), cwd=cwd)
        return self.process.pid

    def state(self) -> tuple[int | None, str]:
        return self.process.poll(), self.process.last_line()

    def signal(self, sig: int) -> None:
        if self.process is not None:
            self.process.signal(sig)


class RayHandle:
    """A process on a Ray node as the Supervisor sees a local one (poll, signal, last_line)."""

    def __init__(self, ray, host, pid: int) -> None:
        self.ray, self.host, self.pid, self.line, self.code = ray, host, pid, "", None

    def poll(self) -> int | None:
        if self.code is None:
            try:
                self.code, self.line = self.ray.get(self.host.state.remote(), timeout=CALL_TIMEOUT_S)
            except self.ray.exceptions.GetTimeoutError:
                return None  # a busy node: still running as far as we know
            except self.ray.exceptions.RayError:
                self.code = LOST
        return self.code

    def signal(self, sig: int) -> None:
        try:
            self.ray.get(self.host.signal.remote(int(sig)), timeout=CALL_TIMEOUT_S)
        except self.ray.exceptions.RayError:
            pass

    def last_line(self) -> str:
        return self.line


# Ray (2.4x+) makes the workers of a driver started by `uv run` run `uv run` themselves, in a copy of the working
# directory: `uv run robo-rl launch` (the README's way) then builds a fresh environment per job without the ray extra,
# and the worker dies on `import ray` ("have not registered within the timeout"). The processes a launch places use
# the node's own environment, as `ray start` set it up, so that hook stays off unless a user turns it on.
UV_RUN_HOOK = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


def import_ray():
    user_choice = os.environ.get(UV_RUN_HOOK)
    os.environ.setdefault(UV_RUN_HOOK, "0")  # read once, when ray is first imported
    try:
        import ray
        from ray._private import ray_constants
    except ImportError:
        raise LayoutError(RAY_MISSING) from None
    if user_choice is None:  # ray imported before this function ran read the variable unset: the same choice
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    return ray


def launch_on_ray(layout, overrides: list[str], out=None) -> int:
    """Place the layout's processes on the Ray cluster (`ray_address:`, else a running one, else a local one) and
    supervise them until the learner ends or Ctrl-C."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        _check_reachable(layout.ray_address)
        _init(ray, layout, out or sys.stdout)
    hosts: dict = {}
    nodes: dict = {}
    try:
        here, remote_host = ray.get_runtime_context().get_node_id(), ray.remote(ProcessHost)
        for p in layout.processes:
            hosts[p.name] = _place(remote_host, p, here)
        nodes = _wait_placed(ray, hosts)  # name -> (address, node id)
        learner = hosts[layout.learner.name]
        spread = len({nodes[name][1] for name in hosts}) > 1
        bind = nodes[layout.learner.name][0] if spread else "127.0.0.1"
        ports = ray.get(learner.choose_ports.remote(layout, overrides, bind), timeout=CALL_TIMEOUT_S)
        prep = prepare(layout, overrides, ports)
        prep.run_dir = prep.run_dir.resolve()  # the processes' folder is not this one
        net = _network(ray, layout, prep.run_dir, hosts, nodes) if spread else Network()
        slots = make_slots(prep, ports, net)
        print(
            f"run folder: {prep.run_dir} (logs in {prep.run_dir / 'logs'}); on Ray: {len(hosts)} processes on "
            f"{len({n[1] for n in nodes.values()})} node(s); Ctrl-C stops every process",
            file=out,
        )
        cwd = os.getcwd()

        def start(s: Slot) -> RayHandle:
            if s.handle is not None and s.handle.code == LOST:  # its node or Ray actor is gone: place it anew
                hosts[s.proc.name] = _place(remote_host, s.proc, here)
                if spread:
                    _send_keys(ray, hosts[s.proc.name], s.proc, prep.run_dir)
            host = hosts[s.proc.name]
            return RayHandle(ray, host, ray.get(host.start.remote(s.args, cwd, str(s.log)), timeout=CALL_TIMEOUT_S))

        learner_args = next(s.args for s in slots if s.proc.role == "learner")
        probe = (net.learner_address or "127.0.0.1", int(arg_value(learner_args, TRANSPORT_PORTS[2])))
        local = nodes[layout.learner.name][1] == here
        board = StatusBoard(
            slots, LearnerProgress(prep.run_dir / "metrics.jsonl" if local else None, prep.total_env_steps), out
        )
        return Supervisor(layout, slots, start, lambda: ray.get(learner.port_open.remote(*probe)), board).run()
    finally:
        try:  # keys go out only once every process is placed; a host never started would hold this for CALL_TIMEOUT_S
            if nodes:
                ray.get([h.forget_keys.remote() for h in hosts.values()], timeout=CALL_TIMEOUT_S)
        except ray.exceptions.RayError:
            pass
        for h in hosts.values():
            ray.kill(h)
        if started:
            ray.shutdown()


def _init(ray, layout, out) -> None:
    """`ray_address`, else a running cluster, else a local instance sized to the layout: Ray places by the CPUs it is
    told, and a learner with four actors asks for five where a workstation may have two (the local launcher shares
    the cores as well; a cluster's own resources are never overridden)."""
    if layout.ray_address is not None:
        ray.init(address=layout.ray_address, log_to_driver=False)
        return
    try:
        ray.init(address="auto", log_to_driver=False)  # a cluster already running here (`ray start --head`)
        return
    except ConnectionError:
        pass
    cores = os.cpu_count() or 1
    asked = sum(float(p.ray.get("num_cpus", DEFAULT_CPUS)) for p in layout.processes)
    if asked > cores:
        print(
            f"a local Ray instance: the layout asks for {asked:g} CPUs and this machine has {cores}; Ray is told "
            f"{math.ceil(asked)}, so every process is placed and they share the cores",
            file=out,
        )
    ray.init(num_cpus=max(cores, math.ceil(asked)), log_to_driver=False)


def _wait_placed(ray, hosts: dict) -> dict:
    """Each process's (node address, node id) once Ray has started its ProcessHost; a one-line error with what Ray
    reports as soon as it refuses one, or for each it has not started within PLACEMENT_TIMEOUT_S."""
    asked = {h.node.remote(): name for name, h in hosts.items()}
    found, pending, deadline = {}, list(asked), time.monotonic() + PLACEMENT_TIMEOUT_S
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in ready:
            try:
                found[asked[ref]] = ray.get(ref)
            except ray.exceptions.RayError as e:  # its ProcessHost died starting, or Ray refused its placement
                raise LayoutError(f"Ray could not start {asked[ref]}: {_first_line(e)}{_logs_hint(ray)}") from None
    if pending:
        raise LayoutError(
            f"Ray did not start the layout's processes within {PLACEMENT_TIMEOUT_S:.0f} s: "
            f"{', '.join(f'{asked[r]} {_actor_state(ray, hosts[asked[r]])}' for r in pending)}; {_cluster_room(ray)} "
            f"(ray: num_cpus / num_gpus in the layout){_logs_hint(ray)}"
        )
    return {name: found[name] for name in hosts}


ACTOR_STATES = {  # the GCS's word for a ProcessHost, and what it means here
    "PENDING_CREATION": "no room for it, or its Ray worker process not started yet",
    "ALIVE": "started, its first call not answered yet",
    "RESTARTING": "its node or worker was lost",
    "DEAD": "gone",
}


def _actor_state(ray, host) -> str:
    """What the GCS says of a ProcessHost, e.g. `PENDING_CREATION (no room for it, ...)`."""
    try:
        from ray._private.state import actors  # no public call reads one actor's state without the dashboard

        state = actors(actor_id=host._actor_id.hex()).get("State", "unknown")
    except Exception:  # a private API: its absence must not hide the placement error itself
        return "(state unknown)"
    return f"{state} ({ACTOR_STATES[state]})" if state in ACTOR_STATES else state


def _cluster_room(ray) -> str:
    alive = [n for n in ray.nodes() if n.get("Alive")]
    free, total = ray.available_resources().get("CPU", 0), ray.cluster_resources().get("CPU", 0)
    return f"the cluster has {free:g} of {total:g} CPUs free on {len(alive)} live node(s)"


def _logs_hint(ray) -> str:
    """Where this machine's node keeps Ray's own account (raylet.out: leases and worker starts)."""
    try:
        return f"; Ray's logs: {ray._private.worker._global_node.get_logs_dir_path()}"
    except Exception:  # a private attribute, and a Ray Client connection has no node here
        return ""


def _first_line(error: Exception) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _check_reachable(address: str | None) -> None:
    """A cluster address nothing answers at is one line here; Ray itself retries it for minutes, printing warnings."""
    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or address.startswith("ray://"):
        return  # null, auto, local or a Ray Client address: Ray's own handling
    try:
        socket.create_connection((host, int(port)), timeout=CLUSTER_PROBE_S).close()
    except OSError as e:
        raise LayoutError(
            f"no Ray cluster answers at {address} ({e.strerror or e}): check ray_address / launch.ray_address "
            "(`ray start --head` prints it), or leave it null for a local instance"
        ) from None


def _place(remote_host, proc, here: str):
    """A ProcessHost with the process's placement: its `ray:` entry, else one CPU; servers on this node."""
    options = {"num_cpus": DEFAULT_CPUS, **proc.ray}
    if proc.role in ON_THIS_NODE and not {"resources", "scheduling_strategy"} & set(proc.ray):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=here, soft=False)
    return remote_host.options(**options).remote()


def _network(ray, layout, run_dir: Path, hosts: dict, nodes: dict) -> Network:
    """Processes on more than one node: servers bind their node's address with CURVE keys generated once into
    <run>/keys; each process gets the files it needs through Ray, written on its own node."""
    from robo_rl.transport.security import generate_keys

    generate_keys(run_dir / "keys", [p.name for p in layout.of_role("actor")])
    net = Network(learner_address=nodes[layout.learner.name][0])
    if layout.of_role("gui"):
        net.gui_address = nodes[layout.of_role("gui")[0].name][0]
    if layout.of_role("critic"):
        net.critic_address = nodes[layout.of_role("critic")[0].name][0]
    for p in layout.processes:
        net.keys_dirs[p.name] = _send_keys(ray, hosts[p.name], p, run_dir)
    return net


def _send_keys(ray, host, proc, run_dir: Path) -> str:
    """An actor's own pair and the learner's public key, or a server's: the learner's pair and the authorised
    actors' public keys; returns the folder they are in on the process's node."""
    from robo_rl.transport.security import AUTHORIZED_DIR, LEARNER_KEY

    keys_dir = run_dir / "keys"
    own = proc.name if proc.role == "actor" else LEARNER_KEY
    files = {n: (keys_dir / n).read_bytes() for n in {f"{LEARNER_KEY}.key", f"{own}.key", f"{own}.key_secret"}}
    if proc.role != "actor":
        files |= {f"{AUTHORIZED_DIR}/{f.name}": f.read_bytes() for f in (keys_dir / AUTHORIZED_DIR).glob("*.key")}
    folder = f"{run_dir.parent.name}_{run_dir.name}"  # <date>_<time>_<name>: one per run
    return ray.get(host.write_keys.remote(files, folder), timeout=CALL_TIMEOUT_S)
