"""Shared pieces of `bench/transport.py`: the payload, the phase clock, and the baselines.

(b) agentlace-style: pickle, one ZeroMQ REQ/REP round trip per transition, obs and next_obs both carried.
    (agentlace also lz4-compresses by default; left out: lz4 is not installed here, random pixels don't compress.)
(c) LeRobot 0.6.1: in `_lerobot_baseline.py`.
(d) raw ZeroMQ PUSH/PULL of pre-built byte buffers: the practical limit of the wire; and raw PUB/SUB of the
    weights' bytes, the floor for the weight push latency.

Every learner function takes `(cfg, stop, ready)` and returns a dict; every actor `(index, cfg, stop, ready)`.
"""

from __future__ import annotations

import pickle
import time

import numpy as np
import zmq

HOST = "127.0.0.1"
BATCH = 64  # transitions per message, for every transport that batches
STATE_DIM, ACTION_DIM, IMAGE_HW = 18, 7, (128, 128)
CAMERAS = {"front": IMAGE_HW, "wrist": IMAGE_HW}
# the unique payload of one transition: two images, state, action, reward, terminated, truncated
UNIQUE_BYTES = len(CAMERAS) * IMAGE_HW[0] * IMAGE_HW[1] * 3 + 4 * STATE_DIM + 4 * ACTION_DIM + 4 + 1 + 1


def mark_ready(ready) -> None:
    with ready.get_lock():
        ready.value += 1


def measure_phases(step, cfg: dict, ready) -> dict[str, float]:
    """Call `step("startup", False)` until every actor is ready, then per phase warm up with `step(phase, False)`
    and count what `step(phase, True)` returns (transitions taken in) for a fixed time. Returns transitions/s."""
    deadline = time.monotonic() + cfg["startup_s"]
    while ready.value < cfg["actors"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready.value}/{cfg['actors']} actors started within {cfg['startup_s']} s")
        step("startup", False)  # keeps the learner answering (hellos) while the actors start; measures nothing
    rates = {}
    for name, warm_s, secs in cfg["phases"]:
        t0 = time.monotonic()
        while time.monotonic() - t0 < warm_s:
            step(name, False)
        # at least `secs`; on a loaded machine longer, until `min_transitions` came in (or `max_phase_s`), so a
        # short run never reports zero for a transport whose processes were merely not scheduled yet
        least, cap = cfg.get("min_transitions", 0), max(secs, cfg.get("max_phase_s", secs))
        n, t0 = 0, time.monotonic()
        while (elapsed := time.monotonic() - t0) < secs or (n < least and elapsed < cap):
            n += step(name, True)
        rates[name] = n / (time.monotonic() - t0)
    return rates


# --- (d) raw ZeroMQ PUSH/PULL -------------------------------------------------------------------
def raw_learner(cfg, stop, ready) -> dict:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"tcp://{HOST}:{cfg['ports'][0]}")

    def step(_phase, _measuring):
        if not pull.poll(50):
            return 0
        n = 0
        for _ in range(64):
            try:
                frame = pull.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            n += len(frame.buffer) // UNIQUE_BYTES  # the buffer holds BATCH transitions back to back
        return n

    try:
        return measure_phases(step, cfg, ready)
    finally:
        ctx.destroy(linger=0)


def raw_actor(i, cfg, stop, ready) -> dict:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://{HOST}:{cfg['ports'][0]}")
    payload = np.random.default_rng(i).integers(0, 256, BATCH * UNIQUE_BYTES, dtype=np.uint8).tobytes()
    sent = 0
    try:
        while not stop.is_set():
            try:
                push.send(payload, zmq.NOBLOCK, copy=False)  # zero-copy: the same immutable bytes every time
            except zmq.Again:
                push.poll(50, zmq.POLLOUT)
                continue
            sent += 1
            if sent == 1:
                mark_ready(ready)
        return {"sent_messages": sent}
    finally:
        ctx.destroy(linger=0)


# --- raw ZeroMQ PUB/SUB of the weights' bytes: the floor for the weight push latency -----------------
def raw_weights_learner(cfg, stop, ready) -> dict:
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"tcp://{HOST}:{cfg['ports'][0]}")
    payload = np.random.default_rng(0).integers(0, 256, cfg["weights"]["bytes"], dtype=np.uint8).tobytes()
    published: dict[int, float] = {}
    next_push, interval = [0.0], cfg["weights"]["interval_s"]

    def step(phase, measuring):
        time.sleep(0.002)
        due = len(published) < cfg["weights"]["count"] and time.monotonic() >= next_push[0]
        if measuring and phase == "weights" and due:
            version = len(published) + 1
            published[version] = time.time()
            pub.send_multipart([str(version).encode(), payload], copy=False)
            next_push[0] = max(next_push[0], time.monotonic() - interval) + interval  # on a grid: no drift
        return 0

    try:
        return {"rates": measure_phases(step, cfg, ready), "published": published}
    finally:
        ctx.destroy(linger=0)


def raw_weights_actor(i, cfg, stop, ready) -> dict:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://{HOST}:{cfg['ports'][0]}")
    mark_ready(ready)
    loads = []
    try:
        while not stop.is_set():
            if sub.poll(20):
                head, _ = sub.recv_multipart(copy=False)  # received whole; no decode, no copy into a model
                loads.append((int(bytes(head.buffer)), time.time()))
        return {"loads": loads}
    finally:
        ctx.destroy(linger=0)


# --- (b) agentlace-style pickle REQ/REP, one transition per round trip --------------------------
def _serl_transition(rng) -> dict:
    """SERL's transition layout: observations and next_observations each carry both images."""

    def obs():
        imgs = {c: rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for c, hw in CAMERAS.items()}
        return {"state": rng.standard_normal(STATE_DIM).astype(np.float32), **imgs}

    return {
        "observations": obs(),
        "actions": rng.uniform(-1, 1, ACTION_DIM).astype(np.float32),
        "next_observations": obs(),
        "rewards": 0.0,
        "masks": 1.0,
        "dones": False,
    }


def agentlace_learner(cfg, stop, ready) -> dict:
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.bind(f"tcp://{HOST}:{cfg['ports'][0]}")
    inserted = []

    def step(_phase, _measuring):
        if not rep.poll(50):
            return 0
        request = pickle.loads(rep.recv())  # deserialise, as agentlace's server does before its callback
        batch = request["payload"]["data"]
        inserted.extend(batch[-1:])  # stand-in for data_store.batch_insert: keep a reference, bounded below
        del inserted[:-16]
        rep.send(pickle.dumps({"success": True}))
        return len(batch)

    try:
        return measure_phases(step, cfg, ready)
    finally:
        ctx.destroy(linger=0)


def agentlace_actor(i, cfg, stop, ready) -> dict:
    rng = np.random.default_rng(i)
    pool = [_serl_transition(rng) for _ in range(8)]
    ctx = zmq.Context()

    def connect():
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.RCVTIMEO, 800)  # agentlace's client timeout
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://{HOST}:{cfg['ports'][0]}")
        return sock

    req, sent = connect(), 0
    try:
        while not stop.is_set():
            msg = {
                "type": "datastore",
                "store_name": f"actor{i}",
                "payload": {"data": [pool[sent % len(pool)]], "last_id": sent},
            }
            req.send(pickle.dumps(msg))
            try:
                pickle.loads(req.recv())
            except zmq.Again:  # a REQ socket is stuck after a timeout: rebuild it, as agentlace does
                req.close()
                req = connect()
                continue
            sent += 1
            if sent == 1:
                mark_ready(ready)
        return {"sent_transitions": sent}
    finally:
        ctx.destroy(linger=0)
