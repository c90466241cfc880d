"""Where the links listen: a ZeroMQ endpoint's text, and ports free to bind (chosen away from the kernel's own)."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import numpy as np


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
FREE_PORT_SPAN = 10_000  # free ports are drawn from this many ports just below the kernel's ephemeral range
_HANDED_OUT: set[int] = set()  # the ports this process was given: a later call gives none of them again
RESERVE_S = 120.0  # a port handed out is kept from every other process's draw this long: time to start and bind


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` TCP ports free on `host` right now (for the launcher, tests, benchmarks and side-by-side runs).

    Drawn at random from just below the kernel's ephemeral range where Linux says where that is: a port the kernel
    hands out itself (bind to port 0) is one an outgoing connection of any process can take between this choice and
    the learner's bind, and on a busy machine one did; outside that range only another listener can. Elsewhere, or
    if too few are free there, the kernel's own choice. No port is handed out twice in one process (until half the
    span has been): two calls made before either caller binds (a GUI's port, then its learner's) once drew the same
    port, and the second bind failed. Nor, for `RESERVE_S`, to another process of this user: each port drawn is
    reserved by a marker file (`reservation_folder`), since two processes drawing at once (two test workers,
    side-by-side runs) can each find a port free that the other's learner binds seconds later; one such bind failed."""
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
                if not _reserve(int(port)):  # another process drew it and may not have bound it yet
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


def reservation_folder() -> Path:
    return Path(tempfile.gettempdir()) / f"robo_rl-ports-{os.getuid()}"


def _reserve(port: int) -> bool:
    """Mark `port` as drawn, for other processes; False if another drew it under `RESERVE_S` ago. Where no marker can
    be written (a read-only temp folder), every port is the caller's."""
    marker = reservation_folder() / str(port)
    try:
        marker.parent.mkdir(mode=0o700, exist_ok=True)
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        try:
            if time.time() - marker.stat().st_mtime < RESERVE_S:
                return False
            os.utime(marker)  # an old reservation: its port was bound or given up long ago
            return True
        except OSError:
            return False
    except OSError:
        return True


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range, or None where it cannot be read."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return low if low > 1024 else None
