"""The wire: codec round trips, refusal of bad messages, and the actor/learner link on loopback."""

import contextlib
import threading
import time

import msgpack
import numpy as np
import pytest

from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import PROTOCOL_VERSION, MessageError, decode, encode
from robo_rl.transport.link import LearnerLink, TransportError, free_ports, token_hash
from tests.waiting import wait_until


def test_round_trip_keeps_dtypes_shapes_and_values():
    arrays = {
        "image/front": np.random.default_rng(0).integers(0, 255, (3, 16, 16, 3), dtype=np.uint8),
        "state": np.arange(12, dtype=np.float32).reshape(3, 4),
        "done": np.array([True, False, True]),
    }
    kind, meta, out = decode([bytes(f) for f in encode("steps", {"actor": "a"}, arrays)])
    assert kind == "steps" and meta == {"actor": "a"}
    for k, v in arrays.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape
        np.testing.assert_array_equal(out[k], v)


def test_garbage_truncated_and_mismatched_messages_are_refused_with_the_reason():
    good = [bytes(f) for f in encode("steps", {}, {"x": np.zeros(4, np.float32)})]
    with pytest.raises(MessageError, match="msgpack"):
        decode([b"\xc1garbage"])
    with pytest.raises(MessageError, match="carries 8 bytes"):
        decode([good[0], good[1][:8]])
    with pytest.raises(MessageError, match="data frames"):
        decode(good[:1])
    header = msgpack.unpackb(good[0])
    header["v"] = PROTOCOL_VERSION + 1
    with pytest.raises(MessageError, match=f"schema version {PROTOCOL_VERSION + 1}.*speaks {PROTOCOL_VERSION}"):
        decode([msgpack.packb(header), good[1]])
    header["v"], header["arrays"] = PROTOCOL_VERSION, [["x", "|O", [1]]]
    with pytest.raises(MessageError, match="disallowed dtype"):
        decode([msgpack.packb(header), b"\0" * 8])


def serve(learner, seconds=1.0, until=None):
    """Poll the learner in a thread, as its main loop would, for `seconds` or until `until()` holds (a test that needs
    only a hello answered need not wait out the seconds); returns the thread and what it received."""
    received = []

    def loop():
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until is not None and until()):
            received.extend(learner.poll(10))

    t = threading.Thread(target=loop)
    t.start()
    return t, received


@contextlib.contextmanager
def serving(learner, seconds=30.0):
    """Poll the learner in a thread while the block runs (at most `seconds`): a test waits on its own condition
    instead of a fixed serving time; yields what the learner received."""
    done = threading.Event()
    t, received = serve(learner, seconds, until=done.is_set)
    try:
        yield received
    finally:
        done.set()
        t.join()


def hello_answered(learner, actor="actor-0"):
    """A condition for `serve`: the learner has answered this actor's hello."""
    return lambda: actor in learner.actors


def test_actor_and_learner_exchange_hello_steps_weights_and_stop():
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="abc")
    learner.publish_weights(1, {"w": np.ones(3, np.float32)})
    actor = ActorLink("127.0.0.1", *ports, actor_id="actor-0")
    try:
        with serving(learner) as received:
            got = actor.hello("abc", timeout_s=2)
            assert [k for k, _, _ in got] == ["weights"], "a joining actor gets the current weights at once"
            actor.send_steps({}, {"step": np.arange(3, dtype=np.int32)})
            wait_until(lambda: received, 2, "the steps at the learner")
            time.sleep(0.1)  # a duplicate would come right behind it
        assert len(received) == 1
        assert received[0][0] == "actor-0" and received[0][1]["step"].tolist() == [0, 1, 2]
        learner.stop_actors("done")
        deadline = time.monotonic() + 2
        kinds = []
        while "stop" not in kinds and time.monotonic() < deadline:
            kinds += [k for k, _, _ in actor.poll(20)]
        assert "stop" in kinds
    finally:
        actor.close(0)
        learner.close()


