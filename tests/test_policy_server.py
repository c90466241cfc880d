"""A base policy served over ZeroMQ (`robo-rl policy serve`, robo_rl/serving/) and its client as a base
(`policy.base.kind=remote`, policies/remote.py): the same chunks as the local base for the same observation and
noise, a guide honoured, malformed requests answered with the reason while the server serves on, a late answer that
times out and is never used, a killed server named and a restarted one served again, CURVE, and a residual policy
acting on it through async chunking."""

from __future__ import annotations

import contextlib
import io
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
import zmq

from policies.base import action_range, state_statistics
from policies.bc import load_bc_base
from policies.chunking import Guide
from policies.dsrl import NoisePolicy
from policies.flow import ChunkGenerator
from policies.remote import RemoteBase, RemotePolicyError
from policies.remote_protocol import decode, encode
from policies.residual import ResidualPolicy
from robo_rl.cli import main
from robo_rl.envs import make_observation_space
from robo_rl.offline.bc import save_atomic
from robo_rl.serving.served import ServedPolicy
from robo_rl.serving.server import PolicyServer
from robo_rl.transport.errors import TransportError
from robo_rl.transport.ports import free_ports
from robo_rl.transport.security import CurveKeys, generate_keys
from tests.test_lerobot_base import ACTION_DIM as LEROBOT_ACTION_DIM
from tests.test_lerobot_base import STATE_DIM as LEROBOT_STATE_DIM
from tests.test_lerobot_base import tiny_act  # noqa: F401 (a fixture)

STATE_DIM, ACTION_DIM, CHUNK = 4, 2, 8
SPACE = make_observation_space(STATE_DIM, {})
START_TIMEOUT_S = 60.0  # a server process imports torch and loads its checkpoint: seconds on a busy 2-core machine


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small untrained flow policy with its training action range, as `robo-rl bc policy=flow` writes it."""
    torch.manual_seed(0)
    model = ChunkGenerator(STATE_DIM, ACTION_DIM, chunk_size=CHUNK, steps=4, hidden=[32, 32])
    model.set_normalisation(np.random.default_rng(0).normal(np.linspace(-1, 1, STATE_DIM), 0.5, (100, STATE_DIM)))
    payload = model.checkpoint(execute_steps=4, action_range={"low": [-0.5, -0.8], "high": [0.7, 0.9]})
    return save_atomic(payload, tmp_path_factory.mktemp("flow") / "bc" / "policy.pt")


def local(checkpoint: Path):
    return load_bc_base(checkpoint, SPACE, ACTION_DIM)


def start_server(checkpoint: Path, port: int, *extra: str) -> subprocess.Popen:
    """`robo-rl policy serve` in its own process, returned once it says it listens."""
    argv = [sys.executable, "-m", "robo_rl.cli", "policy", "serve", str(checkpoint), f"port={port}", *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, seen = time.monotonic() + START_TIMEOUT_S, []
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.1)[0]:
            line = proc.stdout.readline()
            seen.append(line)
            if line.startswith("policy server:"):  # its log goes on being read: a full pipe would stall it
                threading.Thread(target=proc.stdout.read, daemon=True).start()
                return proc
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the policy server did not start:\n" + "".join(seen))


class Served:
    """`robo-rl policy serve` in a process of its own on one port, for the module's tests; one test kills it and
    starts it again (the later tests are served by the new process)."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint, self.port = checkpoint, free_ports(1)[0]
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.proc = start_server(checkpoint, self.port)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def restart(self) -> None:
        self.proc = start_server(self.checkpoint, self.port)


@pytest.fixture(scope="module")
def served(checkpoint):
    server = Served(checkpoint)
    yield server
    server.kill()


@pytest.fixture
def address(served) -> str:
    return served.address


def observation(i: int) -> dict:
    return {"state": np.linspace(-1, 1, STATE_DIM).astype(np.float32) * (i + 1) / 3, "images": {}}


def noise(i: int) -> np.ndarray:
    return np.random.default_rng(i).standard_normal((CHUNK, ACTION_DIM)).astype(np.float32)


