"""The ports of a launch: one free port per link the layout uses, chosen once, and a probe for the learner's."""

from __future__ import annotations

import socket

from launch.layout import Layout, override_key

TRANSPORT_PORTS = ("transport.data_port", "transport.weights_port", "transport.ctrl_port")
GUI_PORTS = ("gui.zmq_port", "gui.port")
CRITIC_PORT = "critic"  # `robo-rl critic serve port=`: not a config key, so not passed to the other processes
GUI_PAGE_PORT = 8765  # the page a person types in: kept when free


PROBE_TIMEOUT_S = 0.5  # a TCP connect to the learner's ctrl port: it is up once that port accepts


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