def test_an_actor_told_the_run_is_over_closes_at_once_and_says_its_last_steps_were_not_stored(caplog):
    """After the learner's `stop` nothing more can be stored, so closing does not wait out its linger for acks."""
    from robo_rl.transport.threaded import ActorTransport

    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="abc")
    transport = ActorTransport(ActorLink("127.0.0.1", *ports, actor_id="actor-0"), lambda p, arrays: None, None)
    try:
        t, _ = serve(learner, 5.0, until=hello_answered(learner))
        transport.start("abc", hello_timeout_s=2)
        t.join()  # from here on the learner takes nothing: what the actor sends next stays unacknowledged
        transport.send({}, {"step": np.arange(4, dtype=np.int32)}, env_steps=4)
        # sent before the stop (else the I/O thread may see the stop first and never send it: nothing to report)
        assert wait_until(lambda: transport.link.unacked_steps == 4, 5.0, "four unacknowledged steps")
        learner.stop_actors("done")
        deadline = time.monotonic() + 2
        while transport.stop_reason is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert transport.stop_reason == "done"
        start = time.monotonic()
        with caplog.at_level("INFO", logger="robo_rl.transport.actor_link"):
            transport.close("done", linger_s=5.0)
        assert time.monotonic() - start < 1.0
        assert any(
            "(4 env steps) sent after the learner finished were not stored" in r.getMessage() for r in caplog.records
        )
    finally:
        learner.close()


@pytest.mark.parametrize("learner_goes_away", [False, True], ids=["slow learner", "learner says it stops"])
def test_a_stopping_actor_waits_for_a_slow_learner_to_confirm_what_it_sent(caplog, learner_goes_away):
    """A learner behind busy actors can take seconds to store a message (5 of 16,035 records went unconfirmed in a
    40-minute run at load 10 with a 2 s wait): a stopping actor waits up to actor.drain_s while the learner is there,
    and loses nothing. A learner that says it stops confirms nothing more: the wait ends at once."""
    from robo_rl.transport.threaded import ActorTransport

    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="abc")
    link = ActorLink("127.0.0.1", *ports, actor_id="actor-0", learner_timeout_s=30.0)
    transport = ActorTransport(link, lambda p, arrays: None, None)
    try:
        t, _ = serve(learner, 5.0, until=hello_answered(learner))
        transport.start("abc", hello_timeout_s=2)
        t.join()  # the learner is busy elsewhere: what the actor sends now waits, unacknowledged
        transport.send({}, {"step": np.arange(4, dtype=np.int32)}, env_steps=4)
        assert wait_until(lambda: link.unacked_steps == 4, 5.0, "four unacknowledged steps")
        received = []

        def busy_then_back():
            time.sleep(3.0)
            if learner_goes_away:
                learner.stop_actors("interrupted (Ctrl-C)", hold=True)
                return
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and not received:
                received.extend(learner.poll(10))

        later = threading.Thread(target=busy_then_back)
        later.start()
        start = time.monotonic()
        with caplog.at_level("INFO", logger="robo_rl.transport.actor_link"):
            transport.close("interrupted (Ctrl-C)", linger_s=30.0)
        took = time.monotonic() - start
        later.join()
        lost = [r for r in caplog.records if "never confirmed stored by the learner" in r.getMessage()]
        assert any("waiting up to 30 s (actor.drain_s)" in r.getMessage() for r in caplog.records)
        if learner_goes_away:
            assert 2.5 < took < 5.0, f"closed after {took:.1f} s: the learner's stop should end the wait"
            assert len(lost) == 1 and "(4 env steps)" in lost[0].getMessage()
        else:
            assert 2.5 < took < 8.0, f"closed after {took:.1f} s"
            assert [len(arrays["step"]) for _, arrays, *_ in received] == [4]
            assert not link.unacked and not lost, "the actor gave up on messages the learner then stored"
    finally:
        learner.close()


def test_an_actor_with_no_learner_gets_a_one_line_error():
    actor = ActorLink("127.0.0.1", *free_ports(3), actor_id="actor-0")
    try:
        with pytest.raises(TransportError, match="no learner answered .* start `robo-rl learner` first"):
            actor.hello("abc", timeout_s=0.3)
    finally:
        actor.close(0)


def test_port_in_use_and_non_loopback_binds_are_refused():
    ports = free_ports(3)
    first = LearnerLink("127.0.0.1", *ports, config_hash="x")
    try:
        with pytest.raises(TransportError, match=f"port {ports[0]} .* already in use"):
            LearnerLink("127.0.0.1", *ports, config_hash="x")
    finally:
        first.close()
    with pytest.raises(TransportError, match="refusing to bind 0.0.0.0 without authentication"):
        LearnerLink("0.0.0.0", *ports, config_hash="x")


