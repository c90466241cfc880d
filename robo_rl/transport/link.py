"""The three channels between actors and the learner, on ZeroMQ sockets.

data:    actor PUSH → learner PULL, step batches (each frame once)
weights: learner PUB → actors SUB, policy weights (latest wins) and a small status message
ctrl:    actor DEALER ↔ learner ROUTER, hello/welcome (schema + config hash), heartbeats, stop
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import time

import numpy as np
import zmq

from robo_rl.transport.codec import MessageError, decode, encode

log = logging.getLogger(__name__)


class TransportError(RuntimeError):
    """A transport problem a user can fix; the text says how."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


class LearnerLink:
    """The learner's side: binds all three channels."""

    def __init__(self, host: str, data_port: int, weights_port: int, ctrl_port: int, config_hash: str,
                 max_messages_per_poll: int = 64) -> None:  # fmt: skip
        if not _is_loopback(host):
            raise TransportError(
                f"refusing to bind {host}: only loopback is allowed without CURVE authentication; "
                "use transport.host=127.0.0.1 (and an SSH tunnel for remote actors)"
            )
        self.config_hash = config_hash
        self.max_messages_per_poll = max_messages_per_poll
        self.ctx = zmq.Context()
        self.pull = self._bind(zmq.PULL, host, data_port, "transport.data_port")
        self.pub = self._bind(zmq.PUB, host, weights_port, "transport.weights_port")
        self.router = self._bind(zmq.ROUTER, host, ctrl_port, "transport.ctrl_port")
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)
        self.poller.register(self.router, zmq.POLLIN)
        self.actors: dict[str, dict] = {}  # actor id → {"last_seen": t, "received": n}
        self.bad_messages = 0
        self._weights: list | None = None

    def _bind(self, kind: int, host: str, port: int, key: str) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(endpoint(host, port))
        except zmq.ZMQError as e:
            self.close()
            if e.errno == zmq.EADDRINUSE:
                raise TransportError(
                    f"port {port} on {host} is already in use (is another learner running?): "
                    f"stop it or pick a free port with {key}=<port>"
                ) from None
            raise TransportError(f"cannot bind {endpoint(host, port)}: {e}") from None
        return sock

    def poll(self, timeout_ms: int = 0) -> list[tuple[str, dict]]:
        """Wait up to `timeout_ms` for traffic; answer ctrl messages; return received step batches."""
        received = []
        events = dict(self.poller.poll(timeout_ms))
        if self.router in events:
            self._drain_ctrl()
        if self.pull in events:
            for _ in range(self.max_messages_per_poll):
                try:
                    frames = self.pull.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                try:
                    kind, meta, arrays = decode([f.buffer for f in frames])
                    if kind != "steps":
                        raise MessageError(f"unexpected kind '{kind}' on the data channel")
                    actor = str(meta.get("actor", "?"))
                except MessageError as e:
                    self.bad_messages += 1
                    log.warning("dropped a data message: %s", e)
                    continue
                info = self.actors.setdefault(actor, {"last_seen": time.monotonic(), "received": 0})
                info["last_seen"] = time.monotonic()
                received.append((actor, arrays))
        return received

    def count_received(self, actor: str, n: int) -> None:
        self.actors.setdefault(actor, {"last_seen": time.monotonic(), "received": 0})["received"] += n

    def _drain_ctrl(self) -> None:
        while True:
            try:
                ident, *frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                kind, meta, _ = decode(frames)
            except MessageError as e:
                self.bad_messages += 1
                log.warning("dropped a ctrl message: %s", e)
                continue
            actor = ident.decode(errors="replace")
            if kind == "hello":
                if meta.get("config_hash") != self.config_hash:
                    reason = (f"config hash {meta.get('config_hash')} differs from the learner's {self.config_hash}: "
                              "start both from the same config")  # fmt: skip
                    self.router.send_multipart([ident, *encode("refused", {"reason": reason})])
                    continue
                self.actors.setdefault(actor, {"received": 0})["last_seen"] = time.monotonic()
                self.router.send_multipart([ident, *encode("welcome", {"config_hash": self.config_hash})])
                if self._weights is not None:
                    self.router.send_multipart([ident, *self._weights])  # a late joiner gets weights at once
            elif kind == "heartbeat" and actor in self.actors:
                self.actors[actor]["last_seen"] = time.monotonic()

    def publish_weights(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        self._weights = encode("weights", {"version": version}, arrays)
        self.pub.send_multipart(self._weights)

    def publish_status(self, meta: dict) -> None:
        self.pub.send_multipart(encode("status", meta))

    def stop_actors(self, reason: str) -> None:
        msg = encode("stop", {"reason": reason})
        self.pub.send_multipart(msg)
        for actor in self.actors:
            self.router.send_multipart([actor.encode(), *msg])

    def close(self) -> None:
        self.ctx.destroy(linger=0)


class ActorLink:
    """An actor's side: connects to the learner's three channels; never blocks the control loop."""

    def __init__(self, host: str, data_port: int, weights_port: int, ctrl_port: int, actor_id: str,
                 max_queued_messages: int = 1000) -> None:  # fmt: skip
        self.actor_id = actor_id
        self.host, self.ctrl_port = host, ctrl_port
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 100)
        self.push.setsockopt(zmq.LINGER, 2000)  # give queued steps a moment to leave on close
        self.push.connect(endpoint(host, data_port))
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(endpoint(host, weights_port))
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.IDENTITY, actor_id.encode())
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.connect(endpoint(host, ctrl_port))
        self.outbox: collections.deque = collections.deque(maxlen=max_queued_messages)
        self.dropped_messages = 0

    def hello(self, config_hash: str, timeout_s: float) -> list[tuple[str, dict, dict]]:
        """Say hello and wait for the welcome; returns any messages that came with it (e.g. weights)."""
        self.dealer.send_multipart(encode("hello", {"config_hash": config_hash, "actor": self.actor_id}))
        if not self.dealer.poll(int(timeout_s * 1000)):
            raise TransportError(
                f"no learner answered at {endpoint(self.host, self.ctrl_port)} within {timeout_s:.0f} s: "
                "start `robo-rl learner` first, or point transport.host/ctrl_port at it"
            )
        kind, meta, _ = decode(self.dealer.recv_multipart())
        if kind == "refused":
            raise TransportError(f"the learner refused this actor: {meta.get('reason')}")
        return self.poll(timeout_ms=200)

    def send_steps(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Queue a step batch and send what the socket takes now; a full queue drops the oldest."""
        if len(self.outbox) == self.outbox.maxlen:
            self.dropped_messages += 1
        self.outbox.append(encode("steps", {"actor": self.actor_id, **meta}, arrays))
        self.flush()

    def flush(self) -> None:
        while self.outbox:
            try:
                self.push.send_multipart(self.outbox[0], zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.outbox.popleft()

    def heartbeat(self) -> None:
        self.dealer.send_multipart(encode("heartbeat", {"actor": self.actor_id}), zmq.NOBLOCK)

    def poll(self, timeout_ms: int = 0) -> list[tuple[str, dict, dict]]:
        """Messages from the learner (weights, status, stop), oldest first; never blocks past timeout."""
        out = []
        for sock in (self.dealer, self.sub):
            if timeout_ms and not out and not sock.poll(timeout_ms if sock is self.dealer else 0):
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                try:
                    out.append(decode(frames))
                except MessageError as e:
                    log.warning("dropped a message from the learner: %s", e)
        return out

    def close(self, linger_s: float = 2.0) -> None:
        deadline = time.monotonic() + linger_s
        while self.outbox and time.monotonic() < deadline:
            self.flush()
            time.sleep(0.01)
        self.ctx.destroy(linger=int(linger_s * 1000))
