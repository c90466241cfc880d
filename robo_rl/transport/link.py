"""The three channels between actors and the learner, on ZeroMQ sockets.

data:    actor PUSH → learner PULL, step batches (each frame once), numbered per actor session
weights: learner PUB → actors SUB, policy weights (latest wins) and a small status message
ctrl:    actor DEALER ↔ learner ROUTER: hello/welcome (schema, config hash), acks, heartbeats, stop

Delivery: every data message carries (actor, session, seq). The learner accepts a message only when
its seq is the next one for that session, and acknowledges what it has taken. The actor keeps what is
not acknowledged (bounded) and, when the learner restarts (a new `incarnation` in its replies) or goes
silent, says hello again and resends it. So nothing is lost or taken twice while the actor's buffer holds.

This file: the protocol's shared names and the learner's side; `actor_link.py`: the actor's side.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time

import numpy as np
import zmq

from robo_rl.transport.codec import MessageError, decode, encode
from robo_rl.transport.security import CurveKeys, check_bind_allowed
from robo_rl.transport.shm_weights import SharedWeightsWriter, shm_available

# PUB/SUB topics (a first frame before the message): subscribers filter at the publisher, so an actor that
# reads weights from shared memory is never sent the 40 MB TCP copy.
TOPIC_WEIGHTS, TOPIC_WEIGHTS_SHM, TOPIC_STATUS, TOPIC_STOP = b"w", b"m", b"s", b"x"
LEARNER_KINDS = ("ack", "status", "weights", "weights_shm")  # messages stamped with the learner's incarnation

log = logging.getLogger(__name__)


class TransportError(RuntimeError):
    """A transport problem a user can fix; the text says how."""


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` TCP ports free on `host` right now (for tests, benchmarks and side-by-side runs)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def new_id() -> int:
    return int.from_bytes(os.urandom(6), "little")


class LearnerLink:
    """The learner's side: binds all three channels."""

    def __init__(self, host: str, data_port: int, weights_port: int, ctrl_port: int, config_hash: str,
                 max_messages_per_poll: int = 64, actor_timeout_s: float = 3.0, max_message_mb: float = 512.0,
                 curve: CurveKeys | None = None, shared_memory_weights: bool = True) -> None:  # fmt: skip
        check_bind_allowed(host, curve)
        self.config_hash = config_hash
        self.incarnation = new_id()  # tells actors that this learner is a new process
        self.max_messages_per_poll = max_messages_per_poll
        self.actor_timeout_s = actor_timeout_s
        self.ctx = zmq.Context()
        self.curve = curve
        self._shm: SharedWeightsWriter | None = None
        self._auth = curve.start_authenticator(self.ctx) if curve else None
        self.max_message_bytes = int(max_message_mb * 2**20)
        hard_cap = 4 * self.max_message_bytes  # beyond this ZeroMQ drops the connection before we see the message
        self.pull = self._bind(zmq.PULL, host, data_port, "transport.data_port", hard_cap)
        self.pub = self._bind(zmq.PUB, host, weights_port, "transport.weights_port", hard_cap)
        self.router = self._bind(zmq.ROUTER, host, ctrl_port, "transport.ctrl_port", 1 << 20)
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)
        self.poller.register(self.router, zmq.POLLIN)
        # actor id → session, acked seq, last_seen, alive, its last reported stats
        self.actors: dict[str, dict] = {}
        self.bad_messages: collections.Counter = collections.Counter()  # reason → count
        self.duplicates = self.unannounced = 0
        self.auto_ack = True
        self._weights: list | None = None
        self._last_ack_sent: dict[str, int] = {}
        if shared_memory_weights and shm_available():
            self._shm = SharedWeightsWriter(f"{os.getpid()}_{self.incarnation:x}")

    def _bind(self, kind: int, host: str, port: int, key: str, max_bytes: int) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if kind != zmq.PUB:
            sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)  # an oversized frame drops the sender's connection
        if self.curve:
            self.curve.make_server(sock)
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

    # --- receiving ----------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0) -> list[tuple[str, dict, int, int]]:
        """Wait up to `timeout_ms` for traffic; answer ctrl messages; return new step batches in order,
        as (actor, arrays, session, seq)."""
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
                accepted = self._accept_data([f.buffer for f in frames])
                if accepted is not None:
                    received.append(accepted)
        self.send_acks()
        self._check_liveness()
        return received

    def reject(self, reason: str, sender: str = "?") -> None:
        self.bad_messages[reason.split(":")[0]] += 1
        log.warning("dropped a message from %s: %s", sender, reason)

    def _accept_data(self, frames: list) -> tuple[str, dict, int, int] | None:
        size = sum(memoryview(f).nbytes for f in frames)
        if size > self.max_message_bytes:
            self.reject(f"oversized: {size / 2**20:.1f} MB over the {self.max_message_bytes / 2**20:.0f} MB limit")
            return None
        try:
            kind, meta, arrays = decode(frames)
        except MessageError as e:
            self.reject(f"undecodable: {e}")
            return None
        actor = str(meta.get("actor", "?"))
        info = self.actors.get(actor)
        if kind != "steps":
            self.reject(f"wrong kind: '{kind}' on the data channel", actor)
            return None
        if info is None or info["session"] != meta.get("session"):
            self.unannounced += 1  # queued for a learner that has since restarted; resent after the hello
            return None
        seq = meta.get("seq")
        if not isinstance(seq, int):
            self.reject("no sequence number", actor)
            return None
        if seq <= info["acked"]:
            self.duplicates += 1  # resent after a reconnect, but this learner already has it
            return None
        if seq != info["acked"] + 1:
            self.reject(f"gap: seq {seq} after {info['acked']}", actor)
            return None
        info["acked"] = seq
        info["last_seen"] = time.monotonic()
        return actor, arrays, info["session"], seq

    def _drain_ctrl(self) -> None:
        while True:
            try:
                ident, *frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            actor = ident.decode(errors="replace")
            try:
                kind, meta, _ = decode(frames)
            except MessageError as e:
                self.reject(f"undecodable ctrl: {e}", actor)
                if "schema version" in str(e):  # tell the actor, so it stops with a clear error instead of waiting
                    self.router.send_multipart([ident, *encode("refused", {"reason": str(e)})])
                continue
            if kind == "hello":
                self._welcome(ident, actor, meta)
            elif kind == "heartbeat" and actor in self.actors:
                info = self.actors[actor]
                info["last_seen"] = time.monotonic()
                info["stats"] = meta.get("stats", {})
                if not info["alive"]:
                    info["alive"] = True
                    log.info("actor %s is back", actor)
                self.router.send_multipart([ident, *encode("ack", self._ack_meta(actor))])
            elif kind == "bye" and actor in self.actors:
                self.actors[actor]["alive"] = False
                log.info("actor %s left: %s", actor, meta.get("reason", ""))

    def _welcome(self, ident: bytes, actor: str, meta: dict) -> None:
        if meta.get("config_hash") != self.config_hash:
            reason = (f"config hash {meta.get('config_hash')} differs from the learner's {self.config_hash}: "
                      "start both from the same config")  # fmt: skip
            self.router.send_multipart([ident, *encode("refused", {"reason": reason})])
            return
        info = self.actors.get(actor)
        if info is None or info["session"] != meta.get("session"):
            # a new actor process, or one this learner has not met: take its stream from its first unacked message
            acked = int(meta.get("first_unacked", 1)) - 1
            info = {"session": meta.get("session"), "acked": acked, "durable": acked, "stats": {}}
            self.actors[actor] = info
        info.update(last_seen=time.monotonic(), alive=True)
        self.router.send_multipart([ident, *encode("welcome", self._ack_meta(actor))])
        if self._weights is not None:
            self.router.send_multipart([ident, *self._weights])  # a late joiner gets weights at once

    def _ack_meta(self, actor: str) -> dict:
        """`acked`: what the actor may forget (durably stored, or just received with auto_ack);
        `received`: what this learner has taken (counted in its env steps)."""
        info = self.actors[actor]
        acked = info["acked"] if self.auto_ack else info["durable"]
        return {"incarnation": self.incarnation, "session": info["session"], "acked": acked, "received": info["acked"]}

    def ack(self, actor: str, seq: int) -> None:
        """Acknowledge messages up to `seq` (with auto_ack off, call this once they are stored durably)."""
        info = self.actors.get(actor)
        if info is None:
            return
        info["durable"] = max(info["durable"], seq)
        key = (info["acked"], info["durable"])
        if self._last_ack_sent.get(actor) != key:
            self._last_ack_sent[actor] = key
            self.router.send_multipart([actor.encode(), *encode("ack", self._ack_meta(actor))])

    def send_acks(self) -> None:
        for actor, info in self.actors.items():
            if info.get("alive"):
                self.ack(actor, info["acked"] if self.auto_ack else info["durable"])

    def expect(self, actor: str, session, seq: int) -> None:
        """A restarted learner already holds `actor`'s messages up to `seq` of `session` (from its stored
        replay): when that actor process says hello again, its stream continues after `seq`."""
        session, seq = int(session), int(seq)  # as the actor sends them: a str or numpy session would never match
        self.actors[actor] = {"session": session, "acked": seq, "durable": seq, "stats": {}, "alive": False,
                              "last_seen": time.monotonic()}  # fmt: skip

    def _check_liveness(self) -> None:
        now = time.monotonic()
        for actor, info in self.actors.items():
            if info.get("alive") and now - info["last_seen"] > self.actor_timeout_s:
                info["alive"] = False
                log.warning("actor %s lost: nothing heard for %.1f s", actor, now - info["last_seen"])

    @property
    def alive_actors(self) -> list[str]:
        return [a for a, info in self.actors.items() if info.get("alive")]

    # --- sending ------------------------------------------------------------------------------
    def publish_weights(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        self._weights = encode("weights", {"version": version, "incarnation": self.incarnation}, arrays)
        self.pub.send_multipart([TOPIC_WEIGHTS, *self._weights], copy=False)
        if self._shm is not None:
            notice = {**self._shm.write(version, arrays), "incarnation": self.incarnation}
            self.pub.send_multipart([TOPIC_WEIGHTS_SHM, *encode("weights_shm", notice)])

    def publish_status(self, meta: dict) -> None:
        self.pub.send_multipart([TOPIC_STATUS, *encode("status", {**meta, "incarnation": self.incarnation})])

    def stop_actors(self, reason: str) -> None:
        msg = encode("stop", {"reason": reason})
        self.pub.send_multipart([TOPIC_STOP, *msg])
        for actor in self.actors:
            self.router.send_multipart([actor.encode(), *msg])

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
        if self._shm is not None:
            self._shm.close()
        self.ctx.destroy(linger=0)