def test_a_mismatched_config_is_refused_by_name():
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="aaa")
    actor = ActorLink("127.0.0.1", *ports, actor_id="actor-0")
    try:
        with serving(learner), pytest.raises(TransportError, match="config hash bbb differs from the learner's aaa"):
            actor.hello("bbb", timeout_s=2)
    finally:
        actor.close(0)
        learner.close()


def test_a_local_actor_loads_weights_from_shared_memory_and_never_a_torn_copy():
    import torch

    from robo_rl.transport.shm_weights import SharedWeightsReader, SharedWeightsWriter, shm_available
    from robo_rl.transport.threaded import ActorTransport

    if not shm_available():
        pytest.skip("no /dev/shm on this machine")
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="abc")
    link = ActorLink("127.0.0.1", *ports, actor_id="actor-0")
    assert link.shm_weights
    policy, spare = torch.nn.Linear(64, 32), torch.nn.Linear(64, 32)
    transport = ActorTransport(
        link,
        lambda p, arrays: p.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}),
        spare_policy=spare,
    )
    try:
        t, _ = serve(learner, 1.0, until=hello_answered(learner))
        transport.start("abc", hello_timeout_s=2)
        t.join()
        target = {"weight": np.full((32, 64), 3.0, np.float32), "bias": np.arange(32, dtype=np.float32)}
        learner.publish_weights(5, target)
        newer = None
        deadline = time.monotonic() + 5
        while newer is None and time.monotonic() < deadline:
            newer = transport.take_policy(policy)
            time.sleep(0.01)
        assert newer is not None and newer[0] == 5
        np.testing.assert_array_equal(newer[1].bias.detach().numpy(), target["bias"])
        assert (newer[1].weight == 3.0).all()
    finally:
        transport.close("test", linger_s=0)
        learner.close()

    writer, reader = SharedWeightsWriter("test_torn"), SharedWeightsReader()
    try:
        notice = writer.write(1, {"x": np.ones(10, np.float32)})
        assert reader.arrays(notice)["x"].sum() == 10
        writer.write(3, {"x": np.zeros(10, np.float32)})  # the same slot (3 % 2 == 1 % 2) is rewritten
        assert not reader.still_valid(notice) and reader.arrays(notice) is None
    finally:
        writer.close()


@pytest.mark.parametrize("stored_as", [int, np.int64, str], ids=["int", "numpy", "text"])
def test_a_restarted_learner_drops_the_resend_of_what_it_stored_before_its_ack_went_out(stored_as):
    """The window a kill -9 can hit: messages stored durably, their ack never sent. The restarted learner is told
    what it holds (`expect`, the session as read back from its store) and must take only what comes after."""
    ports = free_ports(3)
    first = LearnerLink("127.0.0.1", *ports, config_hash="abc")
    first.auto_ack = False  # acks only once stored; this one dies before it acks anything
    actor = ActorLink("127.0.0.1", *ports, actor_id="actor-0", learner_timeout_s=0.5)
    second = None
    try:
        t, _ = serve(first, 1.0, until=hello_answered(first))
        actor.hello("abc", timeout_s=5)
        t.join()
        for i in range(5):
            actor.send_steps({}, {"i": np.array([i])})
        stored = []
        deadline = time.monotonic() + 5
        while len(stored) < 5 and time.monotonic() < deadline:
            stored += first.poll(20)
        assert [int(a["i"][0]) for _, a, *_ in stored] == [0, 1, 2, 3, 4]
        session, last_seq = stored[-1][2], stored[-1][3]
        held = token_hash(first.actors["actor-0"]["token"])
        first.close()  # gone without an ack: the actor still holds all five
        assert len(actor.unacked) == 5
        second = LearnerLink("127.0.0.1", *ports, config_hash="abc")
        second.auto_ack = False
        second.expect("actor-0", stored_as(session), last_seq, held)
        actor.send_steps({}, {"i": np.array([5])})
        taken = []
        deadline = time.monotonic() + 10
        while (actor.unacked or not taken) and time.monotonic() < deadline:
            actor.poll(10)
            actor.heartbeat()
            for who, arrays, _, seq, _ in second.poll(10):
                taken.append(int(arrays["i"][0]))
                second.ack(who, seq)
        assert taken == [5], f"the restarted learner took {taken}: stored messages came in twice"
        assert not actor.unacked, "the actor still waits for acks"
    finally:
        actor.close(0)
        first.close()
        if second is not None:
            second.close()


