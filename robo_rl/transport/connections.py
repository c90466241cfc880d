"""Which ctrl connections have closed: the learner's ROUTER socket monitor, read without blocking.

A process that dies (a crash, `kill -9`) has its TCP connections closed by its kernel at once; ZeroMQ reports each
closed connection on the ROUTER's monitor by its file descriptor, and every message says which descriptor it came
on (`ZMQ_SRCFD`). So the learner knows a session's connection is gone as soon as its process is, and a restarted
actor is welcomed at its first hello instead of waiting out the liveness timeout.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import parse_monitor_message


def source_fd(frame: zmq.Frame) -> int | None:
    """The descriptor of the connection a received frame came on (None where ZeroMQ cannot say)."""
    try:
        fd = frame.get(zmq.SRCFD)
    except zmq.ZMQError:
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


class ConnectionWatch:
    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock
        self.monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    def closed(self) -> list[int]:
        """The descriptors of the connections closed since the last call, in the order they closed."""
        out = []
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return out
            event = parse_monitor_message(frames)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                out.append(int(event["value"]))
