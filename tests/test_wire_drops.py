"""The wire's last holes: a hostile env spec in a hello is a counted, named drop (never an internal error); the run's
spaces come only from a welcomed actor; held copies of messages the replay rejects are let go, and all are bounded;
drops at an attacker's rate leave a few log lines per reason, each drop still counted."""

import json
import logging
import threading
import time

import numpy as np
import pytest
import zmq

from robo_rl.config import config_hash
from robo_rl.envs.spec import spec_of
from robo_rl.learner import Learner
from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import decode, encode
from robo_rl.transport.link import LearnerLink, TransportError, free_ports
from robo_rl.transport.log_gate import LogGate
from robo_rl.transport.security import CurveKeys, generate_keys
from sim.point_reach import PointReachEnv
from tests.test_pipeline import toy_config
from tests.test_resume import messages
from tests.test_transport import hello_answered, serve, serving

SPEC = spec_of(PointReachEnv()).to_json()
HOSTILE_SPECS = {
    "nested 9,999 lists deep": "[" * 9999 + "]" * 9999,
    "state_dim Infinity": json.dumps({**SPEC, "state_dim": 1}).replace('"state_dim": 1', '"state_dim": Infinity'),
    "state_dim 1e400": json.dumps({**SPEC, "state_dim": 1}).replace('"state_dim": 1', '"state_dim": 1e400'),
    "cameras a text": json.dumps({**SPEC, "cameras": "front"}),
    "an extra of object dtype": json.dumps({**SPEC, "extras": {"x": [[1], "object"]}}),
    "state_dim 2**40": json.dumps({**SPEC, "state_dim": 2**40}),
}


def hello(actor: str, spec: str | None, config: str = "h", session: int = 7) -> list:
    meta = {"actor": actor, "session": session, "token": "t" * 32, "first_unacked": 1, "config_hash": config}
    return encode("hello", meta if spec is None else {**meta, "env_spec": spec})


def answer(learner: LearnerLink, sock: zmq.Socket, seconds: float = 3.0):
    """Serve `learner` until `sock` has a reply (its kind and meta), or None when none comes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        learner.poll(10)
        if sock.poll(0):
            kind, meta, _ = decode(sock.recv_multipart())
            return kind, meta
    return None


@pytest.mark.parametrize("spec_known", [False, True], ids=["waiting-for-a-spec", "spec-known"])
def test_a_hostile_env_spec_in_a_hello_is_a_counted_named_drop(spec_known, caplog):
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    if spec_known:
        learner.spec_check = lambda text: None
    ctx = zmq.Context()
    stranger = ctx.socket(zmq.DEALER)
    stranger.connect(f"tcp://127.0.0.1:{ports[2]}")
    try:
        with caplog.at_level(logging.WARNING, logger="robo_rl.transport.link"):
            for spec in HOSTILE_SPECS.values():
                stranger.send_multipart(hello("arm", spec))
            deadline = time.monotonic() + 5
            while learner.bad_messages["invalid ctrl"] < len(HOSTILE_SPECS) and time.monotonic() < deadline:
                learner.poll(10)
        assert learner.bad_messages["invalid ctrl"] == len(HOSTILE_SPECS) and learner.internal_errors == 0
        assert learner.first_spec is None and not learner.actors and not stranger.poll(100)
        text = caplog.text
        assert "'env_spec' must be an env spec nested at most 4 levels deep" in text
        assert "Infinity is not a finite number" in text and "1e400 is not a finite number" in text
        assert "Traceback" not in text
        stranger.send_multipart(hello("arm", json.dumps(SPEC)))  # the same spec, well formed: welcomed
        assert answer(learner, stranger)[0] == "welcome"
    finally:
        ctx.destroy(linger=0)
        learner.close()


def test_the_runs_spec_comes_only_from_a_welcomed_actor(tmp_path):
    """A hello refused for its key is not the run's spec: before, any hello that passed the config hash set it."""
    generate_keys(tmp_path / "keys", ["arm1", "arm2"])
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h", curve=CurveKeys.load(tmp_path / "keys", "learner"))
    arm1 = CurveKeys.load(tmp_path / "keys", "arm1")
    impostor = ActorLink("127.0.0.1", *ports, "arm2", curve=arm1)  # arm1's key speaking for arm2
    impostor.env_spec = json.dumps({**SPEC, "action_dim": 7})
    own = ActorLink("127.0.0.1", *ports, "arm1", curve=arm1)
    own.env_spec = json.dumps(SPEC)
    try:
        with serving(learner), pytest.raises(TransportError, match="may not speak for actor id 'arm2'"):
            impostor.hello("h", timeout_s=3)
        assert learner.first_spec is None
        with serving(learner):
            own.hello("h", timeout_s=3)
        assert json.loads(learner.first_spec)["action_dim"] == SPEC["action_dim"]
    finally:
        impostor.close(0)
        own.close(0)
        learner.close()