def test_free_ports_come_from_below_the_ephemeral_range_where_no_outgoing_connection_takes_them(monkeypatch, tmp_path):
    """A port the kernel hands out (bind to 0) can be taken by any process's outgoing connection before the learner
    binds it (a launch under load failed so); free ports are drawn from below the ephemeral range instead, distinct
    and bindable, and the kernel's own choice is the fallback where the range cannot be read."""
    import socket

    from robo_rl.transport import ports as link  # where free_ports reads the kernel's range

    fake = tmp_path / "range"
    fake.write_text("40000\t60999\n")
    monkeypatch.setattr(link, "EPHEMERAL_RANGE_FILE", str(fake))
    ports = free_ports(6)
    assert len(set(ports)) == 6 and all(40000 - link.FREE_PORT_SPAN <= p < 40000 for p in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    monkeypatch.setattr(link, "EPHEMERAL_RANGE_FILE", str(tmp_path / "missing"))
    assert len(set(free_ports(3))) == 3


def test_free_ports_never_hand_out_a_port_twice_in_one_process():
    """Two calls before either caller binds (the GUI test took its page's port, then its learner's) once drew the same
    port and the learner's bind failed: within a process no port is handed out twice (1,200 ports drawn at random
    from 10,000 would repeat one almost surely otherwise)."""
    drawn = [p for _ in range(400) for p in free_ports(3)]
    assert len(drawn) == len(set(drawn)) == 1200


def test_steps_the_data_socket_would_not_take_at_a_welcome_go_with_the_next_heartbeat():
    """After a learner restart the welcome can come before the data socket has reconnected: the resend then stops at
    zmq.Again. Nothing else may push it (an actor throttled on those very steps sends no new ones), so the heartbeat
    does; before, a fresh-clone run of the learner-crash test waited on 19 such messages until it timed out."""
    import zmq

    class NotYet:  # the data socket, refusing its first send as a socket with no peer yet does (NOBLOCK)
        def __init__(self, sock):
            self.sock, self.refused = sock, 0

        def send_multipart(self, *args, **kwargs):
            if not self.refused:
                self.refused += 1
                raise zmq.Again()
            return self.sock.send_multipart(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.sock, name)

    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="abc")
    actor = ActorLink("127.0.0.1", *ports, actor_id="actor-0")
    try:
        t, _ = serve(learner, 1.0, until=hello_answered(learner))
        actor.hello("abc", timeout_s=5)
        t.join()
        actor.push = NotYet(actor.push)
        actor.send_steps({}, {"i": np.array([7])})
        assert actor.push.refused == 1 and actor.next_to_send == actor.seq  # not sent, still next
        got = []
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            actor.heartbeat()
            got += learner.poll(20)
        assert [int(arrays["i"][0]) for _, arrays, *_ in got] == [7]
    finally:
        actor.close(0)
        learner.close()


def test_free_ports_drawn_in_two_processes_at_once_never_coincide(monkeypatch):
    """Two test workers each drew a port free at that moment, and the second's learner found it bound by the first's:
    a port one process drew is reserved from the others' draws. Both processes here draw from the same seeded
    permutation, so without the reservation they would get the same ports."""
    import ast
    import subprocess
    import sys

    from robo_rl.transport import ports

    seeded = "lambda *a: np.random.Generator(np.random.PCG64(7))"
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import numpy as np; from robo_rl.transport import ports as p; "
            f"np.random.default_rng = {seeded}; print(p.free_ports(5))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = set(ast.literal_eval(child.stdout))
    monkeypatch.setattr(ports.np.random, "default_rng", lambda *a: np.random.Generator(np.random.PCG64(7)))
    monkeypatch.setattr(ports, "_HANDED_OUT", set())
    ours = set(free_ports(5))
    assert len(theirs) == len(ours) == 5 and not theirs & ours, (theirs, ours)
    assert all((ports.reservation_folder() / str(p)).exists() for p in ours | theirs)
