"""A reward model on another machine (a GPU box): `CriticServer` runs any saved model behind ZeroMQ (the command is
`robo-rl critic serve`, robo_rl/commands/critic.py), and `RemoteRewardModel` is the actor's side of it, a
`RewardModel` like any other.

Messages use the transport's codec (msgpack headers, raw array frames, no pickle): the client sends `score` with an
id, the instruction and the frames (`cam/<name>`, and `prev/<name>` for pairs); the server answers `scores` with the
same id and the outputs its model gives, or `score_error` with the reason. A `describe` request returns the model's
kind, cameras and instructions. The client waits at most `timeout_s` for its answer and drops answers to requests
it gave up on (counted as stale); a timeout raises `RewardModelError`, which the actor's wrapper (scoring on its own
thread) turns into its fallback, counted. Off loopback the server needs CURVE keys (`transport.curve_keys_dir`).
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time

import numpy as np
import zmq

from robo_rl.rewards.base import OUTPUTS, RewardModel, RewardModelError, Scores, Task
from robo_rl.transport.codec import MessageError, decode, encode
from robo_rl.transport.link import endpoint
from robo_rl.transport.security import check_bind_allowed

log = logging.getLogger(__name__)

MAX_FRAMES = 256  # frames per request the server accepts


class CriticServer:
    def __init__(self, model: RewardModel, host: str = "127.0.0.1", port: int = 5600, curve=None) -> None:
        check_bind_allowed(host, curve)
        self.model = model
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self._auth = None
        try:
            if curve is not None:
                self._auth = curve.start_authenticator(self.ctx)
                curve.make_server(self.sock)
            self.sock.bind(endpoint(host, port))
        except Exception:  # a port in use: nothing left open behind the error
            self.close()
            raise
        self.counts = collections.Counter()
        self.stopping = threading.Event()

    def serve(self, stop_after: float | None = None, progress: bool = True) -> None:
        """Answer requests until interrupted (or for `stop_after` seconds)."""
        from tqdm import tqdm

        end = None if stop_after is None else time.monotonic() + stop_after
        bar = tqdm(desc="critic requests", unit="req", disable=not progress)
        while (end is None or time.monotonic() < end) and not self.stopping.is_set():
            if not self.sock.poll(100):
                continue
            ident, *frames = self.sock.recv_multipart()
            self.sock.send_multipart([ident, *self.handle(frames)])
            bar.update(1)
        bar.close()

    def handle(self, frames: list) -> list:
        """One request's answer (an error answer for anything it cannot score, naming why)."""
        request_id = -1
        try:
            kind, meta, arrays = decode(frames)
            request_id = int(meta.get("id", -1)) if isinstance(meta.get("id", -1), int) else -1
            if kind == "describe":
                m = self.model
                return encode(
                    "described",
                    {
                        "id": request_id,
                        "kind": m.kind,
                        "cameras": list(m.cameras),
                        "instructions": list(m.instructions),
                        "provides": list(m.provides),
                    },
                )
            if kind != "score":
                raise MessageError(f"unknown request '{kind[:40]}' (score or describe)")
            instruction = meta.get("instruction", "")
            if not isinstance(instruction, str):
                raise MessageError("'instruction' must be text")
            frames_now = {k[4:]: v for k, v in arrays.items() if k.startswith("cam/")}
            previous = {k[5:]: v for k, v in arrays.items() if k.startswith("prev/")} or None
            if any(len(v) > MAX_FRAMES for v in frames_now.values()):
                raise MessageError(f"more than {MAX_FRAMES} frames in one request")
            start = time.perf_counter()
            scores = self.model.score(frames_now, Task(instruction), previous)
            out = {k: np.asarray(getattr(scores, k), np.float32) for k in OUTPUTS if getattr(scores, k) is not None}
            self.counts["scored"] += 1
            return encode("scores", {"id": request_id, "model_ms": (time.perf_counter() - start) * 1e3}, out)
        except (MessageError, RewardModelError, ValueError) as e:
            self.counts["refused"] += 1
            log.warning("critic: refused a request: %s", e)
            return encode("score_error", {"id": request_id, "reason": str(e)[:500]})

    def close(self) -> None:
        self.sock.close(0)
        if self._auth is not None:
            self._auth.stop()
        self.ctx.term()


class RemoteRewardModel(RewardModel):
    """A model served by `robo-rl critic serve` at `address` (tcp://host:port)."""

    kind = "remote"
    provides = OUTPUTS

    def __init__(self, address: str, cameras: tuple[str, ...] = (), timeout_s: float = 0.5, curve=None) -> None:
        self.address, self.timeout_s = address, float(timeout_s)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.make_client(self.sock)
        self.sock.connect(address)
        self._ids = itertools.count(1)
        self.counts = collections.Counter()
        described = None
        try:
            described = self._ask("describe", {}, {}, self.timeout_s * 4)
        except RewardModelError as e:
            if not cameras:
                self.close()  # nothing of it is left open (a context collected later could block in term)
                raise RewardModelError(f"{e}; give reward.cameras to start without it") from None
            log.warning(
                "%s: starting with the configured cameras %s; the fallback applies until it answers", e, list(cameras)
            )
        if described is not None:
            meta = described[0]
            cameras, instructions = tuple(meta["cameras"]), tuple(meta["instructions"])
            self.kind = f"remote {meta['kind']}"
        super().__init__(tuple(cameras), instructions if described is not None else ())

    def _ask(self, kind: str, meta: dict, arrays: dict, timeout_s: float):
        request_id = next(self._ids)
        self.sock.send_multipart(encode(kind, {"id": request_id, **meta}, arrays), copy=False)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(int(left * 1000) + 1):
                break
            try:
                reply_kind, reply, out = decode(self.sock.recv_multipart())
            except MessageError as e:
                self.counts["bad_answers"] += 1
                log.warning("remote critic %s: a malformed answer (%s)", self.address, e)
                continue
            if reply.get("id") != request_id:
                self.counts["stale_answers"] += 1  # an answer to a request we gave up on
                continue
            if reply_kind == "score_error":
                raise RewardModelError(f"remote critic {self.address} refused the request: {reply.get('reason')}")
            return reply, out
        self.counts["timeouts"] += 1
        raise RewardModelError(f"remote critic {self.address} did not answer within {timeout_s:.2f} s")

    def score(self, frames, task: Task, previous=None) -> Scores:
        self.check_frames(frames)
        arrays = {f"cam/{c}": np.ascontiguousarray(frames[c]) for c in self.cameras}
        if previous is not None:
            arrays.update({f"prev/{c}": np.ascontiguousarray(previous[c]) for c in self.cameras})
        _, out = self._ask("score", {"instruction": task.instruction}, arrays, self.timeout_s)
        return Scores(**{k: np.array(out[k], np.float32) for k in OUTPUTS if k in out})

    def close(self) -> None:
        if not self.ctx.closed:
            self.sock.close(0)
            self.ctx.term()
