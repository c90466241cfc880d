"""A base policy served from another machine (`robo-rl policy serve` on a GPU box): the robot PC's actor sends each
observation and receives the chunk, as if the policy were local (`policy.base.kind=remote
policy.base.path=tcp://<host>:<port>`).

`RemoteBase` is a `BasePolicy` (policies/base.py) like any other: `ChunkedBase` runs its chunks sync, async or
real-time chunked, passing the committed actions as a `guide`; DSRL steers it through `noise`. Its sizes, cameras,
noise shape, action range and state statistics come from the server's `info` answer when it is built, checked
against the task.

Each request waits at most `timeout_s`: a late or dead server raises `RemotePolicyError` naming the address and the
wait, never an old chunk. Answers carry their request's id and any other is dropped (counted as stale). The socket
is a DEALER (a REQ socket wedges once an answer is lost) opened with ZMQ_IMMEDIATE, so a request goes out only over
a live connection, and it is replaced after every timeout: a request queued for a dead server, or the late answer to
one the caller gave up on, goes with the old socket, and the new one connects again as soon as a server listens.
The messages are policies/remote_protocol.py's (msgpack headers, raw array frames, no pickle). Off loopback the
server requires CURVE: `curve_key` is this machine's secret key file from `robo-rl keys generate <dir> <name>`, and
the server's public key is `<dir>/learner.key` beside it.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
import time
from pathlib import Path

import numpy as np
import zmq

from policies.acting import NoAction
from policies.remote_protocol import WireError, decode, encode

DEFAULT_TIMEOUT_S = 2.0  # a VLA's chunk on a GPU takes 0.1-0.3 s; the wait covers a slow network too
HELLO_TIMEOUT_S = 30.0  # the server may still be loading its weights when the actor starts
SERVER_KEY = "learner.key"  # the server's public key, where `robo-rl keys generate` writes the learner's
ADDRESS = re.compile(r"^tcp://[^\s:/]+:\d{1,5}$")
TIMING_WINDOW = 200  # requests the timing percentiles cover


class RemotePolicyError(ValueError):
    """A policy server that cannot serve a request: unreachable, late, refusing it, or serving a policy made for
    another task. The text names the address and, for a timeout, the wait."""


class PolicyServerLate(RemotePolicyError, NoAction):
    """No answer in time (the server late, gone or out of reach): this step has no action, the next may."""


class RemoteBase:
    """The chunks of a policy served at `address` (tcp://host:port); `observation_space` and `action_dim` (the
    task's) are checked against what the server serves when given."""

    def __init__(
        self,
        address: str,
        observation_space=None,
        action_dim: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        task: str | None = None,
        curve_key: str | None = None,
        hello_timeout_s: float = HELLO_TIMEOUT_S,
        seed: int = 0,
    ) -> None:
        if not isinstance(address, str) or not ADDRESS.match(address):
            raise RemotePolicyError(
                f"a remote base's path is the policy server's address tcp://<host>:<port>, got '{address}'"
            )
        if not timeout_s > 0:
            raise RemotePolicyError(f"policy.base.timeout_s must be positive, got {timeout_s}")
        self.address, self.timeout_s, self.task = address, float(timeout_s), task
        self._curve = _client_keys(curve_key) if curve_key else None
        self._lock = threading.Lock()  # the chunking worker and the control loop may both ask; one socket, in turn
        self._ctx = zmq.Context()
        self._sock: zmq.Socket | None = None
        self._open()
        self._ids = itertools.count(1)
        self.counts: collections.Counter = collections.Counter(timeouts=0, stale=0, bad_answers=0)
        self.server_ms: collections.deque = collections.deque(maxlen=TIMING_WINDOW)
        self.round_trip_ms: collections.deque = collections.deque(maxlen=TIMING_WINDOW)
        self.rng = np.random.default_rng(seed)  # the initial noises it draws for a noise-taking policy
        try:
            info = self._ask("info", {}, {}, max(hello_timeout_s, self.timeout_s))
        except RemotePolicyError:
            self.close()
            raise
        meta, arrays = info.meta, info.arrays
        self.name, self.version = meta["policy"], meta["version"]
        self.state_dim, self.action_dim, self.chunk_size = meta["state_dim"], meta["action_dim"], meta["chunk_size"]
        self.execute_steps = meta.get("execute_steps")
        self.cameras = {name: tuple(hw) for name, hw in meta["cameras"].items()}
        self.noise_shape = None if meta["noise_shape"] is None else tuple(meta["noise_shape"])
        self.guided = meta["guided"]
        self.action_range = _pair_of(arrays, "action_low", "action_high", self.action_dim)
        self.state_stats = _pair_of(arrays, "state_mean", "state_std", self.state_dim)
        if observation_space is not None or action_dim is not None:
            problem = self.mismatch(observation_space, action_dim)
            if problem:
                self.close()
                raise RemotePolicyError(
                    f"the policy served at {address} ({self.name}) does not fit this task: {problem}"
                )

    def mismatch(self, observation_space, action_dim: int | None) -> str | None:
        """What differs between the served policy's inputs and outputs and the task's (None: they fit)."""
        if action_dim is not None and action_dim != self.action_dim:
            return f"it acts in {self.action_dim} dimensions, the task in {action_dim}"
        if observation_space is None:
            return None
        state_dim = observation_space["state"].shape[0]
        if self.state_dim and state_dim != self.state_dim:
            return f"it reads a state of {self.state_dim} dimensions, the task's has {state_dim}"
        task_cams = {n: tuple(s.shape[:2]) for n, s in observation_space["images"].spaces.items()}
        for name, hw in self.cameras.items():
            if name not in task_cams:
                return f"it reads camera '{name}', the task has {sorted(task_cams) or 'no cameras'}"
            if task_cams[name] != hw:
                theirs = task_cams[name]
                return f"it reads camera '{name}' at {hw[0]}x{hw[1]}, the task's is {theirs[0]}x{theirs[1]}"
        return None

    def reset(self) -> None:
        pass  # the server keeps no episode state: it serves only policies that predict a chunk from one observation

    def reseed(self, seed: int) -> None:
        """Draw the initial noises from `seed` on (an evaluation reseeds per episode, as for a local flow base)."""
        self.rng = np.random.default_rng(seed)

    def predict_chunk(self, obs: dict, noise: np.ndarray | None = None, guide=None) -> np.ndarray:
        """float32 [chunk, A] for `obs`. `noise` [noise_shape]: the initial noise of a noise-taking policy (drawn
        here from N(0, I) when None, so a seeded run is reproducible); `guide` (policies/chunking.py's committed
        actions): a flow policy is steered by it while it samples, any other's chunk blended with it, server-side."""
        arrays = {"state": np.asarray(obs["state"], np.float32).reshape(-1)}
        images = obs.get("images") or {}
        for name in self.cameras:
            if name not in images:
                raise RemotePolicyError(
                    f"the policy served at {self.address} reads camera '{name}', the observation has none"
                )
            arrays[f"image/{name}"] = np.asarray(images[name], np.uint8)
        meta = {}
        instruction = obs.get("instruction") or self.task
        if instruction:
            meta["instruction"] = instruction
        if self.noise_shape is not None:
            arrays["noise"] = self._noise(noise)
        elif noise is not None:
            raise RemotePolicyError(f"the policy served at {self.address} ({self.name}) takes no initial noise")
        if guide is not None:
            arrays.update({"guide/actions": guide.actions, "guide/weights": guide.weights})
            meta["guide_delay"] = int(guide.delay)
        start = time.perf_counter()
        reply = self._ask("chunk", meta, arrays, self.timeout_s)
        self.round_trip_ms.append((time.perf_counter() - start) * 1e3)
        self.server_ms.append(float(reply.meta["inference_ms"]))
        chunk = reply.arrays["chunk"]
        if chunk.shape[1:] != (self.action_dim,) or not len(chunk):
            raise RemotePolicyError(
                f"the policy server at {self.address} answered a chunk of shape {chunk.shape}, expected "
                f"[{self.chunk_size}, {self.action_dim}]"
            )
        return np.array(chunk, np.float32)  # a writable copy: the received frame is read-only

    def _noise(self, noise) -> np.ndarray:
        if noise is None:
            return self.rng.standard_normal(self.noise_shape, dtype=np.float32)
        noise = np.asarray(noise, np.float32)
        if noise.shape != self.noise_shape or not np.all(np.isfinite(noise)):
            raise ValueError(f"the initial noise must be finite, of shape {self.noise_shape}; got {noise.shape}")
        return noise

    def stats(self) -> dict:
        """The server's inference and the whole round trip in ms (p50, p99), and the counts (timeouts, stale)."""
        out = {f"remote_{k}": v for k, v in self.counts.items()}
        for name, values in (("server_ms", self.server_ms), ("round_trip_ms", self.round_trip_ms)):
            if values:
                p50, p99 = np.percentile(np.asarray(values), [50, 99])
                out.update({f"remote_{name}_p50": float(p50), f"remote_{name}_p99": float(p99)})
        return out

    # --- the socket -----------------------------------------------------------------------------------------
    def _open(self) -> None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing for a connection that is not up
        if self._curve is not None:
            sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = self._curve
        sock.connect(self.address)
        self._sock = sock

    def _reopen(self) -> None:
        self._sock.close(0)
        self._open()

    def _ask(self, kind: str, meta: dict, arrays: dict, timeout_s: float):
        """Send one request and wait for its own answer; RemotePolicyError if none comes within `timeout_s`."""
        with self._lock:
            request_id = next(self._ids)
            deadline = time.monotonic() + timeout_s
            if not self._sock.poll(int(timeout_s * 1000) + 1, zmq.POLLOUT):
                self.counts["timeouts"] += 1
                hint = " (with CURVE: does it hold this machine's public key?)" if self._curve else ""
                raise PolicyServerLate(
                    f"no connection to the policy server at {self.address} within {timeout_s:.2f} s: is "
                    f"`robo-rl policy serve` running there{hint}?"
                )
            self._sock.send_multipart(encode("request", kind, request_id, meta, arrays), copy=False)
            while (left := deadline - time.monotonic()) > 0:
                if not self._sock.poll(int(left * 1000) + 1):
                    break
                try:
                    reply = decode(self._sock.recv_multipart(), "reply")
                except WireError as e:
                    self.counts["bad_answers"] += 1
                    raise RemotePolicyError(
                        f"the policy server at {self.address} sent a malformed answer: {e}"
                    ) from None
                if reply.id != request_id:
                    self.counts["stale"] += 1  # an answer to a request given up on
                    continue
                if reply.kind == "error":
                    raise RemotePolicyError(
                        f"the policy server at {self.address} refused the request: {reply.meta['reason']}"
                    )
                if reply.kind != kind:
                    raise RemotePolicyError(f"the policy server at {self.address} answered '{reply.kind}' to '{kind}'")
                return reply
            self.counts["timeouts"] += 1
            self._reopen()  # the late answer, if it ever comes, arrives at a socket that is gone
            raise PolicyServerLate(
                f"the policy server at {self.address} did not answer within {timeout_s:.2f} s (policy.base.timeout_s)"
            )

    def close(self) -> None:
        if not self._ctx.closed:
            self._sock.close(0)
            self._ctx.term()

    def __deepcopy__(self, memo):  # frozen and stateless: every copy of a policy shares the one connection
        return self

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: zmq may be half torn down
            pass


def _pair_of(arrays: dict, low: str, high: str, dim: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Two per-dimension vectors the server sent (its action range, its state statistics), or None without them."""
    if low not in arrays or high not in arrays or arrays[low].shape != (dim,) or arrays[high].shape != (dim,):
        return None
    return np.array(arrays[low]), np.array(arrays[high])


def _client_keys(secret_file: str) -> tuple[bytes, bytes, bytes]:
    """(secret, public, the server's public) from this machine's secret key file and the server's key beside it."""
    import zmq.auth

    path = Path(secret_file)
    server = path.parent / SERVER_KEY
    for needed in (path, server):
        if not needed.is_file():
            raise RemotePolicyError(
                f"no key file {needed}: make the keys with `robo-rl keys generate {path.parent} <name>` and set "
                "policy.base.curve_key=<dir>/<name>.key_secret"
            )
    public, secret = zmq.auth.load_certificate(str(path))
    if secret is None:
        raise RemotePolicyError(f"{path} holds no secret key: pass the .key_secret file")
    server_public, _ = zmq.auth.load_certificate(str(server))
    return secret, public, server_public
