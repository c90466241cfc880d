"""`ActorTransport`: the actor's network I/O on a thread of its own, so the control loop never waits.

The control loop hands step batches to a bounded queue and swaps in the newest policy between steps; the
thread owns the ZeroMQ sockets (they are not thread-safe), sends, resends after a learner restart,
heartbeats with the queue's fill level, and loads new weights into a spare copy of the policy (double
buffering: the copy the control loop runs is never written, and no weights are copied on its thread).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.shm_weights import SharedWeightsReader

log = logging.getLogger(__name__)
# a real-time actor's I/O thread waits this long on its socket each pass (a sim actor's, 2 ms): at 2 ms it woke up to
# 500 times a second, each time taking the GIL from the control loop, which on a busy machine then waited for the
# CPU and the GIL in its env steps (bench/results/unattended_jitter_probes.json)
REALTIME_POLL_MS = 20
SIM_POLL_MS = 2  # a sim actor waits on the learner's word between steps: its I/O thread answers within 2 ms


class ActorTransport:
    def __init__(
        self,
        link: ActorLink,
        load_weights: Callable[[object, dict], None],
        spare_policy: object,
        max_queued_batches: int = 500,
        heartbeat_every_s: float = 0.5,
        extra_stats: Callable[[], dict] | None = None,
        poll_ms: int = SIM_POLL_MS,
    ) -> None:
        self.link = link
        # how long each pass of the I/O thread waits on the socket (SIM_POLL_MS, or REALTIME_POLL_MS for a real-time
        # actor, as every pass takes the GIL from the control loop)
        self.poll_ms = int(poll_ms)
        self.load_weights = load_weights  # (policy, arrays) → None, run on the I/O thread
        self._spare = spare_policy  # the policy copy the I/O thread may write; None while the control loop has it
        self._pending: tuple[int, str, dict] | None = None  # newest weights not yet loaded: version, kind, payload
        self._ready: tuple[int, object] | None = None  # a loaded policy waiting for the control loop
        self.version = -1
        self._shm_reader = SharedWeightsReader()
        self._steps_put = self._steps_moved = 0  # each written by one thread only, so no lock is needed
        self.heartbeat_every_s = heartbeat_every_s
        self.extra_stats = extra_stats or dict  # more numbers for the heartbeat (e.g. the control-loop jitter)
        self.outbox: queue.Queue = queue.Queue(maxsize=max_queued_batches)
        self.dropped_batches = 0  # the outbox was full: the learner cannot keep up and the actor's buffer is full
        self.status: dict = {}
        self.stop_reason: str | None = None
        self.hold_reason: str | None = None  # the learner went away before the end of the run: wait for a new one
        self._hold_incarnation: int | None = None
        self.bad_weights = 0
        self.error: Exception | None = None
        self._closing = threading.Event()
        self._beat_now = threading.Event()  # an episode ended: its counts go out with the next pass, not in 0.5 s
        self._thread = threading.Thread(target=self._run, name=f"{link.actor_id}-transport", daemon=True)

    def start(self, config_hash: str, hello_timeout_s: float) -> None:
        """Say hello on the calling thread (so a missing learner is a plain error), then start the I/O thread."""
        try:
            self._handle(self.link.hello(config_hash, hello_timeout_s))
        except BaseException:
            self.link.close(linger_s=0)  # nothing was sent yet; an open context left to the GC blocks in zmq_term
            raise
        self._load_pending()
        self._thread.start()

    def take_policy(self, current: object) -> tuple[int, object] | None:
        """On the control loop, between steps: the newest loaded (version, policy), handing `current` back as
        the spare; None when nothing new is ready."""
        ready = self._ready
        if ready is None:
            return None
        self._ready = None
        self._spare = current
        return ready

    def _load_pending(self) -> None:
        if self._pending is None or self._ready is not None or self._spare is None:
            return
        (version, kind, source), self._pending = self._pending, None
        notice = source if kind == "weights_shm" else None  # a shared-memory notice rather than the arrays
        if notice is not None:
            try:
                source = self._shm_reader.arrays(notice)
            except OSError as e:
                self.link.use_tcp_weights(str(e))
                return
            except ValueError as e:  # a notice that points elsewhere: keep the policy we have
                self.bad_weights += 1
                log.error("ignored weights version %d: %s", version, e)
                return
            if source is None:
                return  # that slot already holds a newer version, whose notice is on its way
        try:
            self.load_weights(self._spare, source)
        except Exception as e:  # names or shapes that do not fit this policy: keep acting with the current one
            self.bad_weights += 1
            log.error("ignored weights version %d that do not fit this policy: %s", version, str(e)[:300])
            return
        policy, self._spare = self._spare, None
        if notice is not None and not self._shm_reader.still_valid(notice):
            self._spare = policy  # the learner overwrote the slot while we read it: wait for the next notice
            return
        self._ready = (version, policy)

    def send(self, meta: dict, arrays: dict, env_steps: int = 0) -> None:
        try:
            self.outbox.put_nowait((meta, arrays, env_steps))
            self._steps_put += env_steps
        except queue.Full:
            self.dropped_batches += 1

    @property
    def in_flight_steps(self) -> int:
        """Env steps handed over but not yet taken by the learner (queued here, or sent and not yet received)."""
        return self._steps_put - self._steps_moved + self.link.unreceived_steps

    @property
    def waiting_for_learner(self) -> str | None:
        """Why the actor should hold (the robot at rest, data kept): the learner said so, or none is connected."""
        if self.hold_reason:
            return f"the learner stopped ({self.hold_reason})"
        return None if self.link.connected else "no learner connected"

    @property
    def fill(self) -> float:
        return self.outbox.qsize() / self.outbox.maxsize

    def _handle(self, messages: list) -> None:
        for kind, meta, arrays in messages:
            if kind in ("weights", "weights_shm"):
                if meta["version"] > self.version:  # latest wins: an older pending version is simply replaced
                    self.version = int(meta["version"])
                    self._pending = (self.version, kind, arrays if kind == "weights" else meta)
            elif kind == "status":
                self.status = meta
            elif kind == "stop" and meta.get("hold"):
                self.hold_reason, self._hold_incarnation = meta["reason"], self.link.incarnation
            elif kind == "stop":
                self.stop_reason = meta["reason"]

    def _run(self) -> None:
        last_beat = 0.0
        try:
            while not self._closing.is_set():
                while True:
                    try:
                        meta, arrays, env_steps = self.outbox.get_nowait()
                    except queue.Empty:
                        break
                    self.link.send_steps(meta, arrays, env_steps)
                    self._steps_moved += env_steps
                self._handle(self.link.poll(timeout_ms=self.poll_ms))
                if self.hold_reason and self.link.connected and self.link.incarnation != self._hold_incarnation:
                    log.info("a new learner is here: carrying on")
                    self.hold_reason = None
                self._load_pending()
                now = time.monotonic()
                since = now - last_beat
                if since > self.heartbeat_every_s or (self._beat_now.is_set() and since > 0.05):  # 20 a second at most
                    self._beat_now.clear()
                    self.link.heartbeat(
                        {
                            "outbox_fill": round(self.fill, 3),
                            "dropped_batches": self.dropped_batches,
                            **self.extra_stats(),
                        }
                    )
                    last_beat = now
        except Exception as e:  # surfaced to the control loop, which stops with this error
            self.error = e
            log.error("transport thread failed: %s", e)

    def beat_soon(self) -> None:
        """From the control loop at an episode's end: the next pass of the I/O thread sends a heartbeat (after
        the episode's steps), so the learner's figures (safety counts, interventions) never lag a whole episode."""
        self._beat_now.set()

    def close(self, reason: str, linger_s: float = 2.0) -> None:
        """Stop the thread after the outbox is handed over, give unacked data `linger_s`, then say bye. After the
        learner's `stop` (the run has all its env steps, and the learner closes its sockets) nothing more can be
        stored, so there is nothing to wait for."""
        deadline = time.monotonic() + (0.0 if self.stop_reason is not None else linger_s)
        while not self.outbox.empty() and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.link.close(max(0.0, deadline - time.monotonic()), run_finished=self.stop_reason is not None, bye=reason)
