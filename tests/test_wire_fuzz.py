"""The wire, fuzzed: every channel, both sides. Any message either decodes to a well-formed one or becomes a
counted drop with its reason; no exception from a message reaches the learner's or the actor's loop.

Messages are generated near the valid ones (a real session's actor id, session and token, a real step batch)
with a few fields broken at a time, so the checks deep inside (sequence numbers, tokens, resends, the replay's
field layout, weights that do not fit the policy) are reached, not only the msgpack parser. The fast suite runs
a few hundred examples per property; `-m slow` runs many thousands (ROBO_RL_FUZZ_EXAMPLES overrides both).

Each run draws its examples from a fresh seed, printed in pytest's header ("hypothesis seed: N"); a failing run is
replayed with `ROBO_RL_HYPOTHESIS_SEED=N pytest tests/test_wire_fuzz.py` (tests/conftest.py draws or takes it).
"""

import json
import os

import msgpack
import numpy as np
import pytest
import torch
import zmq
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from robo_rl.data.learner_replay import LearnerReplay
from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
from robo_rl.runs import MetricsWriter
from robo_rl.transport.actor_link import ActorLink
from robo_rl.transport.codec import ALLOWED_DTYPES, PROTOCOL_VERSION
from robo_rl.transport.link import LearnerLink, TransportError, free_ports
from robo_rl.transport.messages import ACTOR_CTRL_KINDS, ACTOR_SUB_KINDS, SCHEMAS
from robo_rl.transport.threaded import ActorTransport
from sim.point_reach import PointReachEnv

FAST = int(os.environ.get("ROBO_RL_FUZZ_EXAMPLES", 250))
LONG = int(os.environ.get("ROBO_RL_FUZZ_EXAMPLES", 10_000))
SEED = int(os.environ["ROBO_RL_HYPOTHESIS_SEED"])  # this run's, set by tests/conftest.py
ACTOR, SESSION, TOKEN, CONFIG_HASH = "actor-0", 4242, "ab" * 16, "fuzz"
IDENT = f"{ACTOR}#{SESSION:x}".encode()
KINDS = sorted(SCHEMAS)

# --- generators ------------------------------------------------------------------------------------
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=12
)
interesting = st.sampled_from(
    [
        0,
        1,
        -1,
        2,
        2**31,
        2**62,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        "",
        ACTOR,
        "x" * 3000,
        SESSION,
        TOKEN,
        [],
        {},
        [1, -2],
        {"a": 1},
        None,
        True,
        1.5,
        float("nan"),
        float("inf"),
        b"\x00\xff",
        "\udcff".encode("utf-8", "surrogatepass"),
    ]
)
hostile_shapes = st.sampled_from(
    [[-1], [-3, 2], [2**32, 2**32, 2**32], [2**63 - 1, 2], [], [0], [1.5], ["3"], [[2]], None, 7, [1] * 20, [2**40 + 1]]
)


def _broken(valid: dict, draw) -> dict:
    """`valid` with 0-3 fields deleted or replaced by strange values (often none), and maybe an extra field."""
    out = dict(valid)
    keys = sorted(valid) or ["x"]
    n = min(len(keys), draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3])))
    for key in draw(st.lists(st.sampled_from(keys), min_size=n, max_size=n, unique=True)):
        if draw(st.booleans()):
            out.pop(key, None)
        else:
            out[key] = draw(interesting | values)
    if draw(st.integers(0, 5)) == 0:
        out[draw(st.text(max_size=6))] = draw(values)
    return out


@st.composite
def arrays_of(draw, valid: dict[str, np.ndarray]):
    """(specs, data frames) near `valid`: a field dropped, retyped, reshaped (0-d, negative, overflowing), its
    bytes cut, or a strange extra array."""
    specs, frames = [], []
    keys = sorted(valid) or ["x"]
    n = min(len(keys), draw(st.sampled_from([0, 0, 0, 1, 1, 2])))
    broken = set(draw(st.lists(st.sampled_from(keys), min_size=n, max_size=n, unique=True)))
    for name, a in valid.items():
        action = draw(st.integers(0, 5)) if name in broken else 6
        if action == 0:
            continue
        dtype, shape, data = a.dtype.str, list(a.shape), a.tobytes()
        if action == 1:
            dtype = draw(st.sampled_from(sorted(ALLOWED_DTYPES)) | st.text(max_size=4) | interesting)
        elif action == 2:
            shape = draw(hostile_shapes)
        elif action == 3:
            data = data[: draw(st.integers(0, len(data)))]
        elif action == 4:  # the same bytes as one scalar of another shape: a 0-d array where a row is expected
            shape, dtype = [], np.dtype(np.uint8).str
            data = data[:1]
        elif action == 5:
            name = draw(interesting | values)
        specs.append([name, dtype, shape])
        frames.append(data)
    if draw(st.integers(0, 6)) == 0:
        specs.append(draw(values))
        frames.append(draw(st.binary(max_size=64)))
    return specs, frames


