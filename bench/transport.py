"""Actor → learner transport: ours against agentlace's pickle REQ/REP, LeRobot's gRPC path and raw ZeroMQ.

4 actor processes stream to 1 learner process on loopback; a transition is two 128x128x3 uint8 images, an
18-d float32 state, a 7-d action and a few scalars. Figures are transitions/s counted at the learner and
MB/s of that unique payload (each transition counted once, whatever a transport actually puts on the wire):

  (a) ours: ActorLink.send_steps → LearnerLink.poll, 64 records per message; wire only (received and
      decoded) and end to end (also check_step_batch + ReplayBuffer.add)
  (b) agentlace (SERL / HIL-SERL), its pattern: the actor queues transitions; each update asks the server's last id
      (a round trip), then sends every transition queued after it in one pickled REQ/REP request, obs and next_obs;
      `--agentlace-queue` transitions per update (default 64, as ours puts in one message)
  (b1) the earlier baseline, not agentlace's pattern: one REQ/REP round trip per transition; kept, labelled, for
      comparison with the figures measured before
  (c) LeRobot 0.6.1: its gRPC LearnerService, 2 MB chunks, torch.save of 64 transitions; wire and end to end
      (needs grpcio + protobuf, i.e. lerobot[hilserl]; skipped without them)
  (d) raw ZeroMQ PUSH/PULL of pre-built buffers, 64 transitions each: the practical limit

Part 2: weight push latency of a 10M-parameter policy while transitions stream: learner publish_weights →
actor has it decoded and loaded into a torch module (wall clock `time.time()`, shared by all processes).

    python bench/transport.py            # 6 s per measurement, 3 interleaved rounds, ~4.5 minutes
    python bench/transport.py --quick    # under a minute
Every process that imports torch runs it with one thread, as robo_rl's actor does on a 2-core machine.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import time
import traceback
from queue import Empty

import _lerobot_baseline as lerobot_baseline
import _transport_baselines as base
import numpy as np
from _results import write_result
from _transport_baselines import ACTION_DIM, BATCH, CAMERAS, HOST, STATE_DIM, UNIQUE_BYTES, mark_ready, measure_phases

from robo_rl.transport.link import free_ports

CONFIG_HASH = "bench-transport"
WINDOW = 8  # step batches an actor keeps unacknowledged before it waits: the transport's own flow control
EPISODE_MESSAGES = 4  # 256-step episodes, so the replay links records across messages as in a real run
# a ~10M-parameter MLP: Linear(in, out) layers of Sequential(Linear, ReLU, Linear, ReLU, Linear)
POLICY_LAYERS = [(1024, 4096), (4096, 1024), (1024, 1536)]


# --- payloads ------------------------------------------------------------------------------------
def step_batch_pool(rng: np.random.Generator, fields: dict, n: int) -> list[dict]:
    """`n` distinct step batches of BATCH records, built the way the actor builds them (stack_records)."""
    from robo_rl.data.schema import stack_records

    pool = []
    for _ in range(n):
        records = []
        for _ in range(BATCH):
            rec = {}
            for name, (shape, dtype) in fields.items():
                if name.startswith("image/"):
                    rec[name] = rng.integers(0, 256, shape, dtype=np.uint8)
                elif np.dtype(dtype).kind == "f":
                    rec[name] = rng.uniform(-1, 1, shape).astype(dtype)
                else:
                    rec[name] = np.zeros(shape, dtype)
            records.append(rec)
        pool.append(stack_records(records, fields))
    return pool


def numbered(batch: dict, k: int) -> dict:
    """Batch `k` of this actor: fresh episode ids, steps and end flags (the images are shared, read-only)."""
    episode, part = divmod(k, EPISODE_MESSAGES)
    out = dict(batch)
    out["episode_id"] = np.full(BATCH, episode, np.int64)
    out["step"] = np.arange(part * BATCH, (part + 1) * BATCH, dtype=np.int32)
    out["truncated"] = np.zeros(BATCH, np.bool_)
    out["truncated"][-1] = part == EPISODE_MESSAGES - 1
    out["timestamp"] = np.full(BATCH, time.time())
    return out


def policy_arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for i, (n_in, n_out) in enumerate(POLICY_LAYERS):
        out[f"{2 * i}.weight"] = rng.standard_normal((n_out, n_in), dtype=np.float32)
        out[f"{2 * i}.bias"] = np.zeros(n_out, np.float32)
    return out


def policy_module():
    import torch

    torch.set_num_threads(1)  # as robo_rl's actor runs (torch_threads: 1): idle intra-op threads spin on 2 cores
    layers = []
    for n_in, n_out in POLICY_LAYERS:
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


# --- (a) ours ------------------------------------------------------------------------------------
def ours_learner(cfg, stop, ready) -> dict:
    from robo_rl.data.replay import ReplayBuffer
    from robo_rl.data.schema import check_step_batch, step_fields
    from robo_rl.transport.link import LearnerLink

    fields = step_fields(STATE_DIM, ACTION_DIM, CAMERAS)
    link = LearnerLink(HOST, *cfg["ports"], CONFIG_HASH)
    replay = ReplayBuffer(cfg["replay_capacity"], fields)
    for a in getattr(replay, "data", {}).values():
        a.fill(0)  # touch the pages now: a long-running learner's buffer is resident
    push = cfg.get("weights")
    first = policy_arrays(np.random.default_rng(0)) if push else None
    published: dict[int, float] = {}  # version → time.time() just before publish_weights
    publish_ms: list[float] = []
    next_push = [0.0]

    def step(phase, measuring):
        n = 0
        for actor, arrays, _, _, _ in link.poll(timeout_ms=2):
            if phase in ("startup", "wire"):
                n += len(arrays["reward"])
            else:
                n += check_step_batch(arrays, fields)
                replay.add(arrays, source=actor)
        now = time.monotonic()
        if measuring and phase == "weights" and len(published) < push["count"] and now >= next_push[0]:
            version = len(published) + 1
            arrays = {k: v.copy() for k, v in first.items()}  # a new tensor set per version, as state_dict() gives
            arrays["0.weight"][0, 0] = version  # lets the actor check it loaded this version
            published[version] = time.time()
            link.publish_weights(version, arrays)
            publish_ms.append((time.time() - published[version]) * 1000)
            next_push[0] = max(next_push[0], now - push["interval_s"]) + push["interval_s"]  # on a grid: no drift
        return n

    try:
        rates = measure_phases(step, cfg, ready)
        return {"rates": rates, "published": published, "publish_call_ms": publish_ms, "stored": len(replay)}
    finally:
        link.close()


def ours_actor(i, cfg, stop, ready) -> dict:
    from robo_rl.data.schema import step_fields
    from robo_rl.transport.actor_link import ActorLink
    from robo_rl.transport.codec import arrays_to_state_dict
    from robo_rl.transport.shm_weights import SharedWeightsReader

    pool = step_batch_pool(np.random.default_rng(i), step_fields(STATE_DIM, ACTION_DIM, CAMERAS), 4)
    policy = policy_module() if cfg.get("weights") else None
    link = ActorLink(HOST, *cfg["ports"], f"actor{i}")  # local actors take weights from shared memory
    shm = SharedWeightsReader()
    loads, wrong, k, received = [], 0, 0, 0
    try:
        link.hello(CONFIG_HASH, cfg["startup_s"])
        mark_ready(ready)
        while not stop.is_set():
            full = len(link.unacked) >= WINDOW  # then wait in poll (an ack frees the window) rather than spin
            weights = [
                (kind, meta, arrays)
                for kind, meta, arrays in link.poll(timeout_ms=1 if full else 0)
                if kind.startswith("weights")
            ]
            received += len(weights)
            if weights and policy is not None:
                kind, meta, arrays = weights[-1]  # latest wins
                try:
                    arrays = shm.arrays(meta) if kind == "weights_shm" else arrays
                except ValueError:  # the slot is gone (a learner stopping first on a loaded machine): as the actor
                    arrays = None
                if arrays is not None:
                    policy.load_state_dict(arrays_to_state_dict(arrays))
                    if kind == "weights" or shm.still_valid(meta):
                        loads.append((meta["version"], time.time()))
                        wrong += float(policy[0].weight.detach()[0, 0]) != meta["version"]
            if not full:
                link.send_steps({"policy_version": 0}, numbered(pool[k % len(pool)], k))
                k += 1
        return {
            "sent_batches": k,
            "dropped": link.dropped_messages,
            "loads": loads,
            "wrong_weights": wrong,
            "weights_received": received,
        }
    finally:
        link.close(linger_s=0)


# --- running a group of processes ----------------------------------------------------------------
def _worker(fn, role: str, args: tuple, results) -> None:
    logging.basicConfig(level=logging.ERROR)  # ours warns on close with messages in flight: expected here
    try:
        out = fn(*args)
    except BaseException as e:  # reported to the parent, which stops the group
        out = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    results.put((role, out))


def run_group(learner_fn, actor_fn, cfg: dict) -> dict:
    """One learner and cfg["actors"] actors, each in a spawned process; returns role → result.
    Bounded in time; every process is stopped, then terminated, then killed, whatever happens."""
    ctx = mp.get_context("spawn")
    stop, ready, results = ctx.Event(), ctx.Value("i", 0), ctx.Queue()
    procs = {"learner": ctx.Process(target=_worker, args=(learner_fn, "learner", (cfg, stop, ready), results))}
    for i in range(cfg["actors"]):
        procs[f"actor{i}"] = ctx.Process(target=_worker, args=(actor_fn, f"actor{i}", (i, cfg, stop, ready), results))
    out: dict = {}
    t0 = time.monotonic()
    budget = cfg["startup_s"] + sum(w + max(s, cfg.get("max_phase_s", s)) for _, w, s in cfg["phases"]) + 10

    def collect(until: float, done) -> None:
        while not done() and time.monotonic() < until:
            try:
                role, res = results.get(timeout=0.2)
                out[role] = res
            except Empty:
                if procs["learner"].exitcode is not None and "learner" not in out:
                    time.sleep(0.5)  # its report may still be in the pipe
                    if results.empty():
                        out["learner"] = {"error": f"learner exited with code {procs['learner'].exitcode}"}

    try:
        for p in procs.values():
            p.start()
        collect(time.monotonic() + budget, lambda: "learner" in out or any("error" in r for r in out.values()))
        stop.set()
        collect(time.monotonic() + 8, lambda: len(out) == len(procs))  # actors report after the stop
    finally:
        stop.set()
        deadline = time.monotonic() + 5
        for p in procs.values():
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in procs.values():
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()
    if "learner" not in out:
        out["learner"] = {"error": f"no result (stopped on another process's error, or past its {budget:.0f} s)"}
    print(f"  [{learner_fn.__name__.removesuffix('_learner')}: {time.monotonic() - t0:.1f} s with start-up]")
    return out


def learner_rates(name: str, out: dict) -> dict | None:
    errors = {role: r["error"] for role, r in out.items() if "error" in r}
    if errors:
        print(f"  {name} FAILED: {errors}")
        for r in out.values():
            if "traceback" in r:
                print(r["traceback"])
                break
        return None
    res = out["learner"]
    return res.get("rates", res)


def latencies(name: str, out: dict) -> dict:
    """Publish → loaded latency over every (actor, version) pair: each version's learner timestamp against the
    actor's, both `time.time()` on one machine. Versions an actor skipped (latest wins) or never got are counted."""
    if learner_rates(name, out) is None:
        return {}
    published = {int(v): t for v, t in out["learner"]["published"].items()}
    lat = [
        (t - published[v]) * 1000
        for role, res in out.items()
        if role != "learner"
        for v, t in res.get("loads", [])
        if v in published
    ]
    if not lat:
        return {}
    p50, p99 = np.percentile(lat, [50, 99])
    return {
        "p50_ms": round(float(p50), 1),
        "p99_ms": round(float(p99), 1),
        "max_ms": round(max(lat), 1),
        "loads": len(lat),
        "expected": len(published) * (len(out) - 1),
    }


