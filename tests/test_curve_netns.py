"""CURVE off loopback across a real network boundary: a network namespace joined to this one by a veth pair, the
learner (and the GUI's actor socket) bound to this side's address with CURVE keys, actors inside the namespace
(`ip netns exec`, tests/curve_netns_peer.py). An actor with keys is served; a client without keys is never heard.

Needs root (CAP_NET_ADMIN) and iproute2: elsewhere each test skips saying which was missing."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from robo_rl.config import load_config
from robo_rl.transport.link import LearnerLink, TransportError, free_ports
from robo_rl.transport.security import CurveKeys, generate_keys

ROOT = Path(__file__).resolve().parents[1]
PEER_TIMEOUT_S = 15.0  # the peer's Python start, its hellos and waits: a few seconds on a loaded 2-core machine
SUBNET_PREFIX = "10.199"


@dataclass
class Namespace:
    name: str
    host_ip: str  # this side of the veth pair, where the learner binds
    peer_ip: str  # the namespace's side

    def run_peer(self, mode: str, ports: list[int], keys_dir: Path) -> subprocess.Popen:
        command = ["ip", "netns", "exec", self.name, sys.executable, "-m", "tests.curve_netns_peer", mode]
        command += [self.host_ip, ",".join(map(str, ports)), str(keys_dir)]
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


def _free_subnet() -> str:
    """A 10.199.N.0/24 no interface here uses (tests running at once each draw their own)."""
    used = _ip("-4", "addr").stdout
    for _ in range(50):
        subnet = f"{SUBNET_PREFIX}.{secrets.randbelow(254) + 1}"
        if f"{subnet}." not in used:
            return subnet
    pytest.skip(f"no free {SUBNET_PREFIX}.N.0/24 subnet for the veth pair")


@pytest.fixture(scope="module")
def netns():
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed: no network namespace can be made")
    if os.geteuid() != 0:
        pytest.skip("making a network namespace and a veth pair needs root (CAP_NET_ADMIN); this test runs as a user")
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"rrl{tag}", f"rrl{tag}h", f"rrl{tag}n"  # interface names: at most 15 characters
    subnet = _free_subnet()
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"`ip netns add` is not permitted here: {made.stderr.strip()}")
    try:
        steps = [
            ("link", "add", host_if, "type", "veth", "peer", "name", ns_if),
            ("link", "set", ns_if, "netns", name),
            ("addr", "add", f"{subnet}.1/24", "dev", host_if),
            ("link", "set", host_if, "up"),
            ("netns", "exec", name, "ip", "addr", "add", f"{subnet}.2/24", "dev", ns_if),
            ("netns", "exec", name, "ip", "link", "set", ns_if, "up"),
            ("netns", "exec", name, "ip", "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` is not permitted here: {done.stderr.strip()}")
        yield Namespace(name, f"{subnet}.1", f"{subnet}.2")
    finally:
        _ip("netns", "del", name)  # takes the namespace's end of the pair, and with it this end
        _ip("link", "del", host_if)  # in case the pair was made but never moved


def finish(peer: subprocess.Popen) -> dict:
    try:
        out, err = peer.communicate(timeout=PEER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        peer.kill()
        out, err = peer.communicate()
    assert peer.returncode == 0 and out.strip(), f"the peer in the namespace failed ({peer.returncode}): {err[-2000:]}"
    return json.loads(out.strip().splitlines()[-1])


def test_an_actor_across_a_network_boundary_is_served_with_curve_and_a_keyless_client_never_heard(netns, tmp_path):
    keys = tmp_path / "keys"
    generate_keys(keys, ["actor-0"])
    ports = free_ports(3)
    with pytest.raises(TransportError, match=f"refusing to bind {netns.host_ip} without authentication"):
        LearnerLink(netns.host_ip, *ports, config_hash="t")
    learner = LearnerLink(netns.host_ip, *ports, config_hash="t", curve=CurveKeys.load(keys, "learner"))
    peer = netns.run_peer("link", ports, keys)
    received, published = [], 0.0
    try:
        deadline = time.monotonic() + PEER_TIMEOUT_S
        while peer.poll() is None and time.monotonic() < deadline:
            received.extend(learner.poll(50))
            if received and time.monotonic() - published > 0.2:  # a subscriber may join late: publish until it has
                learner.publish_weights(1, {"w": np.full(3, 2.0, np.float32)})
                published = time.monotonic()
        seen = finish(peer)
    finally:
        if peer.poll() is None:
            peer.kill()
        learner.close()
    assert seen["plain"].startswith("refused: ") and "no learner answered" in seen["plain"]
    assert seen.get("weights") == {"version": 1, "w": [2.0, 2.0, 2.0]}, seen
    assert [(a, arrays["payload"].tolist()) for a, arrays, *_ in received] == [("actor-0", [7])]
    assert set(learner.actors) == {"actor-0"} and learner.unannounced == 0 and not learner.bad_messages


def test_the_guis_actor_socket_across_a_network_boundary_hears_only_the_actor_with_keys(netns, tmp_path):
    from robo_rl.gui.server import GuiHub

    keys = tmp_path / "keys"
    generate_keys(keys, ["actor-0"])
    port = free_ports(1)[0]
    gui = ("gui=true", f"gui.zmq_host={netns.host_ip}", f"gui.zmq_port={port}")
    with pytest.raises(ValueError, match=f"gui.zmq_host={netns.host_ip} is not loopback: set transport.curve_keys_dir"):
        GuiHub(load_config(list(gui)), "token")
    hub = GuiHub(load_config([*gui, f"transport.curve_keys_dir={keys}"]), "token")
    peer = netns.run_peer("gui", [port], keys)

    async def listen() -> None:
        actors = asyncio.create_task(hub.actor_loop())
        deadline = time.monotonic() + PEER_TIMEOUT_S
        while peer.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        actors.cancel()

    try:
        asyncio.run(listen())
        counts = finish(peer)
    finally:
        if peer.poll() is None:
            peer.kill()
        hub.close()
    assert set(hub.actors) == {"actor-0"} and hub.counts["bad_actor_messages"] == 0
    assert counts["actor-0"].get("sent", 0) > 0 and counts["plain"].get("sent", 0) == 0, counts
