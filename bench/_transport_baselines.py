"""Shared pieces of `bench/transport.py`: the payload, the phase clock, and the baselines.

(b) agentlace (SERL / HIL-SERL), its pattern read from agentlace's trainer.py and data_store.py: the actor inserts each
    transition into a `QueuedDataStore` and `TrainerClient.update()` (HIL-SERL's actor calls it at every episode end)
    asks the server for the store's last id (one REQ/REP round trip), then sends every transition queued after it
    in one "datastore" request, pickled; the server replies once per request. obs and next_obs are both carried.
    The older figure, one transition per request/reply, is kept as (b1): it is not agentlace's pattern.
    (agentlace also lz4-compresses by default; left out: lz4 is not installed here, random pixels don't compress,
    so the baseline is spared that cost.)
(c) LeRobot 0.6.1: in `_lerobot_baseline.py`.
(d) raw ZeroMQ PUSH/PULL of pre-built byte buffers: the practical limit of the wire; and raw PUB/SUB of the
    weights' bytes, the floor for the weight push latency.

Every learner function takes `(cfg, stop, ready)` and returns a dict; every actor `(index, cfg, stop, ready)`.
"""

from __future__ import annotations

import pickle
import time
from collections import deque

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


# --- (b) agentlace: a queued store, each update one request carrying every queued transition -------------------
AGENTLACE_TIMEOUT_MS = 3000  # HIL-SERL's TrainerClient(timeout_ms=3000); agentlace's default is 800
AGENTLACE_QUEUE_CAPACITY = 50_000  # HIL-SERL's QueuedDataStore(50000) on the actor


def serl_transitions(rng, n: int) -> list[dict]:
    """`n` transitions of one episode in SERL's layout, observations and next_observations each carrying both images.

    Transition t's next_observations is transition t + 1's observations, the same object, as HIL-SERL's actor loop
    makes them (`obs = next_obs`): pickle writes an object once per request, so a request of consecutive transitions
    carries each frame about once. Every observation is distinct, so a request of up to `n` never repeats one."""

    def obs():
        imgs = {c: rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for c, hw in CAMERAS.items()}
        return {"state": rng.standard_normal(STATE_DIM).astype(np.float32), **imgs}

    observations = [obs() for _ in range(n + 1)]
    return [
        {
            "observations": observations[t],
            "actions": rng.uniform(-1, 1, ACTION_DIM).astype(np.float32),
            "next_observations": observations[t + 1],
            "rewards": 0.0,
            "masks": 1.0,
            "dones": False,
        }
        for t in range(n)
    ]


class QueuedDataStore:
    """agentlace.data.data_store.QueuedDataStore: a bounded queue whose inserts are numbered from 0."""

    def __init__(self, capacity: int):
        self.ids: deque[int] = deque(maxlen=capacity)
        self.data: deque = deque(maxlen=capacity)
        self.latest_seq_id = -1

    def insert(self, transition) -> None:
        self.latest_seq_id += 1
        self.ids.append(self.latest_seq_id)
        self.data.append(transition)

    def get_latest_data(self, from_id: int) -> list:
        """Every queued transition after `from_id` (all of them when the queue no longer holds `from_id`)."""
        if not self.ids or from_id >= self.latest_seq_id:
            return []
        if from_id < self.ids[0]:
            return list(self.data)
        return list(self.data)[from_id - self.ids[0] + 1 :]


class ReqRepClient:
    """agentlace's ReqRepClient: pickle, one REQ socket, rebuilt after a timeout (a REQ socket is stuck after one)."""

    def __init__(self, ctx, port: int):
        self.ctx, self.port, self.socket = ctx, port, None
        self.reset_socket()

    def reset_socket(self) -> None:
        if self.socket is not None:
            self.socket.close()
        self.socket = self.ctx.socket(zmq.REQ)
        self.socket.setsockopt(zmq.RCVTIMEO, AGENTLACE_TIMEOUT_MS)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(f"tcp://{HOST}:{self.port}")

    def send_msg(self, request: dict) -> dict | None:
        self.socket.send(pickle.dumps(request))
        try:
            return pickle.loads(self.socket.recv())
        except zmq.Again:
            self.reset_socket()
            return None