@st.composite
def messages(draw, valid_meta: dict[str, dict], valid_arrays: dict[str, dict]):
    """Frames of one message: mostly a header near a valid one of a random kind, sometimes garbage."""
    form = draw(st.integers(0, 19))
    if form == 0:
        return [draw(st.binary(max_size=200))]
    if form == 1:
        return [msgpack.packb(draw(values), use_bin_type=True)] + draw(st.lists(st.binary(max_size=16), max_size=3))
    kind = draw(st.sampled_from([*valid_meta] * 4 + KINDS) if form > 2 else interesting | values)
    known = kind if isinstance(kind, str) else ""
    meta = _broken(valid_meta.get(known, {}), draw) if form > 3 else draw(interesting | values)
    specs, frames = draw(arrays_of(valid_arrays.get(known, {})))
    header = (
        _broken({"v": PROTOCOL_VERSION, "kind": kind, "meta": meta, "arrays": specs}, draw)
        if form == 4
        else {"v": PROTOCOL_VERSION, "kind": kind, "meta": meta, "arrays": specs}
    )
    try:
        head = msgpack.packb(header, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):  # a value msgpack itself cannot carry: send garbage instead
        head = draw(st.binary(max_size=50))
    return [head, *frames]


def step_batch(n_records: int = 6) -> dict[str, np.ndarray]:
    env = PointReachEnv(max_episode_steps=20)
    rec = EpisodeRecorder(env.action_space.shape[0])
    obs, _ = env.reset(seed=0)
    records = [rec.reset(obs, 0)]
    for _ in range(n_records - 1):
        obs, r, term, trunc, info = env.step(np.zeros(2, np.float32))
        records.append(rec.record_step(obs, r, term, trunc, info))
    return stack_records(records, fields_for_env(env)), fields_for_env(env)


def strict_json(line: str):
    return json.loads(line, parse_constant=lambda c: pytest.fail(f"metrics line holds {c}"))


# --- the learner's side ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def learner_side(tmp_path_factory):
    batch, fields = step_batch()
    link = LearnerLink("127.0.0.1", *free_ports(3), config_hash=CONFIG_HASH)
    root = tmp_path_factory.mktemp("fuzz_run")
    cfg = OmegaConf.create(
        {
            "storage": "ram",
            "capacity": 10_000,
            "persist": True,
            "flush_every_s": 0.0,
            "segment_max_mb": 1,
            "online_fraction": 0.5,
            "interventions_in_prior": True,
            "verify_on_load": True,
        }
    )
    replay = LearnerReplay(cfg, fields, root, None)
    metrics = MetricsWriter(root / "metrics.jsonl")
    yield link, replay, metrics, batch, root
    replay.close()
    metrics.close()
    link.close()


def _hello(link: LearnerLink) -> None:
    """(Re)open the real actor's session, as its hello would."""
    info = link.actors.get(ACTOR)
    if info is None or info["session"] != SESSION or info["refused"] or info["token"] != TOKEN:
        link.actors.pop(ACTOR, None)
    meta = {"actor": ACTOR, "session": SESSION, "token": TOKEN, "first_unacked": 1, "config_hash": CONFIG_HASH}
    link._handle_ctrl([zmq.Frame(IDENT), *map(zmq.Frame, _encode("hello", meta))])


def _encode(kind: str, meta: dict, arrays: dict | None = None) -> list[bytes]:
    from robo_rl.transport.codec import encode

    return [bytes(f) for f in encode(kind, meta, arrays)]


def learner_property(examples: int):
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,  # a run is its seed: no examples replayed from an earlier run's local store
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @seed(SEED)
    @given(data=st.data())
    def check(learner_side, data):
        link, replay, metrics, batch, _ = learner_side
        _hello(link)
        info = link.actors[ACTOR]
        seq = info["acked"] + data.draw(st.sampled_from([1, 1, 1, 0, 2]))
        steps = {"steps": {"actor": ACTOR, "session": SESSION, "seq": seq, "token": TOKEN, "policy_version": 0}}
        ctrl = {
            "hello": {
                "actor": data.draw(st.sampled_from([ACTOR, "actor-1"])),
                "session": SESSION,
                "token": TOKEN,
                "first_unacked": 1,
                "config_hash": CONFIG_HASH,
            },
            "heartbeat": {"actor": ACTOR, "stats": {"unacked": 1, "jitter_ms_p99": 0.5}},
            "bye": {"actor": ACTOR, "reason": "test"},
        }
        frames = data.draw(messages(steps, {"steps": batch}))
        accepted = link._accept_data([zmq.Frame(f) for f in frames])
        if accepted is not None:
            actor, arrays, session, got_seq, held_hash = accepted
            assert actor == ACTOR and session == SESSION and got_seq == link.actors[ACTOR]["acked"]
            try:  # the learner's ingest: the replay takes it whole or refuses it with the reason
                replay.add(actor, arrays, session, got_seq, held_hash)
            except ValueError:
                pass
        ident = data.draw(st.sampled_from([IDENT, IDENT, b"", b"\xff\xfe", b"other#1"]))
        frames = data.draw(messages(ctrl, {}))
        link._handle_ctrl([zmq.Frame(ident), *map(zmq.Frame, frames)])
        assert link.internal_errors == 0
        metrics.write(
            {
                "kind": "learner",
                "actor_stats": {a: i["stats"] for a, i in link.actors.items()},
                "bad_messages": dict(link.bad_messages),
            }
        )

    return check


