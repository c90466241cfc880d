"""Baseline (c) of `bench/transport.py`: LeRobot 0.6.1's own actor→learner path — its gRPC LearnerService,
chunking, torch.save serialisation and replay buffer, used as its actor and learner use them. Needs grpcio and
protobuf (`lerobot[hilserl]`; dev dependencies here); skipped without them."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import time
import types
from queue import Full

from _transport_baselines import ACTION_DIM, BATCH, CAMERAS, HOST, STATE_DIM, mark_ready, measure_phases


# --- (c) LeRobot: gRPC LearnerService, 2 MB chunks, torch.save of transition lists ---------------
def lerobot_rl_module(name: str):
    """A module of `lerobot.rl`, whose package __init__ imports the `datasets` extra (not installed here):
    if that fails, load the single module under a bare package and a placeholder `lerobot.datasets`."""
    if importlib.util.find_spec("datasets") is not None:  # the whole package imports (slowly: ~9 s here)
        return importlib.import_module(f"lerobot.rl.{name}")
    import lerobot

    if "lerobot.rl" not in sys.modules:
        pkg = types.ModuleType("lerobot.rl")
        pkg.__path__ = [f"{lerobot.__path__[0]}/rl"]
        sys.modules["lerobot.rl"] = pkg
    try:
        importlib.import_module("lerobot.datasets")
    except ImportError:
        sys.modules["lerobot.datasets"] = types.SimpleNamespace(LeRobotDataset=None)  # only used to load datasets
    return importlib.import_module(f"lerobot.rl.{name}")


def lerobot_available() -> str | None:
    """None if LeRobot's transport can run here, else why not."""
    try:
        import grpc  # noqa: F401

        importlib.import_module("lerobot.transport.services_pb2_grpc")
    except Exception as e:  # ImportError, or protobuf's runtime version check
        return f"{type(e).__name__}: {e}"
    return None


class _Sink:
    """Stands in for the learner's transition queue: counts whole messages (the wire figure) and, in the
    end-to-end phase, forwards them to the real torch.multiprocessing queue the learner loop reads."""

    def __init__(self, queue) -> None:
        self.queue, self.forward, self.closed, self.count, self.lock = queue, False, False, 0, threading.Lock()

    def put(self, buf: bytes) -> None:
        with self.lock:
            self.count += 1
        while self.forward and not self.closed:
            try:  # bounded, so a slow learner loop holds back the stream instead of eating RAM
                self.queue.put(buf, timeout=0.1)
                return
            except Full:
                continue

    def take(self) -> int:
        with self.lock:
            n, self.count = self.count, 0
        return n


def lerobot_learner(cfg, stop, ready) -> dict:
    from concurrent.futures import ThreadPoolExecutor
    from queue import Empty

    import grpc
    import torch
    from lerobot.transport import services_pb2_grpc
    from lerobot.transport.utils import MAX_MESSAGE_SIZE, bytes_to_transitions
    from torch.multiprocessing import Queue

    torch.set_num_threads(1)  # as ours runs: on 2 cores, 5 processes' idle intra-op threads would spin
    service_mod, buffer_mod = lerobot_rl_module("learner_service"), lerobot_rl_module("buffer")
    sink = _Sink(Queue(maxsize=4))
    sink.queue.cancel_join_thread()  # exit without flushing what is left in it
    # its LearnerService, with the learner's defaults (threads, push every 4 s); parameters are not streamed here
    service = service_mod.LearnerService(stop, Queue(), 4.0, sink, Queue(), queue_get_timeout=0.1)
    # LeRobot sizes the pool for one actor's three streams; one more worker per extra actor so none waits
    server = grpc.server(
        ThreadPoolExecutor(max_workers=service_mod.MAX_WORKERS + cfg["actors"]),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
        ],
    )
    services_pb2_grpc.add_LearnerServiceServicer_to_server(service, server)
    server.add_insecure_port(f"{HOST}:{cfg['ports'][0]}")
    server.start()
    # online buffer as its learner builds it (optimize_memory=True); identity augmentation skips torch.compile
    replay = buffer_mod.ReplayBuffer(
        cfg["replay_capacity"],
        device="cpu",
        state_keys=None,
        image_augmentation_function=lambda x: x,
        storage_device="cpu",
        optimize_memory=True,
    )

    def has_nan(tr) -> bool:  # what learner.check_nan_in_transition tests
        tensors = [*tr["state"].values(), tr["action"], *tr["next_state"].values()]
        return any(bool(torch.isnan(t).any()) for t in tensors)

    def step(phase, _measuring):
        if phase != "e2e":
            sink.forward = False
            time.sleep(0.02)
            return sink.take() * BATCH
        sink.forward = True
        try:
            buf = sink.queue.get(timeout=0.05)
        except Empty:
            return 0
        n = 0
        for tr in bytes_to_transitions(buf):  # torch.load(weights_only=True), as learner.process_transitions
            if has_nan(tr):
                continue
            fresh = not replay.initialized
            replay.add(**tr)
            if fresh:  # touch the storage now: a long-running learner's buffer is resident
                for t in [*replay.states.values(), replay.actions]:
                    t.zero_()
            n += 1
        return n

    try:
        return measure_phases(step, cfg, ready)
    finally:
        stop.set()  # ends the service's receive loops
        sink.closed = True
        server.stop(0.5)


