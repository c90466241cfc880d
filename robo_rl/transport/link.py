"""The three channels between actors and the learner, on ZeroMQ sockets.

data:    actor PUSH → learner PULL, step batches (each frame once), numbered per actor session
weights: learner PUB → actors SUB, policy weights (latest wins) and a small status message
ctrl:    actor DEALER ↔ learner ROUTER: hello/welcome (schema, config hash), acks, heartbeats, stop

Delivery: every data message carries (actor, session, seq). The learner accepts a message only when
its seq is the next one for that session, and acknowledges what it has taken. The actor keeps what is
not acknowledged (bounded) and, when the learner restarts (a new `incarnation` in its replies) or goes
silent, says hello again and resends it. So nothing is lost or taken twice while the actor's buffer holds.

This file: the protocol's shared names and the learner's side; `actor_link.py`: the actor's side. It runs past ~400
lines as one idea: the learner's half of one protocol, whose checks read best beside the state they guard.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import os
import time

import numpy as np
import zmq

from robo_rl.transport.codec import decode, encode
from robo_rl.transport.connections import ConnectionWatch, source_fd
from robo_rl.transport.errors import MessageError, TransportError
from robo_rl.transport.log_gate import LogGate, held_note
from robo_rl.transport.messages import CTRL_KINDS, DATA_KINDS, MAX_TEXT, InvalidMessage
from robo_rl.transport.ports import endpoint
from robo_rl.transport.ports import free_ports as free_ports  # where callers have always imported it from
from robo_rl.transport.security import CurveKeys, check_bind_allowed, key_speaks_for
from robo_rl.transport.shm_weights import SharedWeightsWriter, shm_available

# PUB/SUB topics (a first frame before the message): subscribers filter at the publisher, so an actor that
# reads weights from shared memory is never sent the 40 MB TCP copy.
TOPIC_WEIGHTS, TOPIC_WEIGHTS_SHM, TOPIC_STATUS, TOPIC_STOP = b"w", b"m", b"s", b"x"
LEARNER_KINDS = ("ack", "status", "weights", "weights_shm")  # messages stamped with the learner's incarnation

log = logging.getLogger(__name__)


def new_id() -> int:
    return int.from_bytes(os.urandom(6), "little")


def _same_bytes(first: list, frames: list) -> bool:
    """Whether a resent message is byte for byte the first copy (compared only when a number comes again)."""
    if len(first) != len(frames):
        return False
    return all(
        np.array_equal(np.frombuffer(a, np.uint8), np.frombuffer(b.buffer, np.uint8))
        for a, b in zip(first, frames, strict=True)
    )


def _printable(ident: bytes) -> str:
    """A connection's routing id as text for a log line (it is whatever the peer chose)."""
    return ident[:80].decode("utf-8", errors="replace").encode("unicode_escape").decode()


SENDER_UNKNOWN = "?"


def connection_name(actor: str, session: int) -> bytes:
    """The routing id an actor's ctrl connection takes: its id and session, so a learner can tell its reconnect."""
    return f"{actor[:100]}#{session:x}".encode()


STALE_AFTER_CLOSE_S = 1.0  # ZeroMQ reconnects in 0.1 s; a heartbeat queued before a close is read with the close


def _sent_before_its_close(info: dict, ident: bytes) -> bool:
    """Whether a heartbeat on a session whose connection has just closed was queued before the close: ZeroMQ may
    report the close before the process's last messages are read, and such a heartbeat must not bring a killed actor
    back (its replacement would be refused). A live process's reconnect is heard at its next heartbeat."""
    closed = info.get("closed")
    return (
        not info["alive"]
        and closed is not None
        and closed[0] == ident
        and time.monotonic() - closed[1] < STALE_AFTER_CLOSE_S
    )