def test_a_served_policy_describes_itself_and_its_chunks_equal_the_local_bases(checkpoint, address):
    base, remote = local(checkpoint), RemoteBase(address, SPACE, ACTION_DIM)
    try:
        assert (remote.chunk_size, remote.action_dim, remote.noise_shape, remote.guided) == (
            CHUNK,
            ACTION_DIM,
            (8, 2),
            True,
        )
        assert (
            remote.execute_steps == 4 and remote.name == f"flow:{checkpoint}" and remote.version.startswith("sha256:")
        )
        np.testing.assert_array_equal(np.stack(remote.action_range), np.stack(action_range(base)))
        np.testing.assert_array_equal(np.stack(remote.state_stats), np.stack(state_statistics(base)))
        for i in range(3):
            chunk = remote.predict_chunk(observation(i), noise=noise(i))
            assert chunk.shape == (CHUNK, ACTION_DIM) and chunk.dtype == np.float32
            np.testing.assert_allclose(chunk, base.predict_chunk(observation(i), noise=noise(i)), atol=1e-6)
        assert not np.allclose(remote.predict_chunk(observation(0), noise(0)), remote.predict_chunk(observation(0)))
        assert remote.server_ms and remote.round_trip_ms[-1] >= remote.server_ms[-1]
    finally:
        remote.close()


def test_a_guide_steers_the_served_flow_onto_the_committed_actions(checkpoint, address):
    # the server's first guided sample builds its backward pass (about 100 chunks' time): past the default 2 s on a
    # loaded 2-core machine, and this test is about the steering, not the time
    base, remote = local(checkpoint), RemoteBase(address, SPACE, ACTION_DIM, timeout_s=20.0)
    guide = Guide(np.full((5, ACTION_DIM), 0.6, np.float32), np.array([1, 1, 1, 0.5, 0.2], np.float32), 3)
    try:
        guided = remote.predict_chunk(observation(1), noise(1), guide=guide)
        free = remote.predict_chunk(observation(1), noise(1))
    finally:
        remote.close()
    np.testing.assert_allclose(guided, base.predict_chunk(observation(1), noise(1), guide=guide), atol=1e-5)
    err_guided, err_free = np.abs(guided[:3] - 0.6).mean(), np.abs(free[:3] - 0.6).mean()
    assert err_guided < 0.25 * err_free, (err_guided, err_free)


def raw_request(sock, frames) -> tuple:
    sock.send_multipart(frames)
    assert sock.poll(10_000), "no answer"
    reply = decode(sock.recv_multipart(), "reply")
    return reply.kind, reply.id, reply.meta.get("reason", "")


def test_malformed_requests_get_an_error_naming_the_problem_and_the_server_serves_on(address):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    state, z = observation(0)["state"], noise(0)
    header = {"schema": 99, "kind": "chunk", "id": 7, "meta": {}, "arrays": []}
    bad_bytes = encode("request", "chunk", 9, {}, {"state": state})
    bad_bytes[1] = bad_bytes[1][:-4]  # a float short
    cases = [
        ([b"\xc1garbage"], -1, "not valid msgpack"),
        ([msgpack.packb(header)], 7, "schema version 99 received, this side speaks 1"),
        (encode("request", "chunk", 8, {}, {"state": state[:3]}), 8, "the state has 3 entries, the policy reads 4"),
        (bad_bytes, 9, "array 'state' declares [4] float32 but carries 12 bytes"),
        (encode("request", "chunk", 10, {}, {"state": state, "noise": z[:4]}), 10, "the noise is [4, 2]"),
        (encode("request", "chunk", 11, {}, {"state": state, "image/top": np.zeros((4, 4, 3))}), 11, "camera 'top'"),
        (
            encode("request", "chunk", 12, {"guide_delay": 1}, {"state": state, "guide/actions": z[:2]}),
            12,
            "a guide needs",
        ),
        (
            encode("request", "chunk", 13, {"instruction": 5}, {"state": state}),
            13,
            "field 'instruction' must be a string",
        ),
        (encode("request", "info", 14)[:1] + [b"x"], 14, "do not match the message's 1 data frames"),
    ]
    try:
        for frames, request_id, expected in cases:
            kind, answered_id, reason = raw_request(sock, frames)
            assert (kind, answered_id) == ("error", request_id) and expected in reason, (expected, reason)
        kind, request_id, _ = raw_request(sock, encode("request", "chunk", 15, {}, {"state": state, "noise": z}))
        assert (kind, request_id) == ("chunk", 15)  # still serving
    finally:
        sock.close(0)
        ctx.term()
    remote = RemoteBase(address)
    with pytest.raises(RemotePolicyError, match=f"{address} refused the request: the state has 5 entries"):
        remote.predict_chunk({"state": np.zeros(5, np.float32), "images": {}})
    remote.close()