def test_a_learner_waiting_for_its_spaces_refuses_a_stranger_whose_spec_cannot_be_read_and_waits_on(tmp_path):
    """Before: the unreadable spec of the first hello became the run's, and the learner stopped on it."""
    cfg = toy_config(tmp_path, "env._target_=tests.test_human.UnknownRobot", "demos.num_episodes=0")
    t = cfg.transport
    replies: list = []

    def strangers_then_the_actor():
        ctx = zmq.Context()
        stranger = ctx.socket(zmq.DEALER)
        stranger.connect(f"tcp://127.0.0.1:{t.ctrl_port}")
        try:
            for spec in ({**SPEC, "version": 9}, {k: v for k, v in SPEC.items() if k != "action_dim"}):
                stranger.send_multipart(hello("stranger", json.dumps(spec), config_hash(cfg)))
                if stranger.poll(20_000):
                    replies.append(decode(stranger.recv_multipart())[:2])
            stranger.send_multipart(hello("stranger", HOSTILE_SPECS["nested 9,999 lists deep"], config_hash(cfg)))
            actor = ActorLink("127.0.0.1", t.data_port, t.weights_port, t.ctrl_port, "arm-0")
            actor.env_spec = json.dumps(SPEC)
            try:
                actor.hello(config_hash(cfg), 20)
                replies.append(("welcome", {}))
            finally:
                actor.close(0)
        finally:
            ctx.destroy(linger=0)

    thread = threading.Thread(target=strangers_then_the_actor)
    thread.start()
    learner = Learner(cfg, tmp_path, progress=False)  # waits for a spec
    thread.join(30)
    try:
        kinds = [kind for kind, _ in replies]
        assert kinds == ["refused", "refused", "welcome"], replies
        assert "not an env spec of version 1" in replies[0][1]["reason"] and "action_dim" in replies[1][1]["reason"]
        assert learner.fields["action_executed"][0] == (SPEC["action_dim"],) and learner.link.internal_errors == 0
    finally:
        learner.close()


def test_held_copies_of_messages_the_replay_rejects_are_let_go(tmp_path):
    cfg = toy_config(tmp_path, "replay.persist=true")
    learner = Learner(cfg, tmp_path, progress=False)
    t = cfg.transport
    actor = ActorLink("127.0.0.1", t.data_port, t.weights_port, t.ctrl_port, "actor-0")
    try:
        assert not learner.link.auto_ack  # durable acks: what is received is held until on disk
        th, _ = serve(learner.link, 5.0, until=hello_answered(learner.link))
        actor.hello(config_hash(cfg), timeout_s=5)
        th.join()
        for batch in messages(3)[:4]:
            batch["state"][0, 0] = np.nan
            actor.send_steps({}, batch)
        deadline = time.monotonic() + 10
        while actor.rejected_messages < 4 and time.monotonic() < deadline:
            actor.poll(5)
            for message in learner.link.poll(5):
                learner.ingest(*message)
        info = learner.link.actors["actor-0"]
        assert actor.rejected_messages == 4 and learner.link.bad_messages["invalid step batch"] == 4
        assert info["held"] == {} and info["held_bytes"] == 0, "a rejected message is never stored: nothing to hold"
    finally:
        actor.close(0)
        learner.close()


def test_held_copies_are_bounded_per_actor():
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h", max_held_mb=0.05)  # 52 kB: six 8 kB messages
    learner.auto_ack = False  # acknowledged only when stored, and nothing is stored here
    actor = ActorLink("127.0.0.1", *ports, "actor-0")
    try:
        t, _ = serve(learner, 5.0, until=hello_answered(learner))
        actor.hello("h", timeout_s=5)
        t.join()
        for i in range(20):
            actor.send_steps({}, {"x": np.full(1000, i, np.float64)})
        got: list = []
        deadline = time.monotonic() + 10
        while len(got) < 20 and time.monotonic() < deadline:
            actor.poll(5)
            got += learner.poll(5)
        info = learner.actors["actor-0"]
        assert len(got) == 20 and 0 < info["held_bytes"] <= learner.max_held_bytes
        assert list(info["held"]) == list(range(21 - len(info["held"]), 21)), "the newest copies are the ones kept"
        assert info["held_bytes"] == sum(b.nbytes for frames in info["held"].values() for b in frames)
    finally:
        actor.close(0)
        learner.close()


def test_drops_at_an_attackers_rate_log_a_few_lines_per_reason_and_count_every_one(caplog, monkeypatch):
    ports = free_ports(3)
    learner = LearnerLink("127.0.0.1", *ports, config_hash="h")
    ctx = zmq.Context()
    push, dealer = ctx.socket(zmq.PUSH), ctx.socket(zmq.DEALER)
    push.connect(f"tcp://127.0.0.1:{ports[0]}")
    dealer.connect(f"tcp://127.0.0.1:{ports[2]}")

    def broken(frames):
        raise RuntimeError("a handler bug a message can reach")

    try:
        with caplog.at_level(logging.WARNING, logger="robo_rl.transport.link"):
            for _ in range(300):
                push.send(b"\x00garbage")
            deadline = time.monotonic() + 10
            while learner.bad_messages["undecodable"] < 300 and time.monotonic() < deadline:
                learner.poll(10)
            monkeypatch.setattr(learner, "_handle_ctrl", broken)
            for _ in range(100):
                dealer.send_multipart(hello("arm", None))
            while learner.internal_errors < 100 and time.monotonic() < deadline:
                learner.poll(10)
        assert learner.bad_messages["undecodable"] == 300 and learner.internal_errors == 100
        drops = [r for r in caplog.records if "dropped a message" in r.getMessage()]
        errors = [r for r in caplog.records if r.exc_info and "handler bug" in str(r.exc_info[1])]
        assert 1 <= len(drops) <= 5 and 1 <= len(errors) <= 5, (len(drops), len(errors))
    finally:
        ctx.destroy(linger=0)
        learner.close()


def test_the_log_gate_lets_a_burst_through_then_one_line_per_interval_naming_what_it_held_back():
    now = [0.0]
    gate = LogGate(burst=3, period_s=30.0, clock=lambda: now[0])  # a line per 10 s after the burst
    assert [gate.admit("gap") for _ in range(5)] == [0, 0, 0, None, None]
    assert gate.admit("forged") == 0, "each reason has its own allowance"
    now[0] += 9.0
    assert gate.admit("gap") is None
    now[0] += 1.5
    assert gate.admit("gap") == 3, "the next line says three were held back"
    assert gate.admit("gap") is None
