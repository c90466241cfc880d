"""The actor's side of the link: numbered step batches kept until acknowledged, resent after a learner
restart; weights over TCP or, for a local learner, from shared memory. See `link.py` for the protocol."""

from __future__ import annotations

import collections
import logging
import os
import time

import numpy as np
import zmq

from robo_rl.transport.codec import MessageError, decode, encode
from robo_rl.transport.link import (
    LEARNER_KINDS,
    TOPIC_STATUS,
    TOPIC_STOP,
    TOPIC_WEIGHTS,
    TOPIC_WEIGHTS_SHM,
    TransportError,
    connection_name,
    endpoint,
    new_id,
)
from robo_rl.transport.messages import ACTOR_CTRL_KINDS, ACTOR_SUB_KINDS
from robo_rl.transport.security import CurveKeys, is_loopback
from robo_rl.transport.shm_weights import shm_available

log = logging.getLogger(__name__)


class ActorLink:
    """An actor's side: connects to the learner's three channels; every call returns without blocking
    (except `hello`). Not thread-safe: one thread owns it (see `ActorTransport`)."""

    def __init__(
        self,
        host: str,
        data_port: int,
        weights_port: int,
        ctrl_port: int,
        actor_id: str,
        max_unacked_messages: int = 2000,
        learner_timeout_s: float = 3.0,
        curve: CurveKeys | None = None,
        shared_memory_weights: bool = True,
    ) -> None:
        self.actor_id = actor_id
        self.host, self.ctrl_port = host, ctrl_port
        self.session = new_id()  # this actor process; the learner numbers our messages within it
        self.token = os.urandom(16).hex()  # proves to the learner that data for this session comes from us
        self.learner_timeout_s = learner_timeout_s
        self.max_unacked = max_unacked_messages
        self.ctx = zmq.Context()
        self.push = self._connect(zmq.PUSH, host, data_port, curve)
        self.push.setsockopt(zmq.SNDHWM, 100)
        self.sub = self._connect(zmq.SUB, host, weights_port, curve)
        self.shm_weights = shared_memory_weights and is_loopback(host) and shm_available()
        for topic in (TOPIC_STATUS, TOPIC_STOP, TOPIC_WEIGHTS_SHM if self.shm_weights else TOPIC_WEIGHTS):
            self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        # a routing id of its own per process, so a second process under the same actor id reaches the
        # learner (and is refused by name) instead of being dropped by ZeroMQ as a duplicate connection
        self.dealer = self._connect(
            zmq.DEALER, host, ctrl_port, curve, identity=connection_name(actor_id, self.session)
        )
        self.seq = 0
        self.unacked: collections.OrderedDict[int, tuple] = collections.OrderedDict()  # seq → (message, env steps)
        self.unacked_steps = 0  # env steps in unacknowledged messages (not yet stored by the learner)
        self.received = 0  # the learner has taken messages up to this seq (it may not have stored them yet)
        self.unreceived_steps = 0  # env steps in messages past `received`: what the learner has not counted yet
        self.next_to_send = 1
        self.dropped_messages = 0
        self.rejected_messages = 0  # reached the learner but could not be stored (it said why)
        self.bad_messages = 0  # from the learner, malformed: dropped
        self.connected = False
        self.incarnation: int | None = None
        self.config_hash = ""
        self.env_spec: str | None = None  # the env's spaces as JSON, told to the learner in every hello
        self._last_heard = self._last_hello = time.monotonic()

    def _connect(self, kind, host, port, curve, identity: bytes | None = None) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if identity:
            sock.setsockopt(zmq.IDENTITY, identity)
        if curve:
            curve.make_client(sock)
        sock.connect(endpoint(host, port))
        return sock

    def use_tcp_weights(self, why: str) -> None:
        """Shared memory did not work here (another container, no access): take weights over TCP instead."""
        if self.shm_weights:
            log.warning("weights from shared memory failed (%s); receiving them over TCP", why)
            self.sub.setsockopt(zmq.UNSUBSCRIBE, TOPIC_WEIGHTS_SHM)
            self.sub.setsockopt(zmq.SUBSCRIBE, TOPIC_WEIGHTS)
            self.shm_weights = False

    # --- session ------------------------------------------------------------------------------
    def _send_hello(self) -> None:
        first_unacked = next(iter(self.unacked), self.seq + 1)
        meta = {
            "config_hash": self.config_hash,
            "actor": self.actor_id,
            "session": self.session,
            "token": self.token,
            "first_unacked": first_unacked,
        }
        if self.env_spec is not None:
            meta["env_spec"] = self.env_spec
        self._ctrl_send(encode("hello", meta))
        self._last_hello = time.monotonic()

    def _ctrl_send(self, frames: list) -> None:
        """Best effort: with no learner connected the message waits nowhere (the next hello/heartbeat repeats it)."""
        try:
            self.dealer.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass

    def hello(self, config_hash: str, timeout_s: float) -> list[tuple[str, dict, dict]]:
        """Say hello and wait for the welcome; returns any messages that came with it (e.g. weights)."""
        self.config_hash = config_hash
        self._send_hello()
        deadline = time.monotonic() + timeout_s
        out: list = []
        while not self.connected:
            left = deadline - time.monotonic()
            if left <= 0 or not self.dealer.poll(int(left * 1000)):
                raise TransportError(
                    f"no learner answered at {endpoint(self.host, self.ctrl_port)} within {timeout_s:.0f} s: "
                    "start `robo-rl learner` first, or point transport.host/ctrl_port at it"
                )
            out += self.poll()
        return out + self.poll(timeout_ms=100)

    def _on_welcome(self, meta: dict) -> None:
        self.incarnation = meta["incarnation"]
        self._drop_acked(meta["acked"])
        # a restarted learner has taken less than the last one; none can have taken what was never sent
        self.received = min(meta.get("received", meta["acked"]), self.seq)
        self.unreceived_steps = sum(steps for seq, (_, steps) in self.unacked.items() if seq > self.received)
        self.next_to_send = next(iter(self.unacked), self.seq + 1)  # resend all the learner has not taken
        self.connected = True
        self._last_heard = time.monotonic()
        self.flush()

    def _lost_learner(self, why: str) -> None:
        if self.connected:
            log.warning("lost the learner (%s); saying hello again, %d messages kept to resend", why, len(self.unacked))
        self.connected = False
        self._send_hello()

    def _drop_acked(self, acked: int | None) -> None:
        while acked is not None and self.unacked and next(iter(self.unacked)) <= acked:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        seq, (_, steps) = self.unacked.popitem(last=False)
        self.unacked_steps -= steps
        if seq > self.received:
            self.unreceived_steps -= steps

    def _on_received(self, received: int) -> None:
        received = min(received, self.seq)  # a learner cannot have taken what was never sent
        for seq in range(self.received + 1, received + 1):
            entry = self.unacked.get(seq)
            if entry is not None:
                self.unreceived_steps -= entry[1]
        self.received = max(self.received, received)

    # --- data ---------------------------------------------------------------------------------
    def send_steps(self, meta: dict, arrays: dict[str, np.ndarray], env_steps: int = 0) -> None:
        """Number and queue a step batch (holding `env_steps` env steps) and send what the socket takes now.
        When the bounded buffer is full, the oldest unacknowledged message is dropped and counted."""
        self.seq += 1
        header = {**meta, "actor": self.actor_id, "session": self.session, "seq": self.seq, "token": self.token}
        if len(self.unacked) >= self.max_unacked:
            self._forget_oldest()
            self.dropped_messages += 1
        self.unacked[self.seq] = (encode("steps", header, arrays), env_steps)
        self.unacked_steps += env_steps
        self.unreceived_steps += env_steps
        self.flush()

    def flush(self) -> None:
        while self.connected and self.next_to_send <= self.seq:
            entry = self.unacked.get(self.next_to_send)
            if entry is not None:
                try:
                    self.push.send_multipart(entry[0], zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    return
            self.next_to_send += 1

    def heartbeat(self, stats: dict | None = None) -> None:
        # what the data socket would not take yet (a learner restarted before its data port took connections again)
        # goes now: no later step may come to push it (an actor throttled on exactly these unsent steps waits for it)
        self.flush()
        stats = {
            "unacked": len(self.unacked),
            "dropped": self.dropped_messages,
            "rejected": self.rejected_messages,
            "bad_from_learner": self.bad_messages,
            **(stats or {}),
        }
        self._ctrl_send(encode("heartbeat", {"actor": self.actor_id, "stats": stats}))

    # --- receiving ----------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0) -> list[tuple[str, dict, dict]]:
        """Weights, status and stop messages from the learner, oldest first. Acks, welcomes and learner
        restarts are handled here. A malformed message is dropped and counted; only a refusal raises."""
        out = []
        if timeout_ms:
            zmq.select([self.dealer, self.sub], [], [], timeout_ms / 1000)
        for sock, accepted in ((self.dealer, ACTOR_CTRL_KINDS), (self.sub, ACTOR_SUB_KINDS)):
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                body = frames[1:] if sock is self.sub else frames  # the weights channel's first frame is its topic
                message = self.receive([f.buffer for f in body], accepted)
                if message is not None:
                    out.append(message)
        now = time.monotonic()
        if self.connected and now - self._last_heard > self.learner_timeout_s:
            self._lost_learner(f"nothing heard for {now - self._last_heard:.1f} s")
        elif not self.connected and self.config_hash and now - self._last_hello > 1.0:
            self._send_hello()
        self.flush()
        return out

    def receive(self, frames: list, accepted: tuple[str, ...]) -> tuple[str, dict, dict] | None:
        """Decode and handle one message from the learner; return it if it is for the caller (weights, status,
        stop). A malformed one is dropped and counted; only a refusal or another schema raises."""
        try:
            kind, meta, arrays = decode(frames, accepted)
        except MessageError as e:
            if "schema version" in str(e):
                raise TransportError(
                    f"the learner speaks another message schema ({e}): install the same robo_rl version on both sides"
                ) from None
            self.bad_messages += 1
            log.warning("dropped a message from the learner: %s", e)
            return None
        self._last_heard = time.monotonic()
        return self._on_message(kind, meta, arrays)

    def _on_message(self, kind: str, meta: dict, arrays: dict) -> tuple[str, dict, dict] | None:
        if kind == "refused":
            raise TransportError(f"the learner refused this actor: {meta['reason']}")
        if kind == "welcome":
            if meta["session"] == self.session:
                self._on_welcome(meta)
        elif kind in LEARNER_KINDS and self.connected and meta["incarnation"] != self.incarnation:
            self._lost_learner("it restarted")
        elif kind == "ack":
            if meta["session"] == self.session:
                self._on_received(meta.get("received", meta["acked"]))
                self._drop_acked(meta["acked"])
        elif kind == "rejected":
            if meta["session"] == self.session:
                self.rejected_messages += 1
                log.error("the learner could not store message %d of this actor: %s", meta["seq"], meta["reason"])
        else:
            return kind, meta, arrays
        return None

    def bye(self, reason: str) -> None:
        self._ctrl_send(encode("bye", {"actor": self.actor_id, "reason": reason}))

    def close(self, linger_s: float = 2.0, run_finished: bool = False, bye: str | None = None) -> None:
        """Give unacknowledged messages up to `linger_s` to be confirmed while the learner is there (a learner
        behind busy actors takes seconds to store a message), then close, saying what became of the rest. A learner
        that says it stops (the run is over, or it goes away) confirms nothing more: no wait after that. `bye`: the
        reason said to the learner once the wait is over (a learner stops confirming an actor that has left)."""
        deadline = time.monotonic() + linger_s
        if self.unacked and self.connected and linger_s >= 1.0:
            log.info(
                "waiting up to %.0f s (actor.drain_s) for the learner to confirm %d messages (%d env steps)",
                linger_s,
                len(self.unacked),
                self.unacked_steps,
            )
        beat = time.monotonic()
        while self.unacked and self.connected and time.monotonic() < deadline:
            if any(kind == "stop" for kind, _, _ in self.poll(timeout_ms=20)):
                break
            if time.monotonic() - beat > 0.5:  # still here: a learner confirms only actors it hears from
                self.heartbeat()
                beat = time.monotonic()
        if bye is not None:
            try:
                self.bye(bye)
            except Exception:  # noqa: BLE001 - the socket may already be gone; closing must not fail
                pass
        if self.unacked and run_finished:
            log.info(
                "%d messages (%d env steps) sent after the learner finished were not stored: the run already "
                "had all its env steps",
                len(self.unacked),
                self.unacked_steps,
            )
        elif self.unacked:
            log.warning(
                "%d messages (%d env steps) were never confirmed stored by the learner and are lost with this "
                "actor; a resumed learner has everything before them",
                len(self.unacked),
                self.unacked_steps,
            )
        self.ctx.destroy(linger=0)
