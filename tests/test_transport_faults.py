"""Transport faults with real processes on loopback: learner restart, actor death, garbage, no key."""

import collections
import concurrent.futures
import ipaddress
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import encode
from robo_rl.transport.link import LearnerLink, TransportError, free_ports
from robo_rl.transport.security import CurveKeys, generate_keys
from tests.test_transport import hello_answered, serve, serving
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def peer(*args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.transport_peers", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_learner_killed_and_restarted_loses_and_duplicates_nothing(tmp_path):
    ports = [str(p) for p in free_ports(3)]
    out = tmp_path / "received.txt"
    sink = peer("sink", "--ports", *ports, "--out", str(out))
    sources = [
        peer("source", "--ports", *ports, "--actor", f"actor-{i}", "--count", "300", "--period", "0.005")
        for i in range(2)
    ]
    try:  # killed mid-stream, whenever the processes got going: once a quarter of it is stored
        assert wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 150, 60, "a quarter stored")
        sink.kill()  # kill -9: no goodbye, no flush
        sink.wait()
        time.sleep(0.5)  # the actors keep producing while no learner is there
        sink = peer("sink", "--ports", *ports, "--out", str(out))
        for s in sources:
            text, _ = s.communicate(timeout=90)
            if not (s.returncode == 0 and "unacked=0 dropped=0" in text):  # once at load 12: say what the sink did
                said = sink.communicate(timeout=5)[0] if sink.poll() is not None else "(still running)"
                pytest.fail(f"source (exit {s.returncode}): {text}\nrestarted sink (exit {sink.returncode}): {said}")
    finally:
        sink.kill()
        for s in sources:
            s.kill()
    rows = [line.split() for line in out.read_text().splitlines()]
    got = collections.Counter((r[0], int(r[1])) for r in rows if len(r) == 5)
    expected = {(f"actor-{i}", k) for i in range(2) for k in range(300)}
    assert set(got) == expected, f"missing {sorted(expected - set(got))[:5]}"
    assert max(got.values()) == 1, "a message was stored twice"


def test_an_actor_killed_is_noticed_within_3_s_and_the_others_are_still_served(tmp_path):
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test", actor_timeout_s=3.0)
    doomed = peer("source", "--ports", *map(str, ports), "--actor", "doomed", "--count", "100000")
    survivor = ActorLink("127.0.0.1", *ports, actor_id="survivor")
    try:
        t, _ = serve(learner, 1.0, until=hello_answered(learner, "survivor"))
        survivor.hello("test", timeout_s=5)
        t.join()
        deadline = time.monotonic() + 20
        while "doomed" not in learner.alive_actors and time.monotonic() < deadline:
            learner.poll(10)
        doomed.kill()
        killed_at = time.monotonic()
        received = []
        while "doomed" in learner.alive_actors and time.monotonic() - killed_at < 10:
            survivor.send_steps({}, {"payload": np.array([len(received)], np.int64)})
            survivor.heartbeat()
            received += [a for a, *_ in learner.poll(20) if a == "survivor"]
            survivor.poll()
        noticed_after = time.monotonic() - killed_at
        assert "doomed" not in learner.alive_actors and noticed_after < 3.0 + 0.5, noticed_after
        while len(received) <= 10 and time.monotonic() - killed_at < 10:  # noticed at once (its connection closed)
            survivor.send_steps({}, {"payload": np.array([len(received)], np.int64)})
            survivor.heartbeat()
            received += [a for a, *_ in learner.poll(20) if a == "survivor"]
            survivor.poll()
        assert "survivor" in learner.alive_actors and len(received) > 10
    finally:
        doomed.kill()
        survivor.close(0)
        learner.close()


