"""`PolicyServer`: a served policy behind a ZeroMQ ROUTER (`robo-rl policy serve`, robo_rl/commands/policy_serve.py).

Requests are answered one at a time, in arrival order (one model on one GPU; a second client waits its turn). Each
answer carries its request's id; an `info` request gets the policy's sizes, a `chunk` request its chunk and the
inference time, and a request that cannot be answered (malformed, another schema version, inputs that do not fit,
a policy that fails on them) gets an `error` answer naming why, and the server serves the next. It binds loopback
unless told otherwise and refuses any other address without CURVE keys, as the learner does
(robo_rl/transport/security.py). Messages: policies/remote_protocol.py.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import zmq

from policies.remote_protocol import MAX_TEXT, WireError, decode, encode, message_id
from robo_rl.serving.served import RequestError, ServedPolicy
from robo_rl.transport.ports import endpoint
from robo_rl.transport.security import check_bind_allowed

log = logging.getLogger(__name__)

DEFAULT_PORT = 5610
MAX_MESSAGE_BYTES = 256 << 20  # a request with several full-HD frames is a few tens of MB; a forged one goes no further
POLL_MS = 100  # how often the loop looks at `stopping` while idle


class PolicyServer:
    def __init__(self, served: ServedPolicy, host: str = "127.0.0.1", port: int = DEFAULT_PORT, curve=None) -> None:
        check_bind_allowed(host, curve)
        self.served = served
        self.address = endpoint(host, port)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self._auth = None
        try:
            if curve is not None:
                self._auth = curve.start_authenticator(self.ctx)
                curve.make_server(self.sock)
            self.sock.bind(self.address)
        except Exception:  # a port in use: nothing left open behind the error
            self.close()
            raise
        self.counts: collections.Counter = collections.Counter()
        self.stopping = threading.Event()

    def serve(self, stop_after: float | None = None) -> None:
        """Answer requests until `stopping` is set (or for `stop_after` seconds)."""
        end = None if stop_after is None else time.monotonic() + stop_after
        while (end is None or time.monotonic() < end) and not self.stopping.is_set():
            if not self.sock.poll(POLL_MS):
                continue
            ident, *frames = self.sock.recv_multipart(copy=False)
            self.sock.send_multipart([ident, *self.handle(frames)], copy=False)

    def handle(self, frames: list) -> list:
        """One request's answer frames: its chunk or information, or an error answer naming why not."""
        request_id = -1
        try:
            request = decode(frames, "request")
            request_id = request.id
            if request.kind == "info":
                self.counts["info"] += 1
                return encode("reply", "info", request_id, *self.served.info())
            start = time.perf_counter()
            chunk = self.served.chunk(request.meta, request.arrays)
            meta = {
                "inference_ms": (time.perf_counter() - start) * 1e3,
                "policy": self.served.name,
                "version": self.served.version,
            }
            self.counts["chunks"] += 1
            return encode("reply", "chunk", request_id, meta, {"chunk": chunk})
        except (WireError, RequestError) as e:
            reason = str(e)
            self.counts["refused"] += 1
            log.warning("policy server: refused a request: %s", reason)
            return encode(
                "reply", "error", message_id(frames) if request_id == -1 else request_id, {"reason": reason[:MAX_TEXT]}
            )
        except Exception as e:  # the policy failed on inputs that passed every check: say so, serve the next
            reason = f"the policy failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            self.counts["failed"] += 1
            log.exception("policy server: %s", reason)
            return encode("reply", "error", request_id, {"reason": reason[:MAX_TEXT]})

    def close(self) -> None:
        self.sock.close(0)
        if self._auth is not None:
            self._auth.stop()
        self.ctx.term()