def fmt(tps: float | None) -> str:
    if tps is None:
        return "not measured"
    return f"{tps:,.0f} transitions/s, {tps * UNIQUE_BYTES / 1e6:,.0f} MB/s"


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short measurements (whole run under a minute)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds of a, b, b1, d (medians)")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--only", default="abpcdw", help="subset of a,b,p (b1),c,d (throughput) and w (weights)")
    parser.add_argument("--agentlace-queue", type=int, default=BATCH, help="(b): transitions queued per update")
    args = parser.parse_args()
    secs = args.seconds or (1.5 if args.quick else 6.0)
    warm = 0.4 if args.quick else 1.0
    rounds = args.rounds or (1 if args.quick else 3)  # interleaved, so a load change hits every transport alike
    pushes, interval = (6, 0.3) if args.quick else (50, 0.5)  # slower than one push takes, so no backlog
    t_start, load0 = time.monotonic(), os.getloadavg()
    print(
        f"{args.actors} actors -> 1 learner on {HOST}, {os.cpu_count()} CPUs, load {load0[0]:.2f} {load0[1]:.2f}; "
        f"{UNIQUE_BYTES:,} unique bytes per transition; {secs:g} s per measurement, {rounds} round(s)"
    )

    # --quick on a loaded machine: each measurement runs on until 16 messages per actor came in (at most 20 s),
    # and the processes get twice as long to start
    least = {"min_transitions": 16 * 64 * args.actors, "max_phase_s": 20.0} if args.quick else {}

    def cfg(phases, n_ports=1, startup_s=30.0, **extra):
        return {
            "actors": args.actors,
            "ports": free_ports(n_ports),
            "phases": phases,
            "replay_capacity": 8192,
            "startup_s": startup_s * (2 if args.quick else 1),
            "agentlace_queue": args.agentlace_queue,
            **least,
            **extra,
        }

    def rate(name, out, phase):
        value = (learner_rates(name, out) or {}).get(phase)
        print(f"    {name} {phase}: {fmt(value)}")
        return value

    n_params = sum(a.size for a in policy_arrays(np.random.default_rng(0)).values())
    push = {"count": pushes, "interval_s": interval, "bytes": 4 * n_params}
    push_phase = ("weights", warm, pushes * interval + 0.5)  # the tail lets the last push arrive
    kinds = ("raw_zmq", "ours_wire", "ours_e2e", "agentlace_queue", "agentlace_1_per_request")
    samples: dict[str, list] = {k: [] for k in kinds}
    w: dict = {}
    agentlace_longest = 0
    for rnd in range(rounds):
        with_weights = "w" in args.only and rnd == rounds - 1  # the weight pushes ride on the last ours group
        if "d" in args.only:
            out = run_group(base.raw_learner, base.raw_actor, cfg([("wire", warm, secs)]))
            samples["raw_zmq"].append(rate("(d) raw", out, "wire"))
        if "a" in args.only or with_weights:
            phases = [("wire", warm, secs), ("e2e", warm, secs)] if "a" in args.only else []
            phases += [push_phase] if with_weights else []
            out = run_group(ours_learner, ours_actor, cfg(phases, 3, startup_s=60.0, weights=with_weights and push))
            if "a" in args.only:
                samples["ours_wire"].append(rate("(a) ours", out, "wire"))
                samples["ours_e2e"].append(rate("(a) ours", out, "e2e"))
            if with_weights and (ours := latencies("weights", out)):
                learner = out["learner"]
                w = {f"weights_{k}": v for k, v in ours.items()}
                w["weights_wrong_version"] = sum(res.get("wrong_weights", 0) for res in out.values())
                w["weights_publish_call_ms_p50"] = round(float(np.median(learner["publish_call_ms"])), 1)
                w["ours_e2e_during_pushes_tps"] = round(learner["rates"]["weights"])
        if "b" in args.only:
            out = run_group(base.agentlace_learner, base.agentlace_actor, cfg([("wire", warm, secs)]))
            samples["agentlace_queue"].append(rate("(b) agentlace", out, "wire"))
            sizes = [res.get("longest", 0) for role, res in out.items() if role != "learner"]
            agentlace_longest = max([agentlace_longest, *sizes])  # past 4 queues a request repeats transitions
        if "p" in args.only:
            out = run_group(base.agentlace_learner, base.agentlace_per_transition_actor, cfg([("wire", warm, secs)]))
            samples["agentlace_1_per_request"].append(rate("(b1) 1 per request", out, "wire"))
    r = {k: float(np.median(v)) if v and None not in v else None for k, v in samples.items() if v}
    if "c" in args.only:
        r["lerobot_wire"] = r["lerobot_e2e"] = None
        if why := lerobot_baseline.lerobot_available():
            print(f"(c) LeRobot gRPC: skipped, cannot import its transport ({why}); pip install 'lerobot[hilserl]'")
        else:
            c_cfg = cfg([("wire", warm, secs), ("e2e", warm + 0.5, secs)], startup_s=60.0, replay_capacity=2048)
            out = run_group(lerobot_baseline.lerobot_learner, lerobot_baseline.lerobot_actor, c_cfg)
            r["lerobot_wire"], r["lerobot_e2e"] = rate("(c) lerobot", out, "wire"), rate("(c) lerobot", out, "e2e")
    if "w" in args.only:
        out = run_group(base.raw_weights_learner, base.raw_weights_actor, cfg([push_phase], weights=push))
        floor = latencies("raw weights", out)
        w |= {"weights_params": int(n_params), "weights_pushes": pushes, "weights_interval_s": interval}
        w |= {f"weights_raw_pubsub_{k}": v for k, v in floor.items()}

    print(f"\n{'figure':52s} transitions/s      MB/s   (median of {rounds} round(s) for a, b, b1, d)")
    for key, label in (
        ("raw_zmq", f"(d) raw ZeroMQ PUSH/PULL, {BATCH} per message"),
        ("ours_wire", "(a) ours, wire (received + decoded)"),
        ("ours_e2e", "(a) ours, end to end (+ check_step_batch + ReplayBuffer.add)"),
        ("agentlace_queue", f"(b) agentlace: queue of {args.agentlace_queue} per request"),
        ("agentlace_1_per_request", "(b1) not agentlace's: pickle REQ/REP, 1 per request"),
        ("lerobot_wire", "(c) LeRobot gRPC, wire (chunks reassembled)"),
        ("lerobot_e2e", "(c) LeRobot gRPC, end to end (torch.load + its replay add)"),
    ):
        if key in r:
            v = r[key]
            print(f"{label:52s} {'-' if v is None else f'{v:13,.0f} {v * UNIQUE_BYTES / 1e6:9,.0f}'}")
    if "w" in args.only:
        print(
            f"weights: {n_params / 1e6:.1f}M params ({4 * n_params / 1e6:.0f} MB) pushed {pushes}x, "
            f"every {interval:g} s, to {args.actors} actors while transitions stream (ours)"
        )
        for name, pre in (
            ("raw ZeroMQ PUB/SUB of the bytes, idle (floor)", "weights_raw_pubsub_"),
            ("ours, decoded + load_state_dict", "weights_"),
        ):
            if f"{pre}p50_ms" in w:
                print(
                    f"  {name}: p50 {w[pre + 'p50_ms']} ms, p99 {w[pre + 'p99_ms']} ms, max {w[pre + 'max_ms']} ms, "
                    f"{w[pre + 'loads']}/{w[pre + 'expected']} loads"
                )
        if "ours_e2e_during_pushes_tps" in w:
            print(f"  ours end to end meanwhile: {fmt(w['ours_e2e_during_pushes_tps'])}")

    ratios = {
        "ours_wire_vs_raw": ratio(r.get("ours_wire"), r.get("raw_zmq")),
        "ours_e2e_vs_raw": ratio(r.get("ours_e2e"), r.get("raw_zmq")),
        "ours_wire_vs_agentlace_queue": ratio(r.get("ours_wire"), r.get("agentlace_queue")),
        "ours_e2e_vs_agentlace_queue": ratio(r.get("ours_e2e"), r.get("agentlace_queue")),
        "ours_wire_vs_agentlace_1_per_request": ratio(r.get("ours_wire"), r.get("agentlace_1_per_request")),
        "ours_wire_vs_lerobot_wire": ratio(r.get("ours_wire"), r.get("lerobot_wire")),
        "ours_e2e_vs_lerobot_e2e": ratio(r.get("ours_e2e"), r.get("lerobot_e2e")),
        "raw_vs_agentlace_queue": ratio(r.get("raw_zmq"), r.get("agentlace_queue")),  # the most any transport reaches
    }

    def met(value, bound, above=True):
        return None if value is None else bool(value >= bound if above else value <= bound)

    targets = {  # like for like: wire figures against wire figures, end to end against end to end
        "ours_wire >= 0.7 x raw": met(ratios["ours_wire_vs_raw"], 0.7),
        "ours_wire >= 5 x agentlace_queue": met(ratios["ours_wire_vs_agentlace_queue"], 5),
        "ours_wire >= 5 x lerobot_wire": met(ratios["ours_wire_vs_lerobot_wire"], 5),
        "ours_e2e >= 5 x lerobot_e2e": met(ratios["ours_e2e_vs_lerobot_e2e"], 5),
        "weights p50 <= 30 ms": met(w.get("weights_p50_ms"), 30, above=False),
        "weights p99 <= 100 ms": met(w.get("weights_p99_ms"), 100, above=False),
    }
    print("ratios: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    for name, ok in targets.items():
        print(f"target {name}: {'not measured' if ok is None else 'met' if ok else 'MISSED'}")
    load1 = os.getloadavg()
    print(f"total {time.monotonic() - t_start:.0f} s, load now {load1[0]:.2f} {load1[1]:.2f}")
    figures = {f"{k}_tps": v and round(v) for k, v in r.items()}
    figures |= {f"{k}_MBps": v and round(v * UNIQUE_BYTES / 1e6) for k, v in r.items()}
    figures["rounds_tps"] = {k: [v and round(v) for v in vs] for k, vs in samples.items() if vs}
    result = {
        "bench": "transport",
        "quick": args.quick,
        "seconds": secs,
        "rounds": rounds,
        "actors": args.actors,
        "batch": BATCH,
        "agentlace_queue": args.agentlace_queue,
        "agentlace_longest_request": agentlace_longest,
        "unique_bytes_per_transition": UNIQUE_BYTES,
        "cpus": os.cpu_count(),
        "load_before": round(load0[0], 2),
        "load_after": round(load1[0], 2),
        **figures,
        **w,
        "ratios": ratios,
        "targets": targets,
    }
    write_result("transport", result, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