class SlowBase:
    """A base that answers `delay_s` late: a server on a busy GPU, or behind a slow link."""

    def __init__(self, base, delay_s: float) -> None:
        self.base, self.delay_s = base, delay_s
        self.action_dim, self.chunk_size, self.noise_shape = base.action_dim, base.chunk_size, base.noise_shape

    def predict_chunk(self, obs, noise=None):
        time.sleep(self.delay_s)
        return self.base.predict_chunk(obs, noise)


@contextlib.contextmanager
def in_thread(served: ServedPolicy, curve=None):
    """A PolicyServer on loopback served from a thread of this process; its address."""
    port = free_ports(1)[0]
    server = PolicyServer(served, "127.0.0.1", port, curve)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server.address
    finally:
        server.stopping.set()
        thread.join(5)
        server.close()


def test_a_late_answer_times_out_naming_the_wait_and_is_never_used(checkpoint):
    base = local(checkpoint)
    with in_thread(ServedPolicy(SlowBase(base, 0.4), "slow", "v1", STATE_DIM)) as address:
        remote = RemoteBase(address, SPACE, ACTION_DIM, timeout_s=0.15, hello_timeout_s=5)
        try:
            with pytest.raises(RemotePolicyError, match=f"policy server at {address} did not answer within 0.15 s"):
                remote.predict_chunk(observation(0), noise(0))
            time.sleep(0.4)  # the late answer to the first request has been sent by now
            remote.timeout_s = 3.0
            chunk = remote.predict_chunk(observation(1), noise(1))
        finally:
            remote.close()
    np.testing.assert_allclose(chunk, base.predict_chunk(observation(1), noise(1)), atol=1e-6)  # its own answer
    assert not np.allclose(chunk, base.predict_chunk(observation(0), noise(0)))
    assert remote.counts["timeouts"] == 1


def test_an_answer_carrying_another_requests_id_is_dropped(checkpoint):
    """A server that sends, before each chunk, an answer to an earlier request (what a late answer on a reused
    connection would be): the client drops it, counted, and returns its own request's chunk."""
    base = local(checkpoint)
    server = PolicyServer(ServedPolicy(base, "flow", "v1", STATE_DIM), "127.0.0.1", free_ports(1)[0])

    def serve_with_a_stale_answer_first():
        while not server.stopping.is_set():
            if server.sock.poll(50):
                ident, *frames = server.sock.recv_multipart()
                request = decode(frames, "request")
                if request.kind == "chunk":
                    stale = {"inference_ms": 1.0, "policy": "flow", "version": "v1"}
                    chunk = np.full((CHUNK, ACTION_DIM), 0.9, np.float32)
                    server.sock.send_multipart(
                        [ident, *encode("reply", "chunk", request.id - 1, stale, {"chunk": chunk})]
                    )
                server.sock.send_multipart([ident, *server.handle(frames)])

    thread = threading.Thread(target=serve_with_a_stale_answer_first, daemon=True)
    thread.start()
    remote = RemoteBase(server.address, SPACE, ACTION_DIM, hello_timeout_s=5)
    try:
        chunk = remote.predict_chunk(observation(3), noise(3))
    finally:
        remote.close()
        server.stopping.set()
        thread.join(5)
        server.close()
    np.testing.assert_allclose(chunk, base.predict_chunk(observation(3), noise(3)), atol=1e-6)
    assert remote.counts["stale"] == 1


def test_a_killed_server_is_named_in_the_error_and_a_restarted_one_serves_again(checkpoint, served):
    base, remote = local(checkpoint), RemoteBase(served.address, SPACE, ACTION_DIM, timeout_s=0.5)
    try:
        remote.predict_chunk(observation(0), noise(0))
        served.kill()
        with pytest.raises(RemotePolicyError, match=f"{served.address} within 0.50 s"):
            remote.predict_chunk(observation(0), noise(0))
        served.restart()
        remote.timeout_s = 5.0  # the new process's first answer includes its connection
        chunk = remote.predict_chunk(observation(2), noise(2))
        np.testing.assert_allclose(chunk, base.predict_chunk(observation(2), noise(2)), atol=1e-6)
    finally:
        remote.close()


