"""The actor's side of the GUI: telemetry out, the page's buttons and keys in, never blocking the control loop.

The control loop calls `tick()` after each step (and while paused) and `episode_end()` at each episode's end; both
only put a small snapshot into a bounded queue (camera frames copied, at most `gui.frame_hz` a second). A thread owns
the ZeroMQ socket: it sends the newest snapshots (dropping what the GUI cannot take) and feeds what the page sends
into the actor's `WebDevice`, which the intervention wrapper reads at the next step like any teleop device.

Dead man: once a page has watched, the GUI's silence for `gui.deadman_timeout_s` (its process died) or its notice
that no page watches any more applies `gui.deadman`: `pause` holds the robot until a page resumes it, `continue` only
gives control back to the policy.

While the control loop is held up between episodes (a reset, its check, a person asked to reset the scene) it sends
no ticks; the thread then sends `idle_meta()` (the last state with the reset's progress) every IDLE_TICK_S, so the page
shows what the actor waits for instead of calling it offline. The learned reward's checks (a threshold, a mark) go to
`on_check(kind, meta)`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import numpy as np
import zmq

from robo_rl.configs.gui import DEADMAN, GuiConfig
from robo_rl.envs.wrappers import find_wrapper
from robo_rl.gui import messages
from robo_rl.gui.web_device import WebDevice
from robo_rl.teleop.intervention import InterventionWrapper
from robo_rl.transport.codec import MessageError, decode, encode
from robo_rl.transport.link import endpoint

log = logging.getLogger(__name__)
IDLE_TICK_S = 0.5  # a control loop silent this long (held up by a reset) gets its state sent by the thread
# each pass of the bridge thread waits this long for the page: at 5 ms it woke 200 times a second, each time taking
# the GIL from the control loop; a person's click or e-stop now waits 20 ms at most (a step at 10 Hz is 100)
POLL_MS = 20


def attach_web_device(env, **web_kwargs):
    """The env with a `WebDevice` among its human's devices (an intervention wrapper added when it has none), and
    that device: the page can always take over, beside any configured device (after them in priority)."""
    human = find_wrapper(env, InterventionWrapper)
    if human is None:
        env = human = InterventionWrapper(env, [], takeover="explicit")
    web = next((d for d in human.devices if isinstance(d, WebDevice)), None)
    if web is None:
        web = WebDevice(**web_kwargs).start()
        human.add_device(web)
    return env, web


class GuiBridge:
    def __init__(
        self,
        actor_id: str,
        host: str,
        port: int,
        web: WebDevice,
        human: InterventionWrapper,
        frame_hz: float = GuiConfig.frame_hz,  # the gui block's defaults: tests and bench/gui.py build bridges directly
        deadman: str = DEADMAN[0],  # pause, the safe one; an actor passes gui.deadman resolved for its env
        deadman_timeout_s: float = GuiConfig.deadman_timeout_s,
        curve=None,
        clock=time.monotonic,
        on_check=None,
        idle_meta=None,
    ) -> None:
        if deadman not in DEADMAN:
            raise ValueError(f"gui.deadman='{deadman}': must be one of {', '.join(DEADMAN)}")
        self.actor_id, self.web, self.human = actor_id, web, human
        self.frame_period = 1.0 / frame_hz if frame_hz > 0 else float("inf")
        self.deadman, self.deadman_timeout_s = deadman, float(deadman_timeout_s)
        self._clock = clock
        self.on_check, self.idle_meta = on_check, idle_meta
        self._last_tick = clock()
        self._out: collections.deque = collections.deque(maxlen=8)  # the newest snapshots; older ones dropped
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_frame = -float("inf")
        self._watched = False  # a page has watched since the start (or since the last dead-man)
        self._heard = clock()
        self.counts = collections.Counter()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, actor_id.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 16)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)  # no GUI: a send fails at once (dropped) instead of queueing
        if curve is not None:
            curve.make_client(self.sock)
        self.sock.connect(endpoint(host, port))
        self._thread = threading.Thread(target=self._run, name="gui-bridge", daemon=True)
        self._thread.start()

    # --- the control loop's side: cheap, never blocks ---------------------------------------------------------
    def wants_frame(self) -> bool:
        return self._clock() - self._last_frame >= self.frame_period

    @property
    def watched(self) -> bool:
        """A page watches (from its presence until the dead man): what only a person looks at is made only then."""
        return self._watched

    def tick(
        self, meta: dict, images: dict[str, np.ndarray] | None = None, view: dict[str, np.ndarray] | None = None
    ) -> None:
        """The actor's state now; `images` (the policy's cameras) and `view` only when `wants_frame()`."""
        arrays = {}
        if images or view:
            self._last_frame = self._clock()
            arrays = {f"cam/{k}": np.array(v, np.uint8) for k, v in (images or {}).items()}
            arrays.update({f"view/{k}": np.array(v, np.uint8) for k, v in (view or {}).items()})
        self._out.append(("gui_tick", {"actor": self.actor_id, "t": time.time(), **meta}, arrays))
        self._last_tick = self._clock()
        self._wake.set()

    def episode_end(self, meta: dict) -> None:
        self._out.append(("gui_episode", {"actor": self.actor_id, **meta}, {}))
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(2.0)
        self.sock.close(linger=200)
        self.ctx.term()

    # --- the bridge thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                if dict(poller.poll(POLL_MS)).get(self.sock):
                    self._receive()
                self._idle_tick()
                self._flush()
                self._watchdog()
            except zmq.ZMQError as e:  # the context is going away
                if not self._stop.is_set():
                    log.error("gui bridge: %s", e)
                return
        self._flush()  # the last word (an e-stop, a stop) still goes out

    def _idle_tick(self) -> None:
        if self.idle_meta is None or self._clock() - self._last_tick < IDLE_TICK_S:
            return
        meta = self.idle_meta()
        self._last_tick = self._clock()
        if meta:
            self._out.append(("gui_tick", {**meta, "actor": self.actor_id, "t": time.time()}, {}))

    def _flush(self) -> None:
        while self._out:
            kind, meta, arrays = self._out.popleft()
            try:
                self.sock.send_multipart(encode(kind, meta, arrays), zmq.NOBLOCK, copy=False)
                self.counts["sent"] += 1
            except zmq.Again:  # no GUI, or one that cannot keep up: the newest state will follow
                self.counts["dropped"] += 1

    def _receive(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                kind, meta, _ = decode(frames)
                messages.check(kind, meta, messages.TO_ACTOR)
            except MessageError as e:
                self.counts["bad_messages"] += 1
                log.warning("gui bridge: dropped a message from the GUI: %s", e)
                continue
            self._heard = self._clock()
            self._handle(kind, meta)

    def _handle(self, kind: str, meta: dict) -> None:
        if kind == "gui_presence":
            if meta["pages"] > 0:
                self._watched = True
                self.web.heartbeat()  # a page is there: a human holding control keeps it
        elif kind == "gui_command":
            self._watched = True
            log.info("gui: %s by %s", meta["command"], meta.get("by", "?"))
            self.web.press(meta["command"])
        elif kind == "gui_key":
            self._watched = True
            (self.web.key_down if meta["down"] else self.web.key_up)(meta["key"])
        elif kind == "gui_release":
            self.web.release()
        elif kind == "gui_deadman":
            self._dead_man(meta["reason"])
        elif self.on_check is not None:  # gui_reward_threshold, gui_reward_mark
            try:
                self.on_check(kind, meta)
            except Exception as e:  # noqa: BLE001 - a refused check is said; the bridge thread must live on
                self.counts["checks_refused"] += 1
                log.warning("gui: %s refused: %s", kind, e)

    def _watchdog(self) -> None:
        if self._watched and self._clock() - self._heard > self.deadman_timeout_s:
            self._dead_man(f"the GUI has been silent for {self.deadman_timeout_s:.1f} s")

    def _dead_man(self, reason: str) -> None:
        """Nobody watches: the page's control ends, and with `pause` the robot holds until a page resumes it."""
        self._watched = False  # applied once; a page that comes back arms it again
        self.web.release()
        if self.deadman == "pause" and self.human.paused:
            return  # already holding still
        self.counts["deadman"] += 1
        if self.deadman == "pause":
            self.human.paused = True  # the loop holds the robot still until a page presses pause again
            self.human.pause_reason = f"the page's dead man: {reason} (gui.deadman=pause)"
            log.warning("gui dead man: %s; paused (gui.deadman=pause) until a page resumes", reason)
        else:
            log.warning("gui dead man: %s; the policy has control (gui.deadman=continue)", reason)