def lerobot_actor(i, cfg, stop, ready) -> dict:
    from queue import Empty

    import grpc
    import torch
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks, transitions_to_bytes
    from lerobot.utils.transition import Transition, move_transition_to_device
    from torch.multiprocessing import Queue

    torch.set_num_threads(1)  # as ours runs: on 2 cores, 5 processes' idle intra-op threads would spin
    gen = torch.Generator().manual_seed(i)

    def observation():  # what its env processor hands the actor: float32 CHW images in [0, 1], batch dim 1
        obs = {f"observation.images.{c}": torch.rand(1, 3, *hw, generator=gen) for c, hw in CAMERAS.items()}
        return {**obs, "observation.state": torch.randn(1, STATE_DIM, generator=gen)}

    frames = [observation() for _ in range(BATCH + 1)]  # one episode chunk: next_state[t] is state[t+1]
    actions = [torch.rand(1, ACTION_DIM, generator=gen) * 2 - 1 for _ in range(BATCH)]
    channel = grpc.insecure_channel(f"{HOST}:{cfg['ports'][0]}", grpc_channel_options())
    stub = services_pb2_grpc.LearnerServiceStub(channel)
    deadline = time.monotonic() + cfg["startup_s"]
    while True:  # actor.establish_learner_connection: call Ready until the learner answers
        try:
            stub.Ready(services_pb2.Empty())
            break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    queue = Queue()  # the actor's transitions queue (torch.multiprocessing, also in thread mode)
    queue.cancel_join_thread()  # as LeRobot does on shutdown: exit without flushing what is left in it

    def stream():  # actor.transitions_stream
        first = True
        while not stop.is_set():
            try:
                message = queue.get(block=True, timeout=0.1)
            except Empty:
                continue
            yield from send_bytes_in_chunks(message, services_pb2.Transition, log_prefix="[ACTOR] Send transitions")
            if first:  # ready once a whole message has left: torch and gRPC start-up are behind us
                mark_ready(ready)
                first = False

    def send():
        try:
            stub.SendTransitions(stream())
        except grpc.RpcError:
            pass  # the learner stopped first

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sent = 0
    try:
        while not stop.is_set():
            if queue.qsize() >= 2:  # hold back while two messages wait: measures the transport, not RAM
                time.sleep(0.002)
                continue
            batch = []
            for t in range(BATCH):  # actor.push_transitions_to_transport_queue
                info = {"discrete_penalty": torch.tensor([0.0]), "is_intervention": False}
                tr = Transition(
                    state=frames[t],
                    action=actions[t],
                    reward=0.0,
                    next_state=frames[t + 1],
                    done=False,
                    truncated=False,
                    complementary_info=info,
                )
                tr = move_transition_to_device(tr, device="cpu")
                for value in tr["state"].values():
                    torch.isnan(value).any()
                batch.append(tr)
            queue.put(transitions_to_bytes(batch))
            sent += 1
        return {"sent_messages": sent}
    finally:
        sender.join(timeout=3)
        channel.close()