def agentlace_learner(cfg, stop, ready) -> dict:
    """agentlace's TrainerServer: one REP socket; "get_last_update_id" answers the store's last id, "datastore" takes a
    batch and records its last id; one reply per request. Serves (b) and (b1) alike."""
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.setsockopt(zmq.SNDHWM, 5)  # as agentlace's ReqRepServer sets it
    rep.bind(f"tcp://{HOST}:{cfg['ports'][0]}")
    last_update_id: dict[str, int] = {}
    inserted = []

    def step(_phase, _measuring):
        if not rep.poll(50):
            return 0
        request = pickle.loads(rep.recv())  # deserialise, as agentlace's server does before its callback
        n, payload = 0, request.get("payload", {})
        if request["type"] == "datastore":
            batch = payload["data"]
            inserted.extend(batch[-1:])  # stand-in for data_store.batch_insert: keep a reference, bounded below
            del inserted[:-16]
            last_update_id[request["store_name"]] = payload["last_id"]
            reply, n = {"success": True}, len(batch)
        elif request["type"] == "get_last_update_id":
            reply = {"success": True, "payload": last_update_id.get(payload["store_name"], -1)}
        else:
            reply = {"success": False, "message": "Invalid type or payload"}
        rep.send(pickle.dumps(reply))
        return n

    try:
        return measure_phases(step, cfg, ready)
    finally:
        ctx.destroy(linger=0)


def agentlace_actor(i, cfg, stop, ready) -> dict:
    """(b): `cfg["agentlace_queue"]` env steps insert into the queue, then `TrainerClient.update()`: ask the server's
    last id, send everything queued after it in one request. Repeated until stopped."""
    pool = serl_transitions(np.random.default_rng(i), 4 * cfg["agentlace_queue"])  # room for 3 failed updates
    ctx = zmq.Context()
    client, store, name = ReqRepClient(ctx, cfg["ports"][0]), QueuedDataStore(AGENTLACE_QUEUE_CAPACITY), f"actor{i}"
    updates, requests, longest = 0, 0, 0
    try:
        while not stop.is_set():
            for _ in range(cfg["agentlace_queue"]):
                store.insert(pool[(store.latest_seq_id + 1) % len(pool)])
            requests += 1
            res = client.send_msg({"type": "get_last_update_id", "payload": {"store_name": name}})
            if res is None or not res["success"]:
                continue  # as update() gives up: the queue is sent, longer, at the next update
            batch = store.get_latest_data(res["payload"])
            longest = max(longest, len(batch))  # over len(pool), a request would repeat transitions
            if batch:
                requests += 1
                msg = {
                    "type": "datastore",
                    "store_name": name,
                    "payload": {"data": batch, "last_id": store.latest_seq_id},
                }
                if client.send_msg(msg) is None:
                    continue
            updates += 1
            if updates == 1:
                mark_ready(ready)
        return {"inserted": store.latest_seq_id + 1, "updates": updates, "requests": requests, "longest": longest}
    finally:
        ctx.destroy(linger=0)


# --- (b1) the earlier baseline, not agentlace's pattern: one transition per request/reply --------------------------
def agentlace_per_transition_actor(i, cfg, stop, ready) -> dict:
    pool = serl_transitions(np.random.default_rng(i), 8)
    ctx = zmq.Context()
    client, sent = ReqRepClient(ctx, cfg["ports"][0]), 0
    try:
        while not stop.is_set():
            msg = {
                "type": "datastore",
                "store_name": f"actor{i}",
                "payload": {"data": [pool[sent % len(pool)]], "last_id": sent},
            }
            if client.send_msg(msg) is None:
                continue
            sent += 1
            if sent == 1:
                mark_ready(ready)
        return {"sent_transitions": sent}
    finally:
        ctx.destroy(linger=0)