def test_garbage_nan_oversized_and_unknown_messages_are_dropped_and_counted_and_the_learner_keeps_serving():
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test", max_message_mb=1.0)
    actor = ActorLink("127.0.0.1", *ports, actor_id="actor-0")
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUSH)
    raw.connect(f"tcp://127.0.0.1:{ports[0]}")
    try:
        t, _ = serve(learner, 1.0, until=hello_answered(learner))
        actor.hello("test", timeout_s=5)
        t.join()
        raw.send(b"\x00garbage")
        raw.send_multipart(encode("weights", {"actor": "actor-0"}))  # a kind that has no place on this channel
        raw.send_multipart(encode("steps", {"actor": "actor-0", "session": actor.session, "seq": "x"}))
        raw.send(b"\0" * (2 << 20))  # over max_message_mb=1
        actor.send_steps({}, {"payload": np.array([7], np.int64)})
        received = []
        deadline = time.monotonic() + 5  # two connections: the raw messages may come after the actor's
        while (not received or sum(learner.bad_messages.values()) < 4) and time.monotonic() < deadline:
            received += learner.poll(20)
        assert [a for a, *_ in received] == ["actor-0"] and received[0][1]["payload"].tolist() == [7]
        assert learner.bad_messages["undecodable"] == 1 and learner.bad_messages["oversized"] == 1
        assert learner.bad_messages["invalid"] == 2, "a kind with no place on this channel, a text sequence number"
    finally:
        ctx.destroy(linger=0)
        actor.close(0)
        learner.close()


def test_an_actor_speaking_another_schema_version_is_refused_naming_both_versions():
    import msgpack

    from robo_rl.transport.codec import PROTOCOL_VERSION, decode

    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test")
    ctx = zmq.Context()
    newer = ctx.socket(zmq.DEALER)  # an actor running a newer robo_rl
    newer.setsockopt(zmq.IDENTITY, b"actor-9")
    newer.connect(f"tcp://127.0.0.1:{ports[2]}")
    try:
        with serving(learner):
            header = {"v": PROTOCOL_VERSION + 1, "kind": "hello", "meta": {"config_hash": "test"}, "arrays": []}
            newer.send_multipart([msgpack.packb(header)])
            assert newer.poll(2000)
            kind, meta, _ = decode(newer.recv_multipart())
        assert kind == "refused"
        assert (
            f"schema version {PROTOCOL_VERSION + 1} received, this process speaks {PROTOCOL_VERSION}" in meta["reason"]
        )
        assert learner.bad_messages["undecodable ctrl"] == 1 and "actor-9" not in learner.actors
    finally:
        ctx.destroy(linger=0)
        learner.close()


def test_nan_in_a_step_batch_is_refused_by_the_learner_with_the_field_named(tmp_path):
    from robo_rl.data.schema import check_step_batch, step_fields

    fields = step_fields(3, 2, {})
    batch = {k: np.zeros((2, *shape), dtype) for k, (shape, dtype) in fields.items()}
    batch["action_executed"][1, 0] = np.inf
    with pytest.raises(ValueError, match="'action_executed' contains NaN or inf"):
        check_step_batch(batch, fields)


def test_without_an_authorised_key_a_client_can_neither_send_nor_receive_weights(tmp_path):
    generate_keys(tmp_path / "keys", ["actor-0"])
    generate_keys(tmp_path / "other", ["intruder"])  # a valid keypair the learner never authorised
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test", curve=CurveKeys.load(tmp_path / "keys", "learner"))
    good = ActorLink("127.0.0.1", *ports, "actor-0", curve=CurveKeys.load(tmp_path / "keys", "actor-0"))
    intruder_keys = CurveKeys.load(tmp_path / "other", "intruder")
    intruder_keys.server_public = CurveKeys.load(tmp_path / "keys", "actor-0").server_public  # knows the server key
    intruder = ActorLink("127.0.0.1", *ports, "intruder", curve=intruder_keys)
    plain = ActorLink("127.0.0.1", *ports, "plain")  # no CURVE at all
    try:
        with serving(learner) as received:
            good.hello("test", timeout_s=2)
            unanswered(intruder, plain)
            learner.publish_weights(1, {"w": np.ones(3, np.float32)})
            for client in (intruder, plain):
                client.connected = True  # pretend, to push data anyway
                client.send_steps({}, {"payload": np.array([1], np.int64)})
            good.send_steps({}, {"payload": np.array([2], np.int64)})
            wait_until(lambda: received, 3, "the good actor's steps")
            time.sleep(0.3)  # time for anything of theirs to come too
        assert [a for a, *_ in received] == ["actor-0"]
        assert learner.unannounced == 0 and not learner.bad_messages, "nothing from them even reached the learner"
        assert set(learner.actors) == {"actor-0"}
        assert any(k.startswith("weights") for k, _, _ in good.poll(200))
        for client in (intruder, plain):
            assert not [k for k, _, _ in client.poll(200) if k.startswith("weights")]
    finally:
        for c in (good, intruder, plain):
            c.close(0)
        learner.close()


