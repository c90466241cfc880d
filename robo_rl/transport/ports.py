"""Where the links listen: a ZeroMQ endpoint's text, and ports free to bind (chosen away from the kernel's own)."""

from __future__ import annotations

import socket

import numpy as np


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
FREE_PORT_SPAN = 10_000  # free ports are drawn from this many ports just below the kernel's ephemeral range
_HANDED_OUT: set[int] = set()  # the ports this process was given: a later call gives none of them again


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` TCP ports free on `host` right now (for the launcher, tests, benchmarks and side-by-side runs).

    Drawn at random from just below the kernel's ephemeral range where Linux says where that is: a port the kernel
    hands out itself (bind to port 0) is one an outgoing connection of any process can take between this choice and
    the learner's bind, and on a busy machine one did; outside that range only another listener can. Elsewhere, or
    if too few are free there, the kernel's own choice. No port is handed out twice in one process (until half the
    span has been): two calls made before either caller binds (a GUI's port, then its learner's) once drew the same
    port, and the second bind failed."""
    if len(_HANDED_OUT) > FREE_PORT_SPAN // 2:
        _HANDED_OUT.clear()
    low = _ephemeral_low()
    socks: list[socket.socket] = []
    try:
        if low is not None:
            candidates = np.random.default_rng().permutation(np.arange(max(1024, low - FREE_PORT_SPAN), low))
            for port in [int(c) for c in candidates if int(c) not in _HANDED_OUT][: 50 * n]:
                s = socket.socket()
                try:
                    s.bind((host, int(port)))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
                if len(socks) == n:
                    break
        while len(socks) < n:
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
        ports = [s.getsockname()[1] for s in socks]
        _HANDED_OUT.update(ports)
        return ports
    finally:
        for s in socks:
            s.close()


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range, or None where it cannot be read."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return low if low > 1024 else None
