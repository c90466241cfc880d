"""Restarts on either side of the wire: a crashed actor's replacement is welcomed at its first hello (the dead process's
connection closed with it) while a second live process under one id is still refused; after a learner restart,
nothing read from the run folder opens a session, and the real actor process carries on."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from robo_rl.config import config_hash, load_config, save_config
from robo_rl.data.storage import SegmentStore
from robo_rl.learner import Learner
from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import decode, encode
from robo_rl.transport.link import LearnerLink, free_ports
from tests.test_pipeline import toy_config
from tests.test_resume import messages
from tests.test_transport import hello_answered, serve

ROOT = Path(__file__).resolve().parents[1]


def source(ports, *args) -> subprocess.Popen:
    """A real actor process (tests/transport_peers.py's source) under the id actor-0."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.transport_peers",
            "source",
            "--ports",
            *map(str, ports),
            "--actor",
            "actor-0",
            *args,
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def serve_until(learner: LearnerLink, done, seconds: float, received: list) -> None:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        received += learner.poll(10)


@pytest.mark.parametrize("delay_s", [0.0, 1.0], ids=["at-once", "after-1s"])  # a supervisor's reflex, the launcher's
def test_a_killed_actors_replacement_is_welcomed_at_its_first_hello_and_a_live_twin_is_still_refused(delay_s):
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test", actor_timeout_s=60.0)  # the timeout frees nothing
    first = source(ports, "--count", "100000")
    replacement = source(ports, "--count", "20", "--start-on-stdin")  # started beforehand: its hello comes on cue
    twin = None
    received: list = []
    try:
        serve_until(learner, lambda: len(received) >= 5, 30, received)
        assert "actor-0" in learner.alive_actors
        twin = source(ports, "--count", "5")  # a second live process under the same id
        serve_until(learner, lambda: twin.poll() is not None, 30, received)
        out, _ = twin.communicate()
        assert twin.returncode != 0 and "actor id 'actor-0' is in use by another running actor" in out, out[-2000:]
        first_session = learner.actors["actor-0"]["session"]

        first.send_signal(signal.SIGKILL)  # a crash: no goodbye
        first.wait()
        serve_until(learner, lambda: False, delay_s, received)
        replacement.stdin.write("go\n")
        replacement.stdin.flush()
        serve_until(learner, lambda: replacement.poll() is not None, 60, received)
        out, _ = replacement.communicate()
        assert replacement.returncode == 0 and "unacked=0 dropped=0" in out, out[-2000:]
        later = [s for a, _, s, *_ in received if s != first_session]
        assert len(later) == 20 and learner.actors["actor-0"]["session"] == later[0], "the replacement's stream"
        assert learner.bad_messages["conflict"] == 0 and learner.internal_errors == 0
    finally:
        for p in (first, replacement, twin):
            if p is not None:
                p.kill()
        learner.close()


def test_a_heartbeat_read_after_its_connection_closed_does_not_bring_a_killed_actor_back():
    """ZeroMQ may report a connection's close before the learner reads the last messages that came on it (seen on a
    loaded CI machine: a killed actor's last heartbeat revived its session and its replacement was refused). Made
    deterministic here: the heartbeat and the close both wait for one learner poll."""
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test", actor_timeout_s=60.0)
    crashed = ActorLink("127.0.0.1", *ports, actor_id="actor-0", learner_timeout_s=60.0)
    replacement = None
    try:
        t_, _ = serve(learner, 5.0, until=hello_answered(learner))
        crashed.hello("test", timeout_s=5)
        t_.join()
        assert learner.alive_actors == ["actor-0"]
        crashed.heartbeat()  # its last words, then the process is gone: no bye
        crashed.ctx.destroy(linger=1000)
        time.sleep(0.5)  # the heartbeat is in the learner's queue and the close on its monitor
        learner.poll(0)
        assert learner.alive_actors == [] and learner.stale_heartbeats == 1
        replacement = ActorLink("127.0.0.1", *ports, actor_id="actor-0", learner_timeout_s=60.0)
        t_, _ = serve(learner, 5.0, until=lambda: learner.actors["actor-0"]["session"] == replacement.session)
        replacement.hello("test", timeout_s=5)  # welcomed at its first hello
        t_.join()
        replacement.heartbeat()
        serve_until(learner, lambda: False, 0.3, [])
        assert learner.alive_actors == ["actor-0"] and learner.stale_heartbeats == 1, "a live heartbeat counts"
    finally:
        if replacement is not None:
            replacement.close(0)
        learner.close()


def test_after_a_learner_restart_nothing_read_from_the_run_folder_opens_a_session(tmp_path):
    """A forger that reads every file of the run folder (the sessions, their seqs and their token hashes in the replay's
    manifest, every hex string anywhere) and tries each as the token of the stored session: refused every time, no
    record of it stored; the real actor process, with its token in memory only, carries on after the same restart."""
    cfg = toy_config(tmp_path, "replay.flush_every_s=0.05", "train.total_env_steps=100000")
    run = tmp_path / "run"
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    t = cfg.transport
    actor = ActorLink("127.0.0.1", t.data_port, t.weights_port, t.ctrl_port, "actor-0", learner_timeout_s=0.5)
    batches = iter(messages(6))

    def stream(learner: Learner, n: int) -> None:
        """`n` more messages from the actor, each stored and acknowledged."""
        for _ in range(n):
            actor.send_steps({}, next(batches))
        deadline = time.monotonic() + 30
        while (actor.unacked or actor.connected is False) and time.monotonic() < deadline:
            actor.poll(5)
            actor.heartbeat()
            for message in learner.link.poll(5):
                learner.ingest(*message)
            learner.acknowledge(learner.replay.poll())
        assert not actor.unacked, "the actor's messages were not all stored"

    learner = Learner(cfg, run, progress=False)
    try:
        t_, _ = serve(learner.link, 2.0, until=hello_answered(learner.link))
        actor.hello(config_hash(cfg), timeout_s=10)
        t_.join()
        stream(learner, 3)
        learner.checkpoint()
    finally:
        learner.close()

    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    manifest = (run / "replay" / "online" / "manifest.jsonl").read_text().splitlines()
    stored = [entry for line in manifest if (entry := json.loads(line)).get("kind") == "segment"]
    session, last_seq = stored[-1]["seqs"]["actor-0"]
    candidates = {h for entry in stored for *_, h in entry["messages"]}
    candidates |= {m.decode() for data in files.values() for m in re.findall(rb"[0-9a-fA-F]{16,64}", data)}
    assert actor.token not in candidates, "the token itself reached the disk"

    resumed = Learner(load_config([f"resume={run}"]), run, progress=False)  # on the same ports: the actor waits there
    ctx = zmq.Context()
    try:
        records_before = resumed.replay.online.writes
        forger = ctx.socket(zmq.DEALER)
        forger.connect(f"tcp://127.0.0.1:{t.ctrl_port}")
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{t.data_port}")
        replies = []
        for token in sorted(candidates)[:400]:
            hello = {
                "actor": "actor-0",
                "session": session,
                "token": token,
                "first_unacked": last_seq + 1,
                "config_hash": config_hash(cfg),
            }
            forger.send_multipart(encode("hello", hello))
            push.send_multipart(
                encode(
                    "steps",
                    {"actor": "actor-0", "session": session, "seq": last_seq + 1, "token": token},
                    next(iter(messages(1, seed=9))),
                )
            )
            deadline = time.monotonic() + 5
            while not forger.poll(0) and time.monotonic() < deadline:
                for message in resumed.link.poll(5):
                    resumed.ingest(*message)
            replies.append(decode(forger.recv_multipart()))
        assert replies and all(kind == "refused" for kind, *_ in replies), {k for k, *_ in replies}
        assert all("belongs to another process" in meta["reason"] for _, meta, _ in replies)
        resumed.acknowledge(resumed.replay.flush())
        assert resumed.replay.online.writes == records_before, "a forged record was stored"

        stream(resumed, 2)  # the real process: a new incarnation seen, hello again with its own token, welcomed
        resumed.acknowledge(resumed.replay.flush())
        assert resumed.replay.online.writes > records_before
    finally:
        ctx.destroy(linger=0)
        actor.close(0)
        resumed.close()
    store = SegmentStore.open(run / "replay" / "online")
    sessions = {(m[0], m[1]) for seg in store.segments for m in seg.messages}
    assert sessions == {("actor-0", session)}, "every stored message is the real actor's, in its one session"
