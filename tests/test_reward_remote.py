"""A reward model served over ZeroMQ (`robo-rl critic serve`): the same scores as local, timeouts and stale answers,
a critic that is down (the actor's wrapper carries on with its fallback), and requests it must refuse."""

import threading
import time

import numpy as np
import pytest

from robo_rl.rewards.base import RewardModelError, Task
from robo_rl.rewards.remote import CriticServer, RemoteRewardModel
from robo_rl.rewards.wrapper import RewardWrapper
from robo_rl.transport.codec import decode, encode
from robo_rl.transport.link import TransportError, free_ports
from sim.point_reach import PointReachEnv
from tests.test_reward_wrapper import CornerModel


@pytest.fixture
def served():
    servers = []

    def start(model):
        port = free_ports(1)[0]
        server = CriticServer(model, "127.0.0.1", port)
        thread = threading.Thread(target=server.serve, kwargs={"stop_after": 20, "progress": False}, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"tcp://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.stopping.set()
        thread.join(5)
        server.close()


def frames(n=3):
    img = np.zeros((n, 8, 8, 3), np.uint8)
    for i in range(n):
        img[i, i + 2, i + 3] = 255
    return {"top": img}


def test_a_remote_model_scores_as_the_local_one_and_tells_its_cameras(served):
    local = CornerModel()
    remote = RemoteRewardModel(served(local))
    try:
        assert remote.cameras == ("top",) and remote.kind == "remote corner"
        a, b = remote.score(frames(), Task("reach")), local.score(frames(), Task("reach"))
        np.testing.assert_array_equal(a.progress, b.progress)
        np.testing.assert_array_equal(a.success_prob, b.success_prob)
    finally:
        remote.close()


def test_a_slow_answer_times_out_and_its_late_arrival_is_dropped_as_stale(served):
    remote = RemoteRewardModel(served(CornerModel(delay_s=0.3)), timeout_s=0.1, cameras=("top",))
    try:
        with pytest.raises(RewardModelError, match="did not answer within 0.10 s"):
            remote.score(frames(), Task("reach"))
        remote.timeout_s = 2.0
        scores = remote.score(frames(1), Task("reach"))  # its own answer, not the late one for 3 frames
        assert len(scores) == 1 and remote.counts["stale_answers"] >= 1
    finally:
        remote.close()


def test_a_critic_that_is_down_leaves_the_actor_on_its_fallback_without_waiting():
    address = f"tcp://127.0.0.1:{free_ports(1)[0]}"
    with pytest.raises(RewardModelError, match="give reward.cameras"):
        RemoteRewardModel(address, timeout_s=0.05)
    env = RewardWrapper(PointReachEnv(camera=True), address, cameras=["top"], timeout_s=0.05)
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(10):
        _, reward, _, _, info = env.step(np.zeros(2, np.float32))
        assert reward == info["record_extras"]["reward_env"]  # the env's reward while nothing answers
    assert time.perf_counter() - start < 0.4 and env.counts["fallback_steps"] == 10  # waiting: 10 × 50 ms at least
    time.sleep(0.2)
    assert env.counts["score_errors"] >= 1
    env.close()


def test_the_server_refuses_what_it_cannot_score_naming_why():
    server = CriticServer(CornerModel(), "127.0.0.1", free_ports(1)[0])
    try:
        kind, meta, _ = decode(server.handle([b"\xc1 not msgpack"]))
        assert kind == "score_error" and "msgpack" in meta["reason"]
        kind, meta, _ = decode(
            server.handle(encode("score", {"id": 7, "instruction": "reach"}, {"cam/wrist": frames()["top"]}))
        )
        assert kind == "score_error" and meta["id"] == 7 and "missing ['top']" in meta["reason"]
        kind, meta, _ = decode(server.handle(encode("launch", {"id": 8})))
        assert kind == "score_error" and "unknown request" in meta["reason"]
    finally:
        server.close()
    with pytest.raises(TransportError, match="refusing to bind 0.0.0.0 without authentication"):
        CriticServer(CornerModel(), "0.0.0.0", free_ports(1)[0])