def unanswered(*clients) -> None:
    """Each client's hello gets no answer within 1 s; side by side, so the waits cost one second, not one each."""

    def hello(client):
        with pytest.raises(TransportError, match="no learner answered"):
            client.hello("test", timeout_s=1)

    with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
        for done in [pool.submit(hello, c) for c in clients]:
            done.result()


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (`hostname -I`), or None."""
    try:
        listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return next(
        (a for a in listed if ipaddress.ip_address(a).version == 4 and not ipaddress.ip_address(a).is_loopback), None
    )


def test_an_actor_with_curve_keys_is_served_by_a_learner_bound_to_a_non_loopback_address(tmp_path):
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address (`hostname -I` lists none) to bind the learner to")
    generate_keys(tmp_path / "keys", ["actor-0"])
    ports = free_ports(3)
    with pytest.raises(TransportError, match=f"refusing to bind {address} without authentication"):
        LearnerLink(address, *ports, config_hash="t")
    learner = LearnerLink(address, *ports, config_hash="t", curve=CurveKeys.load(tmp_path / "keys", "learner"))
    actor = ActorLink(address, *ports, "actor-0", curve=CurveKeys.load(tmp_path / "keys", "actor-0"))
    plain = ActorLink(address, *ports, "plain")  # no CURVE: the off-loopback learner must not hear it
    try:
        with serving(learner) as received:
            actor.hello("t", timeout_s=2)
            unanswered(plain)
            actor.send_steps({}, {"payload": np.array([7], np.int64)})
            learner.publish_weights(1, {"w": np.full(3, 2.0, np.float32)})
            deadline = time.monotonic() + 2.0
            weights = []
            while not weights and time.monotonic() < deadline:
                weights = [(meta, arrays) for kind, meta, arrays in actor.poll(100) if kind == "weights"]
            wait_until(lambda: received, 2, "the steps at the learner")
            time.sleep(0.1)  # a second copy would come right behind it
        assert [(a, arrays["payload"].tolist()) for a, arrays, *_ in received] == [("actor-0", [7])]
        assert weights and weights[0][0]["version"] == 1, "weights over TCP (no shared memory off loopback)"
        np.testing.assert_array_equal(weights[0][1]["w"], np.full(3, 2.0, np.float32))
        assert set(learner.actors) == {"actor-0"} and learner.unannounced == 0
    finally:
        for client in (actor, plain):
            client.close(0)
        learner.close()


def test_a_stalled_learner_never_blocks_the_control_loop_and_the_backlog_is_reported():
    from robo_rl.transport.threaded import ActorTransport

    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="test")
    link = ActorLink("127.0.0.1", *ports, actor_id="actor-0", max_unacked_messages=50)
    transport = ActorTransport(link, lambda policy, arrays: None, spare_policy=object(), max_queued_batches=20)
    try:
        t, _ = serve(learner, 1.0, until=hello_answered(learner))
        transport.start("test", hello_timeout_s=2)
        t.join()  # from here on the learner takes nothing: a stalled learner
        payload = {"image": np.zeros((10, 128, 128, 3), np.uint8)}
        worst = 0.0
        for _ in range(300):
            start = time.perf_counter()
            transport.send({}, payload, env_steps=10)
            worst = max(worst, time.perf_counter() - start)
        time.sleep(0.5)
        assert worst < 0.005, f"send blocked the control loop for {worst * 1e3:.1f} ms"
        assert link.dropped_messages > 0 or transport.dropped_batches > 0, "the bound was not enforced"
        assert len(link.unacked) <= 50 and transport.outbox.qsize() <= 20
        assert transport.in_flight_steps <= (50 + 20) * 10
    finally:
        transport.close("test", linger_s=0)
        learner.close()
