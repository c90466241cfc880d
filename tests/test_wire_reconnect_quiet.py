"""An actor's normal reconnect to a restarted learner is not foreign traffic: its heartbeats before its hello and the
data it had queued before it are counted, not warned about; a heartbeat for it from another connection still is."""

import logging
import time

import numpy as np
import zmq

from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import encode
from robo_rl.transport.link import LearnerLink, free_ports, token_hash
from tests.test_transport import serve


def test_the_expected_actors_heartbeats_before_its_hello_are_counted_quietly_and_a_strangers_are_warned(caplog):
    ports = free_ports(3)
    actor = ActorLink("127.0.0.1", *ports, "actor-0")
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    learner.expect("actor-0", actor.session, 0, token_hash(actor.token))  # as a resumed learner reads its run folder
    ctx = zmq.Context()
    stranger = ctx.socket(zmq.DEALER)
    stranger.setsockopt(zmq.IDENTITY, b"actor-0#1")  # the actor's id, another session's connection
    stranger.connect(f"tcp://127.0.0.1:{ports[2]}")
    try:
        with caplog.at_level(logging.WARNING, logger="robo_rl.transport.link"):
            for _ in range(10):
                actor.heartbeat()  # still connected to the learner that died, as far as the actor knows
                learner.poll(30)
            assert "dropped a message" not in caplog.text and not learner.bad_messages
            assert learner.early_heartbeats >= 5  # they arrived, and were counted
            deadline = time.monotonic() + 5
            stranger.send_multipart(encode("heartbeat", {"actor": "actor-0", "stats": {}}))
            while not learner.bad_messages and time.monotonic() < deadline:
                learner.poll(20)
        assert learner.bad_messages["wrong connection"] == 1
        assert "wrong connection: heartbeat for actor actor-0" in caplog.text
        t, _ = serve(learner, 1.0)
        actor.hello("h", timeout_s=5)  # its hello then opens the stored session as before
        t.join()
        assert learner.actors["actor-0"]["alive"] and learner.actors["actor-0"]["ident"] is not None
    finally:
        ctx.destroy(linger=0)
        actor.close(0)
        learner.close()


def test_a_message_queued_before_the_hello_that_arrives_after_the_welcome_waits_for_the_resend_quietly(caplog):
    """The actor's data socket delivers what it queued for the learner that died (seq 3) right after the restarted
    learner's welcome, ahead of the resend from seq 2: not a gap to warn about; the resend brings 2 and 3 in order."""
    ports = free_ports(3)
    actor = ActorLink("127.0.0.1", *ports, "actor-0")
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    ctx = zmq.Context()
    queued = ctx.socket(zmq.PUSH)  # stands for the actor's socket's queue towards the dead learner
    queued.connect(f"tcp://127.0.0.1:{ports[0]}")
    try:
        for i in range(3):
            actor.send_steps({}, {"x": np.full(1, float(i))})  # not connected: kept for resend
        learner.expect("actor-0", actor.session, 1, token_hash(actor.token))  # message 1 was stored before the crash
        actor.config_hash = "h"
        actor._send_hello()
        queued.send_multipart(actor.unacked[3][0])
        time.sleep(0.3)  # both reach the learner's sockets, which read the hello first
        with caplog.at_level(logging.WARNING, logger="robo_rl.transport.link"):
            got = learner.poll(100)
            deadline = time.monotonic() + 5
            while len(got) < 2 and time.monotonic() < deadline:
                actor.poll(10)
                got += learner.poll(10)
        assert "dropped a message" not in caplog.text and not learner.bad_messages
        assert [(seq, arrays["x"].tolist()) for _, arrays, _, seq, _ in got] == [(2, [1.0]), (3, [2.0])]
        assert learner.unannounced == 1  # the early copy, counted
    finally:
        ctx.destroy(linger=0)
        actor.close(0)
        learner.close()
