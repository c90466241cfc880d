"""No process can speak for an actor, nothing unstored is acknowledged, a foreign process cannot stop the
learner, a learner that goes away (crash or Ctrl-C) leaves its actors holding, and a flood stays bounded."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from robo_rl.actor import Actor
from robo_rl.config import config_hash
from robo_rl.data.storage import SegmentStore
from robo_rl.learner import Learner
from robo_rl.runs import read_metrics
from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import encode
from robo_rl.transport.link import LearnerLink, TransportError, free_ports, token_hash
from robo_rl.transport.security import CurveKeys, generate_keys
from tests.test_pipeline import SMALL_NETS, toy_config
from tests.test_transport import hello_answered, serve, serving

ROOT = Path(__file__).resolve().parents[1]


def connect(learner: LearnerLink, actor: ActorLink) -> None:
    t, _ = serve(learner, 5.0, until=hello_answered(learner, actor.actor_id))
    actor.hello(learner.config_hash, timeout_s=5)
    t.join()


def pump(learner, actor, until, seconds=5.0) -> list:
    got, deadline = [], time.monotonic() + seconds
    while not until(got) and time.monotonic() < deadline:
        actor.poll(10)
        actor.heartbeat()
        got += learner.poll(10)
    return got


def test_a_second_live_actor_under_the_same_id_is_refused_by_name():
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    first, second = ActorLink("127.0.0.1", *ports, "actor-0"), ActorLink("127.0.0.1", *ports, "actor-0")
    try:
        connect(learner, first)
        with serving(learner), pytest.raises(TransportError, match=r"actor id 'actor-0' is in use .*actor\.id=<name>"):
            second.hello("h", timeout_s=3)
        first.send_steps({}, {"x": np.ones(1)})
        assert [a for a, *_ in pump(learner, first, bool)] == ["actor-0"], "the first actor is still served"
    finally:
        first.close(0)
        second.close(0)
        learner.close()


def test_with_curve_an_actor_key_speaks_only_for_its_own_actor_ids(tmp_path):
    generate_keys(tmp_path / "keys", ["arm1", "arm2"])
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h", curve=CurveKeys.load(tmp_path / "keys", "learner"))
    arm1_keys = CurveKeys.load(tmp_path / "keys", "arm1")
    own, sub, other = (ActorLink("127.0.0.1", *ports, name, curve=arm1_keys) for name in ("arm1", "arm1.wrist", "arm2"))
    try:
        connect(learner, own)
        connect(learner, sub)
        with serving(learner), pytest.raises(TransportError, match="key 'arm1' may not speak for actor id 'arm2'"):
            other.hello("h", timeout_s=3)
        assert set(learner.actors) == {"arm1", "arm1.wrist"}
    finally:
        for link in (own, sub, other):
            link.close(0)
        learner.close()


def test_data_without_the_session_token_is_dropped_and_a_resend_with_other_content_is_never_acknowledged():
    """A process that copied an actor's id and session (from the run folder) cannot store data under it; and
    if a message number comes again with other content (two processes sharing one session), the learner
    refuses the session instead of acknowledging data it did not store."""
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    learner.auto_ack = False
    actor = ActorLink("127.0.0.1", *ports, "actor-0")
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUSH)
    raw.connect(f"tcp://127.0.0.1:{ports[0]}")
    try:
        connect(learner, actor)
        forged = {"actor": "actor-0", "session": actor.session, "seq": 1, "token": "0" * 32}
        raw.send_multipart(encode("steps", forged, {"x": np.zeros(1)}))
        deadline = time.monotonic() + 3
        while not learner.bad_messages["forged"] and time.monotonic() < deadline:
            learner.poll(10)
        assert learner.bad_messages["forged"] == 1 and learner.actors["actor-0"]["acked"] == 0

        actor.send_steps({}, {"x": np.ones(1)})
        (got,) = pump(learner, actor, bool)
        learner.ack("actor-0", got[3])  # stored: acknowledged
        pump(learner, actor, lambda _: not actor.unacked)
        assert not actor.unacked
        # the same session and token (a forked process), message 2 twice with different content
        actor.send_steps({}, {"x": np.full(1, 2.0)})
        pump(learner, actor, bool)
        twin = {"actor": "actor-0", "session": actor.session, "seq": 2, "token": actor.token}
        raw.send_multipart(encode("steps", twin, {"x": np.full(1, 3.0)}))
        with pytest.raises(TransportError, match="message 2 of session .* with other content than the first copy"):
            pump(learner, actor, lambda _: False, seconds=3)
        assert learner.bad_messages["conflict"] == 1
        learner.ack("actor-0", 2)
        assert learner.actors["actor-0"]["durable"] == 1, "nothing is acknowledged to a refused session"
        assert 2 in actor.unacked, "the actor still holds what was not acknowledged"
    finally:
        ctx.destroy(linger=0)
        actor.close(0)
        learner.close()


def test_a_restarted_learner_knows_the_session_by_its_token_hash_and_refuses_a_stolen_one():
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    learner.expect("actor-0", 77, 5, token_hash("the real token"))
    thief = ActorLink("127.0.0.1", *ports, "actor-0")
    thief.session, thief.seq = 77, 5  # copied from the run folder; the token is not there
    try:
        with (
            serving(learner),
            pytest.raises(TransportError, match="session 4d of actor id 'actor-0' belongs to another process"),
        ):
            thief.hello("h", timeout_s=3)
    finally:
        thief.close(0)
        learner.close()


def test_a_foreign_process_with_no_robo_rl_code_cannot_stop_the_learner_or_plant_data(tmp_path):
    """About a hundred hand-made hostile messages from a process that imports only zmq, msgpack and numpy, sent
    while a real actor trains with a real learner: the run finishes, every message is a counted drop, and
    no forged record is stored."""
    from robo_rl.transport.codec import PROTOCOL_VERSION
    from tests.foreign_peer import FORGED_STATE, V

    assert V == PROTOCOL_VERSION, "the foreign peer speaks an old protocol: its messages would test only the version"

    cfg = toy_config(tmp_path, "train.total_env_steps=100000", "replay.flush_every_s=0.1", *SMALL_NETS)
    run = tmp_path / "run"
    run.mkdir()
    learner = Learner(cfg, run, progress=False)
    result = {}
    t = threading.Thread(target=lambda: result.update(reason=learner.run()))
    t.start()
    t_ = cfg.transport
    peer = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "foreign_peer.py"),
            "--ports",
            str(t_.data_port),
            str(t_.weights_port),
            str(t_.ctrl_port),
            "--run",
            str(run),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peer_output = []

    def end_the_run_once_the_peer_is_done():
        try:
            peer_output.extend(peer.communicate(timeout=120))
        finally:  # the learner's loop reads its total each pass: the run ends "done" now, however far it got
            cfg.train.total_env_steps = learner.env_steps

    watcher = threading.Thread(target=end_the_run_once_the_peer_is_done)
    watcher.start()
    try:
        reason = Actor(cfg, progress=False).run()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the actor's shutdown ignores Ctrl-C; undo it
        watcher.join(timeout=60)
    finally:
        peer.kill()
        t.join(timeout=60)
    out, err = peer_output
    assert peer.returncode == 0, err[-2000:]
    assert "robo_rl" not in err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["sent"] >= 90
    assert reason == "done" and result["reason"] == "done"
    assert learner.link.internal_errors == 0
    bad = learner.link.bad_messages
    assert bad["undecodable"] and bad["invalid"] and bad["invalid ctrl"] and bad["forged"] and bad["wrong connection"]
    store = SegmentStore.open(run / "replay" / "online")
    for _, batch, sources in store.iter_segments():
        assert set(sources) == {"actor-0"} and not np.any(batch["state"] == FORGED_STATE), "a forged record was stored"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line, parse_constant=pytest.fail) for line in lines]  # strict JSON
    assert metrics[-1]["kind"] == "end" and metrics[-1]["reason"] == "done" and not metrics[-1]["crashed"]


@pytest.mark.parametrize("stop", ["crash", "ctrl-c"])
def test_a_crashed_or_interrupted_learner_says_so_and_tells_actors_to_hold(tmp_path, stop):
    """A crash (exits non-zero) or a Ctrl-C in the learner's loop: the end record says which, and the actors are told to
    hold, keeping their data for a restarted learner (with real processes: test_train_learner_crash, -m slow below)."""
    # acks wait for the replay's flush, and the actor keeps 5 unacknowledged: flushed often, it is not a 6 s wait
    cfg = toy_config(tmp_path, "train.total_env_steps=100000", "replay.flush_every_s=0.05", *SMALL_NETS)
    run = tmp_path / "run"
    run.mkdir()
    learner = Learner(cfg, run, progress=False)
    actor = ActorLink(
        "127.0.0.1", cfg.transport.data_port, cfg.transport.weights_port, cfg.transport.ctrl_port, "actor-0"
    )
    original = learner.update

    def broken_update():
        if learner.updates > 20:
            if stop == "ctrl-c":
                raise KeyboardInterrupt  # where a terminal's SIGINT lands: in the loop
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return original()

    learner.update = broken_update
    raised, returned = [], []

    def run_learner():
        try:
            returned.append(learner.run())
        except RuntimeError as e:
            raised.append(e)

    t = threading.Thread(target=run_learner)
    t.start()
    try:
        from tests.test_resume import messages

        actor.hello(config_hash(cfg), timeout_s=10)
        stops, deadline, msgs = [], time.monotonic() + 60, iter(messages(80))
        while not stops and time.monotonic() < deadline:
            if len(actor.unacked) < 5 and (batch := next(msgs, None)) is not None:
                actor.send_steps({}, batch, env_steps=int((batch["step"] > 0).sum()))
            stops += [m for k, m, _ in actor.poll(10) if k == "stop"]
        t.join(timeout=30)
    finally:
        actor.close(0)
    end = read_metrics(run / "metrics.jsonl")[-1]
    assert stops and stops[0]["hold"] is True, stops
    if stop == "crash":
        assert "crashed: RuntimeError" in stops[0]["reason"]
        assert raised, "the crash propagates: `robo-rl learner` exits non-zero"
        assert end["kind"] == "end" and end["crashed"] and end["reason"].startswith("crashed: RuntimeError: CUDA error")
    else:
        assert stops[0]["reason"] == "interrupted (Ctrl-C)" and not raised and returned == ["interrupted (Ctrl-C)"]
        assert end["kind"] == "end" and not end["crashed"] and end["reason"] == "interrupted (Ctrl-C)"
        assert end["checkpoint"], "an interrupted learner leaves a checkpoint to resume from"


# slow: covered fast by test_a_crashed_or_interrupted_learner_says_so_and_tells_actors_to_hold (the hold on Ctrl-C) and
# test_train_learner_crash (an actor process holding through a killed learner, going on with the next); kill -9:
# test_resume too
@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_an_actor_holds_when_its_learner_stops_before_the_end_and_carries_on_with_the_next(tmp_path, how):
    """A learner started alone and stopped with Ctrl-C (or killed) mid-run: the actor in the other terminal takes
    no steps, keeps its data, and goes on when a learner resumes the run; only the finished run ends it."""
    from tests.test_cli import isolated
    from tests.waiting import wait_until

    args = [
        *isolated(tmp_path),
        "env=point_reach",
        "demos.num_episodes=3",
        "train.learning_starts=100",
        "train.total_env_steps=300",
        "algo.batch_size=32",
        *SMALL_NETS,
        "eval.episodes=1",
        f"run_dir={tmp_path / 'run'}",
        "replay.flush_every_s=0.2",
        "transport.actor_timeout_s=2",
        "actor.hello_timeout_s=60",
    ]  # the first hello waits longer on a loaded machine
    env = {**os.environ, "MUJOCO_GL": "egl"}

    def start(role, *given):
        log = open(tmp_path / f"{role}.log", "a")
        return subprocess.Popen(
            [sys.executable, "-m", "robo_rl.cli", role, *(given or args)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    learner = start("learner")
    actor = None
    try:
        wait_until(lambda: (tmp_path / "run" / "learner.pid").exists(), 120, "the learner to start", every_s=0.2)
        actor = start("actor")
        # stopped only once the actor's data is stored (on a loaded machine its start can take a minute)
        wait_until(
            lambda: list((tmp_path / "run" / "replay" / "online").glob("seg_*.rrs")),
            120,
            "stored actor data",
            every_s=0.2,
        )
        if how == "ctrl-c":
            learner.send_signal(signal.SIGINT)
        else:
            learner.kill()
        assert learner.wait(timeout=30) != 0
        time.sleep(3)  # past transport.actor_timeout_s: the actor notices, and holds
        if how == "ctrl-c":  # its log says so, later on a loaded machine
            wait_until(
                lambda: "holding" in (tmp_path / "actor.log").read_text(), 60, "the actor to log 'holding'", every_s=0.2
            )
        assert actor.poll() is None, (tmp_path / "actor.log").read_text()[-2000:]
        learner = start("learner", f"resume={tmp_path / 'run'}", "logger.progress=false")
        assert learner.wait(timeout=120) == 0, (tmp_path / "learner.log").read_text()[-2000:]
        assert actor.wait(timeout=30) == 0, (tmp_path / "actor.log").read_text()[-2000:]
    finally:
        for p in (learner, actor):
            if p is not None and p.poll() is None:
                p.kill()
    ends = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["kind"] == "end"]
    assert ends[-1]["reason"] == "done"


def test_memory_under_a_flood_of_large_messages_stays_bounded():
    """Two foreign senders push 2 MB messages as fast as they can at a learner that is not reading: ZeroMQ holds
    at most receive_queue_messages per connection, so the learner's memory grows by a bounded amount."""
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h", max_message_mb=2.5, receive_queue_messages=4)
    # each floods until its socket has taken the two queues' worth (2 + 4) and then nothing more for 1 s: the flood
    # lasts as long as filling takes, not a fixed time from a start that can lag seconds on a loaded machine
    code = (
        "import sys, time, zmq; c = zmq.Context(); s = c.socket(zmq.PUSH); s.setsockopt(zmq.SNDHWM, 2);"
        f"s.connect('tcp://127.0.0.1:{ports[0]}'); m = b'\\0' * (2 << 20); n = 0; cap = end = time.time() + 30\n"
        "while time.time() < min(end, cap):\n"
        "    try: s.send(m, zmq.NOBLOCK); n += 1; end = time.time() + 1.0 if n >= 6 else cap\n"
        "    except zmq.Again: time.sleep(0.001)\n"
        "print(n)"
    )
    rss = lambda: int(next(line for line in open("/proc/self/status") if line.startswith("VmRSS")).split()[1]) * 1024  # noqa: E731
    before = rss()
    senders = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        peak = before
        while any(s.poll() is None for s in senders):  # sampled for as long as the flood lasts
            peak = max(peak, rss())
            time.sleep(0.05)
        sent = [int(s.communicate(timeout=30)[0]) for s in senders]
        drained = 0
        while learner.poll(50) or drained < 5:  # what was queued is still there and gets read
            drained += 1
    finally:
        for s in senders:
            s.kill()
        learner.close()
    growth_mb = (peak - before) / 2**20
    bound_mb = 2 * (4 + 4) * 2  # connections × (receive queue + kernel and I/O-thread slack) × message size
    print(f"\nflood: {sent} sends of 2 MB taken by the senders' sockets; learner RSS +{growth_mb:.0f} MB")
    assert min(sent) >= 2 + 4, "a sender's queue and the learner's were filled (else the flood measured nothing)"
    assert growth_mb < bound_mb + 20, f"the learner grew by {growth_mb:.0f} MB under the flood"


def test_only_the_first_of_several_interrupts_interrupts():
    """A terminal's Ctrl-C reaches the whole process group and `train` passes its own on: a second SIGINT arriving
    while the learner starts saving its checkpoint must not cut that short (a CI run lost the end record so)."""
    from robo_rl.shutdown import interrupt_once

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        interrupt_once()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs on the main thread between bytecodes
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # neither raises now
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
