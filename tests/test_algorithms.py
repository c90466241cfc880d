"""The learner hosts any algorithm by `_target_`: the loop asks only for the interface (batch needs, update,
trainable weights, state); frozen backbones never travel to actors; the device setting is honoured or refused."""

import numpy as np
import pytest
import torch

from policies.resnet import ResNet10, save_resnet10
from robo_rl.algos.base import Algorithm, BatchSpec, load_trainable_state, resolve_device, trainable_state
from robo_rl.config import ConfigError, load_config, make_policy
from robo_rl.learner import Learner
from robo_rl.runs import load_checkpoint
from tests.test_pipeline import toy_config


class RecordingAlgorithm(Algorithm):
    """An algorithm the learner has never heard of: it records what it was given."""

    def __init__(self, policy, spec: BatchSpec) -> None:
        self.policy, self.batch_spec, self.seen, self.steps = policy, spec, [], 0

    def update(self, batches: list[dict]) -> dict:
        self.seen.append(batches)
        self.steps += 1
        return {"recorded_batches": float(len(batches))}

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.steps = state["steps"]


def build_recording(policy, observation_space, action_dim, state_names=(), *, batch_size, n_step=1, **_keys):
    return RecordingAlgorithm(policy, BatchSpec(batch_size=batch_size, batches=3, n_step=n_step, gamma=0.5))


def test_an_algorithm_named_by_target_plugs_into_the_learner_loop_unchanged(tmp_path):
    cfg = toy_config(
        tmp_path,
        "algo._target_=tests.test_algorithms.build_recording",
        "algo.batch_size=8",
        "algo.n_step=2",
        "train.learning_starts=10",
    )
    run = tmp_path / "run"
    run.mkdir()
    learner = Learner(cfg, run, progress=False)
    try:
        assert isinstance(learner.algo, RecordingAlgorithm)
        demos = learner.replay.demos.data
        learner.ingest("actor-0", {k: v[:30].copy() for k, v in demos.items()}, 1, 1)
        metrics = learner.update()
        # the learner's guards add theirs, its schedule the prior rows per batch (the demos' half of 8)
        own = {k: v for k, v in metrics.items() if not k.startswith("guard_") and k != "batch_prior_rows"}
        assert own == {"recorded_batches": 3.0} and learner.updates == 3, "batches per round come from its spec"
        assert metrics["batch_prior_rows"] == 4.0
        assert all(v == 0.0 for k, v in metrics.items() if k.startswith("guard_")), metrics
        (batches,) = learner.algo.seen
        assert len(batches) == 3 and all(b["reward"].shape == (8,) for b in batches)
        assert all(torch.all(b["discount"] <= 0.5**1 + 1e-6) for b in batches), "its γ and n-step reach the replay"
        learner.checkpoint()
    finally:
        learner.close()
    assert load_checkpoint(run)["algo"]["steps"] == 1, "its own state is what the checkpoint holds"


def test_frozen_backbones_never_travel_and_the_actor_builds_them_from_its_config(tmp_path):
    save_resnet10(ResNet10(), tmp_path / "w")
    overrides = [
        "env=point_reach",
        "experiment=rlpd",
        "env.camera=true",
        "policy=resnet10",
        f"policy.encoder.pretrained={tmp_path / 'w'}",
        "policy.encoder.resize=[32,32]",
    ]
    from sim.point_reach import PointReachEnv

    env = PointReachEnv(camera=True)
    learner_policy = make_policy(load_config(overrides), env)
    actor_policy = make_policy(load_config(overrides), env)
    sent = trainable_state(learner_policy)
    full = learner_policy.state_dict()
    assert len(sent) < len(full) and not any("backbone" in k for k in sent), "the frozen ResNet stays home"
    sent_bytes = sum(v.numel() * v.element_size() for v in sent.values())
    assert sent_bytes < 0.5 * sum(v.numel() * v.element_size() for v in full.values())
    with torch.no_grad():
        for v in sent.values():
            v.add_(0.25) if v.is_floating_point() else None
    load_trainable_state(actor_policy, sent)
    for k, v in actor_policy.state_dict().items():
        assert torch.equal(v, (sent if k in sent else full)[k]), k
    with pytest.raises(RuntimeError, match="missing"):
        load_trainable_state(actor_policy, {k: v for k, v in list(sent.items())[1:]})


def test_the_device_setting_is_honoured_or_refused_in_one_line():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device=cuda but torch sees no CUDA device"):
            resolve_device("cuda")


def test_sac_with_the_hybrid_policy_is_refused_by_name(tmp_path):
    cfg = toy_config(tmp_path, "env=pick_cube", "env.gripper=discrete", "policy=hybrid_gripper")
    with pytest.raises(ConfigError, match="policy=hybrid_gripper .* use algo=sac_gripper"):
        Learner(cfg, tmp_path, progress=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_learner_updates_on_a_gpu(tmp_path):
    cfg = toy_config(tmp_path, "device=cuda", "train.learning_starts=10", "algo.batch_size=32")
    run = tmp_path / "run"
    run.mkdir()
    learner = Learner(cfg, run, progress=False)
    try:
        demos = learner.replay.demos.data
        learner.ingest("actor-0", {k: v[:30].copy() for k, v in demos.items()}, 1, 1)
        assert np.isfinite(learner.update()["critic_loss"])
        assert next(learner.policy.parameters()).is_cuda
    finally:
        learner.close()
