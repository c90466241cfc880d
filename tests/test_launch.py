"""`robo-rl launch`: layouts parse and expand, a layout runs to the end through real processes, a killed actor is
restarted, Ctrl-C leaves no process behind (one started over SSH too), bad layouts are one line, the SSH/scp command
lines are exact."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.launcher import (
    Network,
    choose_ports,
    key_deploy_commands,
    prepare,
    process_args,
    remote_process_command,
    scp_argv,
    ssh_argv,
    ssh_signal_argv,
)
from launch.layout import LayoutError, layout_names, load_layout, merge_overrides, parse_layout, split_options
from robo_rl.cli import main
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
QUICK = [
    "env=point_reach",
    "experiment=rlpd",
    "train.learning_starts=100",
    "demos.num_episodes=5",
    "logger.progress=false",
    "eval.episodes=3",
    "logger.log_every_s=0.5",
    # these runs check processes, not learning: small networks make the learner's start-up, updates and eval cheap
    "policy.hidden=[32,32]",
    "algo.critic_hidden=[32,32]",
    "algo.batch_size=64",
]
RUN_TIMEOUT_S = 150


def args_of(layout, name, overrides=(), ports=None, net=None, run_dir=Path("RUN"), base_seed=0):
    proc = next(p for p in layout.processes if p.name == name)
    ports = ports or {"transport.data_port": 1, "transport.weights_port": 2, "transport.ctrl_port": 3}
    return process_args(layout, proc, list(overrides), ports, net or Network(), run_dir, base_seed)


def test_every_shipped_layout_parses_and_sim_four_expands_to_distinct_actors_on_one_set_of_ports():
    assert {"sim_one", "sim_four", "robot_gui", "two_robots", "two_robot_pcs"} <= set(layout_names())
    for name in layout_names():
        assert load_layout(name).learner.role == "learner"
    layout = load_layout("sim_four")
    actors = layout.of_role("actor")
    assert [a.name for a in actors] == ["actor-0", "actor-1", "actor-2", "actor-3"]
    ports = choose_ports(layout, [])
    assert len(set(ports.values())) == 3 and set(ports) == {
        "transport.data_port",
        "transport.weights_port",
        "transport.ctrl_port",
    }
    all_args = {p.name: args_of(layout, p.name, ["seed=7"], ports, base_seed=7) for p in layout.processes}
    for args in all_args.values():
        assert all(f"{k}={v}" in args for k, v in ports.items()) and "run_dir=RUN" in args
        assert "experiment=rlpd" in args and "logger.progress=false" in args
    assert all_args["learner"][0] == "learner" and "seed=7" in all_args["learner"]
    seeds = [next(a for a in all_args[f"actor-{i}"] if a.startswith("seed=")) for i in range(4)]
    assert seeds == ["seed=7", "seed=1007", "seed=2007", "seed=3007"]
    assert [f"actor.id=actor-{i}" in all_args[f"actor-{i}"] for i in range(4)] == [True] * 4
    options, overrides = split_options(["launch.actors=8", "launch.max_restarts=1", "env=point_reach"])
    eight = load_layout("sim_four", options)
    assert len(eight.of_role("actor")) == 8 and eight.max_restarts == 1 and overrides == ["env=point_reach"]
    pinned = choose_ports(layout, ["transport.data_port=5999"])  # a port given by the user is kept
    assert "transport.data_port" not in pinned
    assert "transport.data_port=5999" in args_of(layout, "actor-2", ["transport.data_port=5999"], pinned)


def test_robot_layouts_a_gui_joins_the_actors_and_a_command_line_override_replaces_the_layouts(tmp_path):
    layout = load_layout("robot_gui")
    ports = choose_ports(layout, [])
    assert {"gui.zmq_port", "gui.port"} <= set(ports)
    arm = args_of(layout, "arm", ["hardware.dry_run=true", "env=so101_twin"], ports)
    assert "gui.enabled=true" in arm and f"gui.zmq_port={ports['gui.zmq_port']}" in arm and "actor.id=arm" in arm
    assert "env=so101_twin" in arm and "env=so101" not in arm  # hydra refuses a key twice: the later one replaces
    assert args_of(layout, "gui", [], ports)[0] == "gui"
    two = load_layout("two_robots")
    left, right = args_of(two, "arm-left"), args_of(two, "arm-right")
    assert "env.driver.port=/dev/ttyACM0" in left and "env.driver.port=/dev/ttyACM1" in right
    # the real robot's config checks out against its twin before any process starts, one run folder for all
    prep = prepare(layout, ["hardware.dry_run=true", "env.twin_clock=real", f"outputs_dir={tmp_path}"], ports)
    assert prep.run_dir.parent.parent == tmp_path and (prep.run_dir / "logs").is_dir()
    # two arms on one learner differ in their port, calibration id and home pose: the learner accepts both
    prepare(two, ["hardware.dry_run=true", "env.twin_clock=real", f"outputs_dir={tmp_path}"], choose_ports(two, []))
    assert merge_overrides(["a=1", "gui=true", "b=2"], ["a=3", "gui.enabled=false"]) == [
        "b=2",
        "a=3",
        "gui.enabled=false",
    ]


@pytest.mark.parametrize(
    "data, says",
    [
        (
            {"processes": [{"name": "learner", "role": "learner"}, {"name": "a", "role": "acter"}]},
            "did you mean 'actor'",
        ),
        ({"processes": [{"name": "a", "role": "actor"}]}, "exactly one learner"),
        ({"processes": [{"name": "learner", "role": "learner", "restart": "on-failure"}]}, "never restarted"),
        ({"processes": [{"name": "learner", "role": "learner"}, {"name": "a", "role": "actor", "count": 0}]}, "count"),
        ({"processes": [{"name": "learner", "role": "learner"}], "max_restart": 3}, "did you mean 'max_restarts'"),
        (
            {"processes": [{"name": "learner", "role": "learner"}, {"name": "a", "role": "actor", "host": "me@pc"}]},
            "remote_dir",
        ),
    ],
)
def test_a_bad_layout_is_refused_naming_the_problem(data, says):
    with pytest.raises(LayoutError, match=says):
        parse_layout(data, "bad")


def test_a_bad_role_or_override_is_a_one_line_error_before_anything_starts(tmp_path, capsys):
    layout = tmp_path / "bad.yaml"
    layout.write_text("processes:\n  - {name: learner, role: learner}\n  - {name: x, role: critics}\n")
    assert main(["launch", str(layout)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "role 'critics'" in err and "did you mean 'critic'" in err
    assert main(["launch", "sim_one", "env=point_reach", "algo.batch_sise=64", f"outputs_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "learner" in err and "algo.batch_size" in err
    assert not list(tmp_path.glob("*/*"))  # no run folder for a launch that never started
    assert main(["launch", "sim_on"]) == 2 and "did you mean 'sim_one'" in capsys.readouterr().err
    if importlib.util.find_spec("ray") is None:  # the Ray launcher without Ray: how to get it, in one line
        assert main(["launch", "sim_one", "launch.ray=true"]) == 2
        assert "uv sync --extra ray" in capsys.readouterr().err


def test_ssh_and_scp_command_lines_are_exact_and_remote_actors_get_the_learners_address_and_their_keys(tmp_path):
    """The exact argv; tests/test_launch_ssh.py runs them against a real sshd on this machine."""
    opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5"]
    assert ssh_argv("robot@arm", "uptime") == ["ssh", *opts, "robot@arm", "uptime"]
    line = remote_process_command(
        "robo rl", ".venv/bin/python", ["actor", "actor.id=arm-left", "x=a b"], {"PYTHONUNBUFFERED": "1"}
    )
    assert line == (
        "cd 'robo rl' && echo 'launch: remote pid '$$ && exec env PYTHONUNBUFFERED=1 .venv/bin/python "
        "-m robo_rl.cli actor actor.id=arm-left 'x=a b'"
    )
    assert scp_argv(["k/a.key", "k/a.key_secret"], "robot@arm", "rl/keys") == [
        "scp",
        *opts,
        "-p",
        "k/a.key",
        "k/a.key_secret",
        "robot@arm:rl/keys/",
    ]
    assert ssh_signal_argv("robot@arm", 4242, signal.SIGINT) == ["ssh", *opts, "robot@arm", "kill -INT 4242"]

    layout = load_layout("two_robot_pcs")
    run_dir = tmp_path / "06-00-00_run"
    keys = run_dir / "keys"
    from robo_rl.transport.security import generate_keys

    generate_keys(keys, ["arm-left", "arm-right"])
    remote = "robo_rl/.robo_rl_keys/06-00-00_run"
    commands = key_deploy_commands(layout, keys, run_dir)
    assert commands == [
        ["ssh", *opts, "robot@arm-left.local", f"mkdir -p {remote}/authorized && chmod 700 {remote}"],
        [
            "scp",
            *opts,
            "-p",
            str(keys / "learner.key"),
            str(keys / "arm-left.key"),
            str(keys / "arm-left.key_secret"),
            f"robot@arm-left.local:{remote}/",
        ],
        ["ssh", *opts, "robot@arm-right.local", f"mkdir -p {remote}/authorized && chmod 700 {remote}"],
        [
            "scp",
            *opts,
            "-p",
            str(keys / "learner.key"),
            str(keys / "arm-right.key"),
            str(keys / "arm-right.key_secret"),
            f"robot@arm-right.local:{remote}/",
        ],
    ]  # an actor's machine gets its own pair and the learner's public key, never the learner's secret
    net = Network("10.0.0.5", "10.0.0.5", keys_dirs={"learner": str(keys), "arm-left": remote})
    learner, arm = args_of(layout, "learner", net=net), args_of(layout, "arm-left", net=net)
    assert "transport.host=10.0.0.5" in learner and f"transport.curve_keys_dir={keys}" in learner
    assert "transport.host=10.0.0.5" in arm and "gui.zmq_host=10.0.0.5" in arm
    assert f"transport.curve_keys_dir={remote}" in arm and not any(a.startswith("run_dir=") for a in arm)


# ---- end to end: real processes ---------------------------------------------------------------------------------


def start_launch(tmp_path, layout: str, *extra, env=None) -> tuple[subprocess.Popen, Path]:
    """`robo-rl launch` as a user runs it, its output (the status lines) into a file."""
    out = tmp_path / "launch.txt"
    args = ["launch", layout, *QUICK, f"outputs_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}", *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", *args], cwd=ROOT, stdout=open(out, "w"), stderr=subprocess.STDOUT, env=env
    )
    return proc, out


def wait_for(check, proc, out: Path, what: str, timeout_s: float = RUN_TIMEOUT_S):
    """`check()`'s first truthy value while the launch runs; if the launch ends first or the time runs out, it is
    killed and the test fails with the tail of its output."""

    def check_while_running():
        found = check()
        if not found and proc.poll() is not None:
            raise AssertionError(f"the launch ended before a {what}")
        return found

    try:
        return wait_until(check_while_running, timeout_s, what, every_s=0.2)
    except AssertionError:
        proc.kill()
        raise AssertionError(f"no {what}:\n{out.read_text()[-3000:]}") from None


def pids(out: Path, name: str) -> list[int]:
    return [int(p) for p in re.findall(rf"^\s+{name}\s+pid\s+(\d+)\s+running", out.read_text(), re.M)]


def run_dir_of(out: Path) -> Path | None:
    m = re.search(r"^run folder: (\S+)", out.read_text(), re.M)
    return Path(m.group(1)) if m else None


def episodes_seen(run_dir: Path | None) -> int:
    metrics = run_dir / "metrics.jsonl" if run_dir else None
    if metrics is None or not metrics.exists():
        return 0
    return sum(json.loads(line).get("kind") == "episode" for line in metrics.read_text().splitlines() if line)


def gone(pid: int) -> bool:
    """The process and its whole group are gone (no orphan left in the group it led)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == pid or int(fields[2]) == pid:  # fields[2]: its process group
            return False
    return True