def _before_hello(info: dict | None, actor: str, ident: bytes) -> bool:
    """Whether a ctrl message comes from an actor process this learner has not welcomed yet but whose session it
    does not contradict: none is open under its id, or the one stored in the run folder is that connection's."""
    if info is None:
        return ident.startswith(f"{actor[:100]}#".encode())
    return info["ident"] is None and ident == connection_name(actor, info["session"])


def token_hash(token: str) -> str:
    """What the learner stores of an actor session's token: enough to recognise the process, useless to forge it."""
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def _proves_session(info: dict, token: str) -> bool:
    """Whether a hello's token is the one that opened this session: the token itself while this learner knows it;
    after a restart, a token whose hash is the stored one. What was read from disk is never a token: a session
    stored without its hash cannot be continued, and a hello carrying the stored hash as its token fails."""
    if info["token"] is not None:
        return hmac.compare_digest(token.encode(), info["token"].encode())
    return info["token_hash"] is not None and hmac.compare_digest(token_hash(token), info["token_hash"])


class LearnerLink:
    """The learner's side: binds all three channels.

    Identity: an actor process opens a session with a hello that carries a random token; the learner takes data
    for that session only with that token, and only from the connection (and with CURVE, the key) that said
    hello. A second live process under the same actor id is refused by name. A message number that comes again
    before its first copy is on disk is compared byte for byte with that copy (held until then, the same buffers
    the replay holds; released when the replay rejects it, and the oldest past `max_held_mb` per actor): if they
    differ, the conflict is reported and the session refused, so an actor never forgets data that was not stored.
    (One that comes again after it is on disk carries the session's token: it is the same process's resend of bytes
    already stored.) A session whose connection has closed (its process died) no longer holds its actor id.
    """

    def __init__(
        self,
        host: str,
        data_port: int,
        weights_port: int,
        ctrl_port: int,
        config_hash: str,
        max_messages_per_poll: int = 64,
        actor_timeout_s: float = 3.0,
        max_message_mb: float = 64.0,
        receive_queue_messages: int = 16,
        curve: CurveKeys | None = None,
        shared_memory_weights: bool = True,
        max_held_mb: float = 1024.0,
    ) -> None:
        check_bind_allowed(host, curve)
        self.config_hash = config_hash
        self.incarnation = new_id()  # tells actors that this learner is a new process
        self.max_messages_per_poll = max_messages_per_poll
        self.actor_timeout_s = actor_timeout_s
        self.ctx = zmq.Context()
        self.curve = curve
        self._key_names = curve.authorized_names() if curve else {}  # ZAP user id (z85 public key) → key name
        self._shm: SharedWeightsWriter | None = None
        self._auth = curve.start_authenticator(self.ctx) if curve else None
        self.max_message_bytes = int(max_message_mb * 2**20)
        self.max_held_bytes = int(max_held_mb * 2**20)  # per actor: copies of received, not yet durable messages
        # Memory held by queued messages is at most peers × receive_queue_messages × the frame cap: ZeroMQ stops
        # reading a peer whose queue is full. Frames between the limit and the cap are counted and dropped by us;
        # beyond the cap ZeroMQ drops the connection before we see the message.
        frame_cap = 2 * self.max_message_bytes
        self.pull = self._bind(zmq.PULL, host, data_port, "transport.data_port", frame_cap, receive_queue_messages)
        self.pub = self._bind(zmq.PUB, host, weights_port, "transport.weights_port", frame_cap, 0)
        self.router = self._bind(zmq.ROUTER, host, ctrl_port, "transport.ctrl_port", 1 << 20, 256)
        self.connections = ConnectionWatch(self.router)
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)
        self.poller.register(self.router, zmq.POLLIN)
        self.poller.register(self.connections.monitor, zmq.POLLIN)
        # actor id → its session: token, acked/durable seq, held frames, connection, liveness, last stats
        self.actors: dict[str, dict] = {}
        self.bad_messages: collections.Counter = collections.Counter()  # reason → count
        self.duplicates = self.unannounced = self.internal_errors = self.early_heartbeats = self.stale_heartbeats = 0
        self._log_gate = LogGate()  # drops are counted each; their log lines are thinned per reason
        self.auto_ack = True
        self.first_spec: str | None = None  # the env spec of the first welcomed actor that told one in its hello
        self.spec_check = None  # (spec text) -> why it does not fit this learner, or None; refuses such an actor
        self._weights: list | None = None
        self._last_ack_sent: dict[str, tuple] = {}
        if shared_memory_weights and shm_available():
            self._shm = SharedWeightsWriter(f"{os.getpid()}_{self.incarnation:x}")

    def _bind(self, kind: int, host: str, port: int, key: str, max_bytes: int, rcv_hwm: int) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if kind != zmq.PUB:
            sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)  # an oversized frame drops the sender's connection
            sock.setsockopt(zmq.RCVHWM, rcv_hwm)
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
    def poll(self, timeout_ms: int = 0) -> list[tuple[str, dict, int, int, str]]:
        """Wait up to `timeout_ms` for traffic; answer ctrl messages; return new step batches in order,
        as (actor, arrays, session, seq, session token hash). No message, however malformed, raises out of here."""
        received = []
        events = dict(self.poller.poll(timeout_ms))
        if self.connections.monitor in events:  # before the hellos: a dead process's id is free for its successor
            self._note_closed()
        if self.router in events:
            self._drain(self.router, self._handle_ctrl)
        if self.pull in events:
            take = self.max_messages_per_poll
            self._drain(self.pull, lambda frames: received.append(self._accept_data(frames)), take)
        self.send_acks()
        self._check_liveness()
        return [r for r in received if r is not None]

    def _drain(self, sock: zmq.Socket, handle, limit: int | None = None) -> None:
        n = 0
        while limit is None or n < limit:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            n += 1
            try:
                handle(frames)
            except Exception as e:  # the last line of defence: one bad message never stops the learner
                self.internal_errors += 1
                if (held := self._log_gate.admit(f"internal error {type(e).__name__}")) is not None:
                    sender = _printable(frames[0].bytes) if sock is self.router and frames else SENDER_UNKNOWN
                    log.exception(
                        "error handling a message from %s (dropped, learner serving on): %s%s",
                        sender,
                        e,
                        held_note(held),
                    )

    def reject(self, reason: str, sender: str = SENDER_UNKNOWN, exc_info: BaseException | None = None) -> None:
        """Count a dropped message by its reason's first words and log it (with `exc_info`'s traceback), at most a
        few lines per reason a minute whatever rate the drops come at."""
        kind = reason.split(":")[0]
        self.bad_messages[kind] += 1
        if (held := self._log_gate.admit(kind)) is not None:
            log.warning("dropped a message from %s: %s%s", sender, reason, held_note(held), exc_info=exc_info)

    def _accept_data(self, frames: list[zmq.Frame]) -> tuple[str, dict, int, int, str] | None:
        size = sum(f.buffer.nbytes for f in frames)
        if size > self.max_message_bytes:
            self.reject(f"oversized: {size / 2**20:.1f} MB over the {self.max_message_bytes / 2**20:.0f} MB limit")
            return None
        try:
            _, meta, arrays = decode([f.buffer for f in frames], DATA_KINDS)
        except MessageError as e:
            self.reject(f"{'invalid' if isinstance(e, InvalidMessage) else 'undecodable'}: {e}")
            return None
        actor, session, seq = meta["actor"], meta["session"], meta["seq"]
        info = self.actors.get(actor)
        if info is None or info["session"] != session or info["token"] is None:
            self.unannounced += 1  # queued for a learner that has since restarted; resent after the hello
            return None
        if meta["token"] != info["token"] or (self.curve and frames[0].get("User-Id") != info["user_id"]):
            self.reject(f"forged: data for {actor}'s session without the token of the process that opened it", actor)
            return None
        if info["refused"]:
            return None
        if seq <= info["acked"]:
            first = info["held"].get(seq)
            if first is not None and not _same_bytes(first, frames):
                self._refuse_session(
                    actor,
                    f"message {seq} of session {session:x} came again with other content "
                    "than the first copy (two processes share this session?)",
                )
            else:
                self.duplicates += 1  # resent after a reconnect, and this learner already has it
            return None
        if seq != info["acked"] + 1:
            if info["resending"]:  # queued before its hello (to a learner that died): the resend brings it in order
                self.unannounced += 1
            else:
                self.reject(f"gap: seq {seq} after {info['acked']}", actor)
            return None
        info["acked"], info["resending"] = seq, False
        info["last_seen"] = time.monotonic()
        if not self.auto_ack:  # kept (no copy) until durable, to compare a resend with
            self._hold(actor, info, seq, [f.buffer for f in frames], size)
        return actor, arrays, session, seq, info["token_hash"]

    def _hold(self, actor: str, info: dict, seq: int, buffers: list, size: int) -> None:
        """Keep a received message's buffers until it is durable; past `max_held_bytes` the oldest are let go (a
        resend of one of those is then taken as a duplicate, uncompared)."""
        while info["held"] and info["held_bytes"] + size > self.max_held_bytes:
            self._release(info, next(iter(info["held"])))
            if (held := self._log_gate.admit("held copies over the limit")) is not None:
                log.warning(
                    "actor %s: over %.0f MB of messages received and not yet stored; the oldest copy let go%s",
                    actor,
                    self.max_held_bytes / 2**20,
                    held_note(held),
                )
        info["held"][seq] = buffers
        info["held_bytes"] += size

    @staticmethod
    def _release(info: dict, seq: int) -> None:
        buffers = info["held"].pop(seq, None)
        if buffers is not None:
            info["held_bytes"] -= sum(b.nbytes for b in buffers)

    def _handle_ctrl(self, frames: list[zmq.Frame]) -> None:
        ident, body = frames[0].bytes, frames[1:]
        sender = _printable(ident)
        try:
            kind, meta, _ = decode([f.buffer for f in body], CTRL_KINDS)
        except MessageError as e:
            self.reject(f"{'invalid' if isinstance(e, InvalidMessage) else 'undecodable'} ctrl: {e}", sender)
            if "schema version" in str(e):  # tell the actor, so it stops with a clear error instead of waiting
                self._refuse(ident, str(e))
            return
        if kind == "hello":
            self._welcome(ident, meta, body[0].get("User-Id") if self.curve else None, source_fd(body[0]))
            return
        info = self.actors.get(meta["actor"])
        if kind == "heartbeat" and _before_hello(info, meta["actor"], ident):
            self.early_heartbeats += 1  # an actor whose learner restarted: its hello follows once it notices
            return
        if info is None or info["ident"] != ident:
            self.reject(
                f"wrong connection: {kind} for actor {meta['actor']} from one that did not open its session", sender
            )
            return
        if kind == "heartbeat" and _sent_before_its_close(info, ident):
            self.stale_heartbeats += 1  # queued by a process that has since died: it proves nothing alive
            return
        if kind == "heartbeat":
            info["last_seen"], info["fd"] = time.monotonic(), source_fd(body[0])  # ZeroMQ may have reconnected
            info["stats"] = meta.get("stats", {})
            if not info["alive"]:
                info["alive"] = True
                log.info("actor %s is back", meta["actor"])
            self._send(ident, encode("ack", self._ack_meta(meta["actor"])))
        elif kind == "bye":
            info["alive"] = False
            log.info("actor %s left: %s", meta["actor"], meta.get("reason", ""))

    def _welcome(self, ident: bytes, meta: dict, user_id: str | None, fd: int | None) -> None:
        actor, session, token = meta["actor"], meta["session"], meta["token"]
        if meta["config_hash"] != self.config_hash:
            return self._refuse(
                ident,
                (
                    f"config hash {meta['config_hash'][:64]} differs from the learner's {self.config_hash}: "
                    "start both from the same config"
                ),
            )
        spec = meta.get("env_spec")
        if spec is not None and self.spec_check is not None and (why := self.spec_check(spec)):
            return self._refuse(ident, why)
        if self.curve and not key_speaks_for(self._key_names.get(user_id), actor):
            return self._refuse(
                ident,
                (
                    f"the key '{self._key_names.get(user_id)}' may not speak for actor id '{actor}': "
                    "an actor id must be its key's name, or start with it and a dot "
                    "(robo-rl keys generate <dir> <actor id>)"
                ),
            )
        info = self.actors.get(actor)
        if info is not None and info["session"] != session and info["alive"]:
            self._note_closed()  # a crashed process's connection may have closed just before this hello came
        if info is not None and info["session"] == session:
            if info["token"] is None and info["token_hash"] is None:
                return self._refuse(
                    ident,
                    f"session {session:x} of actor id '{actor}' was stored without its token's hash, so no process "
                    "can prove it opened it: start the actor again (a new session)",
                )
            if not _proves_session(info, token):
                return self._refuse(ident, f"session {session:x} of actor id '{actor}' belongs to another process")
            if info["refused"]:
                return self._refuse(ident, info["refused"])
        elif info is not None and info["alive"]:
            quiet = time.monotonic() - info["last_seen"]
            return self._refuse(
                ident,
                (
                    f"actor id '{actor}' is in use by another running actor (heard {quiet:.1f} s ago): give each "
                    f"actor its own id with actor.id=<name> (or, if that actor was just stopped, start again in "
                    f"{self.actor_timeout_s:.0f} s)"
                ),
            )
        else:  # a new actor process, or one this learner has not met: its stream starts at its first unacked message
            acked = meta["first_unacked"] - 1
            info = self._new_session(session, acked, None)
            self.actors[actor] = info
        info.update(
            token=token,
            token_hash=token_hash(token),
            ident=ident,
            fd=fd,
            closed=None,
            user_id=user_id,
            last_seen=time.monotonic(),
            alive=True,
            resending=True,  # until its first message in order: the actor resends all it holds after a welcome
        )
        if spec is not None and self.first_spec is None:  # the run's spaces, told by a welcomed actor only
            self.first_spec = spec
        self._send(ident, encode("welcome", self._ack_meta(actor)))
        if self._weights is not None:
            self._send(ident, self._weights)  # a late joiner gets weights at once

    @staticmethod
    def _new_session(session: int, acked: int, token_hash_: str | None) -> dict:
        return {
            "session": session,
            "token": None,
            "token_hash": token_hash_,
            "acked": acked,
            "durable": acked,
            "held": {},
            "held_bytes": 0,
            "stats": {},
            "ident": None,
            "fd": None,
            "closed": None,  # (routing id, when) of its connection's last close
            "user_id": None,
            "alive": False,
            "refused": None,
            "resending": False,
            "last_seen": time.monotonic(),
        }

    def _refuse_session(self, actor: str, reason: str) -> None:
        info = self.actors[actor]
        info["refused"], info["held"], info["held_bytes"] = reason, {}, 0
        self.bad_messages["conflict"] += 1
        log.error("refused actor %s: %s", actor, reason)
        self._refuse(info["ident"], reason)

    def _refuse(self, ident: bytes | None, reason: str) -> None:
        self._send(ident, encode("refused", {"reason": reason}))

    def _send(self, ident: bytes | None, frames: list) -> None:
        if ident is not None:
            self.router.send_multipart([ident, *frames], copy=False)

    def _ack_meta(self, actor: str) -> dict:
        """`acked`: what the actor may forget (durably stored, or just received with auto_ack);
        `received`: what this learner has taken (counted in its env steps)."""
        info = self.actors[actor]
        acked = info["acked"] if self.auto_ack else info["durable"]
        return {"incarnation": self.incarnation, "session": info["session"], "acked": acked, "received": info["acked"]}

    def ack(self, actor: str, seq: int) -> None:
        """Acknowledge messages up to `seq` (with auto_ack off, call this once they are stored durably)."""
        info = self.actors.get(actor)
        if info is None or info["refused"]:
            return
        info["durable"] = max(info["durable"], seq)
        held = info["held"]
        while held and next(iter(held)) <= info["durable"]:  # on disk now: a resend needs no comparison
            self._release(info, next(iter(held)))
        key = (info["acked"], info["durable"])
        if self._last_ack_sent.get(actor) != key and info["ident"] is not None:
            self._last_ack_sent[actor] = key
            self._send(info["ident"], encode("ack", self._ack_meta(actor)))

    def send_acks(self) -> None:
        for actor, info in self.actors.items():
            if info.get("alive"):
                self.ack(actor, info["acked"] if self.auto_ack else info["durable"])

    def report_rejected(self, actor: str, seq: int, reason: str) -> None:
        """Tell an actor that message `seq` reached the learner but could not be stored (and why); its held copy is
        let go (never stored, it will never be durable)."""
        info = self.actors.get(actor)
        if info is not None:
            self._release(info, seq)
            self._send(
                info["ident"], encode("rejected", {"session": info["session"], "seq": seq, "reason": reason[:MAX_TEXT]})
            )

    def expect(self, actor: str, session, seq: int, token_hash: str | None = None) -> None:
        """A restarted learner already holds `actor`'s messages up to `seq` of `session` (from its stored
        replay): when that actor process says hello again (with the token whose hash is `token_hash`), its
        stream continues after `seq`."""
        session, seq = int(session), int(seq)  # as the actor sends them: a str or numpy session would never match
        self.actors[actor] = self._new_session(session, seq, token_hash)

    def _note_closed(self) -> None:
        """Sessions whose ctrl connection has closed: their actor is lost now (a live process's ZeroMQ reconnects
        and its next heartbeat brings it back), so its id is free for the process that replaces it."""
        for fd in self.connections.closed():
            for actor, info in self.actors.items():
                if info["fd"] == fd:
                    info["fd"], info["closed"] = None, (info["ident"], time.monotonic())
                    if info["alive"]:
                        info["alive"] = False
                        log.warning("actor %s lost: its connection closed", actor)

    def _check_liveness(self) -> None:
        now = time.monotonic()
        for actor, info in self.actors.items():
            if info.get("alive") and now - info["last_seen"] > self.actor_timeout_s:
                info["alive"] = False
                log.warning("actor %s lost: nothing heard for %.1f s", actor, now - info["last_seen"])

    @property
    def alive_actors(self) -> list[str]:
        return [a for a, info in self.actors.items() if info.get("alive")]

    def actor_stats(self) -> dict[str, dict]:
        """Each actor's latest heartbeat stats, for the metrics."""
        return {a: info["stats"] for a, info in self.actors.items()}

    # --- sending ------------------------------------------------------------------------------
    def publish_weights(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        self._weights = encode("weights", {"version": version, "incarnation": self.incarnation}, arrays)
        self.pub.send_multipart([TOPIC_WEIGHTS, *self._weights], copy=False)
        if self._shm is not None:
            notice = {**self._shm.write(version, arrays), "incarnation": self.incarnation}
            self.pub.send_multipart([TOPIC_WEIGHTS_SHM, *encode("weights_shm", notice)])

    def publish_status(self, meta: dict) -> None:
        self.pub.send_multipart([TOPIC_STATUS, *encode("status", {**meta, "incarnation": self.incarnation})])

    def stop_actors(self, reason: str, hold: bool = False) -> None:
        """Tell actors the run is over (`hold=False`), or that this learner is going away before the end of
        the run and they should hold and wait for a new one (`hold=True`)."""
        msg = encode("stop", {"reason": reason, "hold": hold})
        self.pub.send_multipart([TOPIC_STOP, *msg])
        for info in self.actors.values():
            self._send(info["ident"], msg)

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
        if self._shm is not None:
            self._shm.close()
        self.ctx.destroy(linger=0)