def test_off_loopback_is_refused_at_start_without_curve_keys_and_served_with_them(checkpoint, tmp_path):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["policy", "serve", str(checkpoint), "host=0.0.0.0"]) == 2
        assert main(["policy", "serve", str(checkpoint), "port=99999"]) == 2
        assert main(["policy", "serve"]) == 2
    lines = err.getvalue().splitlines()
    assert (
        "refusing to serve on 0.0.0.0 without authentication" in lines[0]
        and "keys_dir=<dir>" in lines[0]
        and "port=99999 is not a port" in lines[1]
    )
    assert "needs one checkpoint" in lines[2]
    served = ServedPolicy(local(checkpoint), "flow", "v1", STATE_DIM)
    with pytest.raises(TransportError, match="refusing to bind 10.1.2.3"):
        PolicyServer(served, "10.1.2.3", free_ports(1)[0])
    generate_keys(tmp_path / "keys", ["arm"])
    generate_keys(tmp_path / "strangers", ["arm"])
    with in_thread(served, CurveKeys.load(tmp_path / "keys", "learner")) as address:
        remote = RemoteBase(address, timeout_s=2, curve_key=str(tmp_path / "keys" / "arm.key_secret"))
        assert remote.predict_chunk(observation(0)).shape == (CHUNK, ACTION_DIM)
        remote.close()
        for key in (None, str(tmp_path / "strangers" / "arm.key_secret")):  # no keys; keys it does not know
            with pytest.raises(RemotePolicyError, match=f"no connection to the policy server at {address}"):
                RemoteBase(address, curve_key=key, timeout_s=0.3, hello_timeout_s=0.3)


def test_a_residual_policy_acts_on_a_remote_base_async_with_the_delay_compensated(checkpoint, address):
    """The same steps through ChunkedBase's async executor (delay 2) on the remote base and on the local one: the
    same base actions (the client draws each chunk's noise as the local base does), chunks taking over two steps
    after their observation with their first two actions skipped."""
    base_spec = {"kind": "remote", "path": address, "timeout_s": 5.0}
    runs = {}
    for name, spec in (("remote", base_spec), ("local", local(checkpoint))):
        torch.manual_seed(0)
        policy = ResidualPolicy(SPACE, ACTION_DIM, spec, hidden=[16])
        policy.use_chunking("async", delay_steps=2)
        policy.reset()
        base_actions, actions = [], []
        for t in range(30):
            obs = {"state": torch.as_tensor(observation(t % 7)["state"])[None], "images": {}}
            action, extras = policy.act_with_extras(obs)
            actions.append(action[0].numpy())
            base_actions.append(extras["base_action"][0].numpy())
        runs[name] = (np.stack(base_actions), np.stack(actions), policy.chunk_stats())
        policy.base.executor.close()
    remote_base, remote_actions, stats = runs["remote"]
    np.testing.assert_allclose(remote_base, runs["local"][0], atol=1e-6)
    assert np.all(np.isfinite(remote_actions)) and np.all(np.abs(remote_actions) <= 1)
    assert stats["chunk_switches"] >= 3 and stats["chunk_skipped"] == 2 * stats["chunk_switches"], stats
    assert runs["local"][2]["chunk_switches"] == stats["chunk_switches"]
    assert stats["remote_round_trip_ms_p50"] > 0 and stats["remote_timeouts"] == 0  # the heartbeat shows the server


def test_dsrl_steers_a_remote_flow_through_its_noise_as_a_local_one(checkpoint, address):
    """DSRL's noise actor on the remote base: the same noises (the same seed) give the same actions as on the local
    base, so the server is steered through the noise it is sent."""
    runs = []
    for spec in ({"kind": "remote", "path": address}, local(checkpoint)):
        torch.manual_seed(0)
        policy = NoisePolicy(SPACE, ACTION_DIM, spec, hidden=[16])
        assert policy.noise_shape == (CHUNK, ACTION_DIM) and policy.execute_steps == 4
        torch.manual_seed(1)
        obs = [{"state": torch.as_tensor(observation(t)["state"])[None], "images": {}} for t in range(10)]
        runs.append(np.concatenate([policy.act(o).numpy() for o in obs]))
    np.testing.assert_allclose(runs[0], runs[1], atol=1e-6)
    assert np.abs(np.diff(runs[0], axis=0)).max() > 0.01  # not one action repeated


def test_a_remote_base_for_another_task_or_a_bad_address_is_refused_in_one_line(address):
    with pytest.raises(
        RemotePolicyError, match="does not fit this task: it reads a state of 4 dimensions, the task's has 5"
    ):
        RemoteBase(address, make_observation_space(5, {}), ACTION_DIM)
    with pytest.raises(RemotePolicyError, match="it acts in 2 dimensions, the task in 3"):
        RemoteBase(address, SPACE, 3)
    with pytest.raises(RemotePolicyError, match="tcp://<host>:<port>, got '127.0.0.1:5610'"):
        ResidualPolicy(SPACE, ACTION_DIM, {"kind": "remote", "path": "127.0.0.1:5610"})