def test_sim_one_runs_to_the_end_and_a_killed_actor_is_restarted(tmp_path):
    start = time.monotonic()
    # 300 steps at a real-time 50 Hz: the kill after two episodes (40 steps) comes with 5 s of the first actor's run
    # left, however fast the small learner updates, and the replacement finishes it; one evaluation episode writes
    # the report
    # actor.hello_timeout_s: at load 12 the niced learner had not answered the first actor within the default 15 s
    # (it exited, and its restarts were the ones counted); the restart under test is the one the kill causes
    proc, out = start_launch(
        tmp_path,
        "sim_one",
        "train.total_env_steps=300",
        "eval.episodes=1",
        "actor.realtime=true",
        "env.control_hz=50",
        "actor.hello_timeout_s=60",
    )
    wait_for(lambda: pids(out, "actor-0") and episodes_seen(run_dir_of(out)) >= 2, proc, out, "running actor")
    first = pids(out, "actor-0")[0]
    try:
        os.kill(first, signal.SIGKILL)  # a crash the launcher did not cause
    except ProcessLookupError:
        # e.g. at load 7 on 2 cores the learner (nice 10) had not answered the actor within 15 s: it exited
        raise AssertionError(f"actor-0 (pid {first}) ended before the kill:\n{out.read_text()[-3000:]}") from None
    assert proc.wait(timeout=RUN_TIMEOUT_S) == 0, out.read_text()[-3000:]
    text, run_dir = out.read_text(), run_dir_of(out)
    assert "actor-0 exited with code -9: restarting" in text
    assert len(set(pids(out, "actor-0"))) == 2 and re.search(r"actor-0\s+pid\s+\d+\s+exited\(0\)\s+restarts 1", text)
    assert re.search(r"learner\s+pid\s+\d+\s+exited\(0\)\s+restarts 0\s+env steps \d+/300", text)
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["actor-0.log", "learner.log"]
    actor_log = (run_dir / "logs" / "actor-0.log").read_text()
    assert "--- launch: restart 1" in actor_log
    assert "is in use by another running actor" not in actor_log, "the replacement was refused: the dead one's id held"
    end = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert end["kind"] == "end" and end["reason"] == "done" and end["env_steps"] >= 300
    assert (run_dir / "eval" / "report.md").exists() and "launch: done" in text
    assert all(gone(p) for name in ("learner", "actor-0") for p in pids(out, name))
    print(f"sim_one with a restart: {time.monotonic() - start:.1f} s")