test_any_message_to_the_learner_is_a_counted_drop_or_well_formed = learner_property(FAST)
test_any_message_to_the_learner_long = pytest.mark.slow(learner_property(LONG))


def test_after_the_fuzz_the_learner_still_serves_a_real_actor_and_its_files_hold(learner_side):
    """Run after the properties above (same module fixture): the replay's segments load back, the metrics
    are strict JSON, and a real actor process's data still goes through the same link."""
    link, replay, metrics, batch, root = learner_side
    replay.flush()
    metrics.file.flush()
    for line in (root / "metrics.jsonl").read_text().splitlines():
        strict_json(line)
    assert sum(link.bad_messages.values()) > 0 and link.internal_errors == 0
    actor = ActorLink("127.0.0.1", *link_ports(link), actor_id="actor-9")
    try:
        import threading
        import time

        got = []
        done = threading.Event()

        def serve():
            while not done.is_set():
                got.extend(link.poll(10))

        t = threading.Thread(target=serve)
        t.start()
        actor.hello(CONFIG_HASH, timeout_s=5)
        actor.send_steps({}, batch, env_steps=5)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            actor.poll(10)
        done.set()
        t.join()
        assert [a for a, *_ in got] == ["actor-9"]
    finally:
        actor.close(0)


def link_ports(link: LearnerLink) -> list[int]:
    return [int(s.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]) for s in (link.pull, link.pub, link.router)]


# --- the actor's side -----------------------------------------------------------------------------
class TinyPolicy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 2)


@pytest.fixture(scope="module")
def actor_side():
    link = ActorLink("127.0.0.1", *free_ports(3), actor_id=ACTOR)
    link.connected, link.incarnation, link.config_hash = True, 77, CONFIG_HASH
    transport = ActorTransport(
        link,
        lambda p, arrays: p.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}),
        TinyPolicy(),
    )
    yield link, transport
    link.close(0)


def actor_property(examples: int):
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,  # a run is its seed: no examples replayed from an earlier run's local store
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @seed(SEED)
    @given(data=st.data())
    def check(actor_side, data):
        link, transport = actor_side
        link.connected, link.incarnation = True, 77
        if len(link.unacked) < 3:
            for _ in range(3):
                link.send_steps({}, {"x": np.zeros(2, np.float32)}, env_steps=1)
        weights = {k: v.detach().numpy() for k, v in TinyPolicy().state_dict().items()}
        ack = {"incarnation": 77, "session": link.session, "acked": link.seq - 1, "received": link.seq}
        valid_meta = {
            "welcome": ack,
            "ack": ack,
            "refused": {"reason": "no"},
            "rejected": {"session": link.session, "seq": 1, "reason": "bad"},
            "weights": {"version": data.draw(st.integers(0, 5)), "incarnation": 77},
            "weights_shm": {
                "version": 3,
                "incarnation": 77,
                "path": "/dev/shm/robo_rl_x_1.weights",
                "nbytes": 128,
                "layout": [["net.weight", "<f4", [2, 3], 64]],
            },
            "status": {"incarnation": 77, "env_steps": 5, "updates": 3, "allowed_env_steps": 9.5},
            "stop": {"reason": "done", "hold": True},
        }
        frames = data.draw(messages(valid_meta, {"weights": weights}))
        for accepted in (ACTOR_CTRL_KINDS, ACTOR_SUB_KINDS):
            try:
                message = link.receive(frames, accepted)
            except TransportError as e:  # a refusal (or another schema): the actor stops with this line
                assert "refused" in str(e) or "schema" in str(e)
                continue
            if message is not None:
                transport._handle([message])
                transport._load_pending()  # weights that do not fit are counted and ignored
        assert 0 <= link.unreceived_steps <= link.unacked_steps and link.received <= link.seq
        transport.stop_reason = transport.hold_reason = None

    return check


test_any_message_to_the_actor_is_a_counted_drop_or_well_formed = actor_property(FAST)
test_any_message_to_the_actor_long = pytest.mark.slow(actor_property(LONG))