@pytest.mark.slow
def test_a_served_lerobot_policy_answers_as_the_local_one_and_its_chunks_are_blended_with_a_guide(tiny_act):  # noqa: F811 (the fixture imported above)
    """A LeRobot pretrained_model folder (lerobot's ACT, tiny) served by path: its features give the observation it
    reads, its chunks equal the local base's, and a guide (ACT cannot be steered while it samples) is blended in."""
    from policies.chunking import blend
    from policies.lerobot_base import LeRobotBase

    port = free_ports(1)[0]
    proc = start_server(tiny_act, port)
    space = make_observation_space(LEROBOT_STATE_DIM, {})
    try:
        remote = RemoteBase(f"tcp://127.0.0.1:{port}", space, LEROBOT_ACTION_DIM)
        base = LeRobotBase.load(tiny_act, space, LEROBOT_ACTION_DIM)
        assert remote.name.startswith("act:") and remote.noise_shape is None and not remote.guided
        np.testing.assert_allclose(np.stack(remote.state_stats), np.stack(base.state_stats), atol=1e-6)
        obs = {"state": np.array([0.1, -0.2, 0.3, 0.05], np.float32), "images": {}}
        expected = base.predict_chunk(obs)
        np.testing.assert_allclose(remote.predict_chunk(obs), expected, atol=1e-5)
        guide = Guide(np.zeros((3, LEROBOT_ACTION_DIM), np.float32), np.array([1, 1, 0.5], np.float32), 2)
        np.testing.assert_allclose(remote.predict_chunk(obs, guide=guide), blend(expected, guide), atol=1e-5)
        with pytest.raises(RemotePolicyError, match="takes no initial noise"):
            remote.predict_chunk(obs, noise=np.zeros((5, 2), np.float32))
        remote.close()
    finally:
        proc.kill()
        proc.wait(10)


class PixelBase:
    """A base whose chunk is made of its camera's pixels: what arrives over the wire is what it reads."""

    action_dim, chunk_size = 2, 3

    def predict_chunk(self, obs):
        top = obs["images"]["top"]
        return np.tile([top.mean() / 255.0, top[0, 0, 1] / 255.0], (3, 1)).astype(np.float32)


def test_camera_frames_travel_as_uint8_and_cameras_that_do_not_fit_are_refused():
    served = ServedPolicy(PixelBase(), "pixels", "v1", STATE_DIM, {"top": (6, 5)})
    task = make_observation_space(STATE_DIM, {"top": (6, 5), "wrist": (3, 4)})
    top = np.random.default_rng(0).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    obs = {"state": np.zeros(STATE_DIM, np.float32), "images": {"top": top, "wrist": np.zeros((3, 4, 3), np.uint8)}}
    with in_thread(served) as address:
        remote = RemoteBase(address, task, 2, hello_timeout_s=5)
        try:
            assert remote.cameras == {"top": (6, 5)}  # the wrist camera is not sent: the policy does not read it
            np.testing.assert_allclose(
                remote.predict_chunk(obs)[0], [top.mean() / 255.0, top[0, 0, 1] / 255.0], rtol=1e-6
            )
            small = {**obs, "images": {"top": top[:5]}}
            with pytest.raises(RemotePolicyError, match=r"camera 'top' is \[5, 5, 3\], the policy reads \[6, 5, 3\]"):
                remote.predict_chunk(small)
        finally:
            remote.close()
        for cameras, problem in (
            ({"wrist": (3, 4)}, "it reads camera 'top', the task has"),
            ({"top": (5, 6)}, "at 6x5, the task's is 5x6"),
        ):
            with pytest.raises(RemotePolicyError, match=problem):
                RemoteBase(address, make_observation_space(STATE_DIM, cameras), 2)


@pytest.mark.slow
def test_an_actor_and_a_learner_run_residual_rl_on_a_served_base(tmp_path, address):
    """The whole loop with `policy.base.kind=remote`: the actor acts on the served base and the learner, which builds
    the same base (it relabels the demonstrations with it), is served too."""
    from tests.test_residual import run_residual_pair

    _, _, base = run_residual_pair(tmp_path, "policy.base.kind=remote", f"policy.base.path={address}")
    assert np.all(np.isfinite(base)) and np.abs(base).sum() > 0