FAKE_SSH = """#!/bin/bash
# ssh's stand-in: the remote command runs on this machine in a session of its own, as on another host
while [ "$1" = "-o" ]; do shift 2; done
setsid sh -c "$2" &
wait $!
"""
FAKE_SCP = """#!/bin/bash
files=(); while [ $# -gt 0 ]; do case "$1" in -o) shift 2;; -p) shift;; *) files+=("$1"); shift;; esac; done
dest="${files[-1]#*:}"; unset 'files[-1]'
cp -p "${files[@]}" "$dest"
"""


@pytest.mark.skipif(
    shutil.which("sshd") is not None or os.path.exists("/usr/sbin/sshd"),
    reason="an sshd is installed: tests/test_launch_ssh.py runs this (and more) over real ssh/scp",
)
def test_ctrl_c_stops_the_learner_here_and_an_actor_over_ssh_with_its_keys_and_leaves_no_process(tmp_path):
    """Where no sshd is installed: `ssh` and `scp` are stand-ins that run here, so the launcher's SSH path still
    runs."""
    bin_dir, remote = tmp_path / "bin", tmp_path / "remote"
    bin_dir.mkdir()
    remote.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("scp", FAKE_SCP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    layout = tmp_path / "remote_actor.yaml"
    layout.write_text(
        f"overrides: [experiment=rlpd]\nremote_dir: {remote}\nremote_python: {sys.executable}\n"
        "address: 127.0.0.1\nprocesses:\n  - {name: learner, role: learner}\n"
        "  - {name: actor-0, role: actor, host: robot@localhost}\n"
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc, out = start_launch(tmp_path, str(layout), "train.total_env_steps=100000", env=env)
    wait_for(lambda: pids(out, "actor-0") and episodes_seen(run_dir_of(out)) >= 1, proc, out, "remote actor")
    run_dir = run_dir_of(out)
    keys = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file())
    folder = f".robo_rl_keys/{run_dir.name}"
    assert keys == [f"{folder}/actor-0.key", f"{folder}/actor-0.key_secret", f"{folder}/learner.key"]
    args = json.loads((run_dir / "launch.json").read_text())["processes"]
    assert f"transport.curve_keys_dir={remote / folder}" in args["actor-0"]["args"]
    assert f"transport.curve_keys_dir={run_dir / 'keys'}" in args["learner"]["args"]  # CURVE on this link
    first_line = (run_dir / "logs" / "actor-0.log").read_text().splitlines()[0]
    remote_pid = int(re.fullmatch(r"launch: remote pid (\d+)", first_line).group(1))
    children = [remote_pid, *pids(out, "learner"), *pids(out, "actor-0")]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130, out.read_text()[-3000:]
    assert re.search(r"actor-0\s+pid\s+\d+\s+exited\(130\)", out.read_text())  # stopped by `kill -INT` over ssh
    assert "actor-0: interrupted" in (run_dir / "logs" / "actor-0.log").read_text()
    assert all(gone(p) for p in children), children
    end = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert end["kind"] == "end" and end["reason"].startswith("interrupted") and end["checkpoint"]
    assert "interrupted: stopping every process" in out.read_text()
