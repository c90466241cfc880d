"""A flow policy with a task embedding (the non-VLA multi-task baseline): from demonstrations where the same state
calls for different actions under different instructions it learns each instruction's action, keeps its task table
in its checkpoint, refuses an instruction it was not trained on, and runs as a DSRL or residual base on observation
rows that carry the instruction."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from policies.bc import load_bc_base
from policies.dsrl import NoisePolicy
from policies.flow import ChunkGenerator, GenerativeBase, GenerativePolicy
from policies.residual import ResidualPolicy
from policies.task_embedding import UnknownInstructionError
from robo_rl.cli import _user_errors
from robo_rl.config import ConfigError
from robo_rl.data.schema import EpisodeRecorder, stack_records, step_fields
from robo_rl.data.tasks import TaskTable, pack_instructions
from robo_rl.envs import make_observation_space
from robo_rl.offline.bc import build_policy, demos_dataset, save_atomic, train_policy
from robo_rl.policy_io import obs_to_torch, stack_obs

PUSH, PULL = "push the lever", "pull the lever"
WANTED = {PUSH: np.array([0.5, -0.5], np.float32), PULL: np.array([-0.5, 0.5], np.float32)}
STATE = np.array([0.2, -0.1], np.float32)  # where both instructions are asked for
SPACE = make_observation_space(2, {})
BC = SimpleNamespace(batch_size=72, lr=5e-3, weight_decay=0.0, epochs=200, patience=200, flow_updates=0)


def demonstrations(episodes: int = 12, steps: int = 6) -> dict:
    """Episodes alternating between the two instructions; states drawn alike for both, each instruction's action
    the same at every state: only the instruction tells them apart."""
    rng, tasks = np.random.default_rng(0), TaskTable()
    recorder, records = EpisodeRecorder(2, tasks=tasks), []
    for e in range(episodes):
        text = (PUSH, PULL)[e % 2]
        states = rng.uniform(-0.5, 0.5, (steps + 1, 2)).astype(np.float32)
        obs = [{"state": s, "images": {}, "instruction": text} for s in states]
        records.append(recorder.reset(obs[0], e))
        for t in range(steps):
            info = {"action_executed": WANTED[text], "action_policy": WANTED[text]}
            records.append(recorder.record_step(obs[t + 1], 0.0, t == steps - 1, False, info))
    return pack_instructions(stack_records(records, step_fields(2, 2, {})), tasks.names)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[ChunkGenerator, str]:
    torch.manual_seed(0)
    data = demos_dataset(demonstrations(), 0.0, 0, "synthetic")
    assert data.instructions == [PUSH, PULL]
    spec = {"kind": "flow", "chunk_size": 2, "steps": 4, "hidden": [64, 64], "task_embedding": 8}
    env = SimpleNamespace(observation_space=SPACE, action_space=SimpleNamespace(shape=(2,)))
    model = build_policy(SimpleNamespace(images=False), env, None, spec, data.instructions)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small MLP: more threads than cores only slow it down
    try:
        train_policy(model, data, BC, 0, "cpu", progress=False)
    finally:
        torch.set_num_threads(threads)
    path = save_atomic(model.checkpoint(execute_steps=2), tmp_path_factory.mktemp("task_flow") / "policy.pt")
    return model, str(path)


def row(instruction: str | None) -> dict:
    obs = {"state": STATE.copy(), "images": {}}
    return obs if instruction is None else {**obs, "instruction": instruction}


def test_the_same_state_gets_each_instructions_own_action(checkpoint):
    model, _ = checkpoint
    base = GenerativeBase(model)
    zero = np.zeros((2, 2), np.float32)
    for text, wanted in WANTED.items():
        chunk = base.predict_chunk(row(text), noise=zero)
        np.testing.assert_allclose(chunk, np.stack([wanted, wanted]), atol=0.25, err_msg=text)
    batch = stack_obs([row(PUSH), row(PULL)])  # one batch, a different instruction per row
    chunks = model.sample(model.features(batch), torch.zeros(2, 2, 2))
    assert float((chunks[0] - chunks[1]).abs().mean()) > 0.7


def test_a_saved_policy_keeps_its_task_table_and_acts_the_same_when_loaded(checkpoint):
    model, path = checkpoint
    payload = torch.load(path, weights_only=True)
    assert payload["config"]["tasks"] == [PUSH, PULL] and payload["config"]["task_embedding"] == 8
    loaded = load_bc_base(path, SPACE, 2)
    z = np.random.default_rng(1).standard_normal((2, 2)).astype(np.float32)
    for text in WANTED:
        assert np.array_equal(
            loaded.predict_chunk(row(text), noise=z), GenerativeBase(model).predict_chunk(row(text), z)
        )
    acting = GenerativePolicy(SPACE, 2, path, "flow", 2, None, 4, [64, 64], 32, 100)
    np.testing.assert_allclose(acting.act(obs_to_torch(row(PULL)), deterministic=True)[0], WANTED[PULL], atol=0.25)
    plain = ChunkGenerator(2, 2, chunk_size=2, steps=4, hidden=[64, 64])  # without one: its config as before
    assert "tasks" not in plain.config and plain.task_embedding is None and plain.feature_dim == 2


def test_an_instruction_it_was_not_trained_on_is_refused_naming_it_and_the_known_ones(checkpoint):
    _, path = checkpoint
    base = load_bc_base(path, SPACE, 2)
    known = r"it knows 2: \['push the lever', 'pull the lever'\]"
    with pytest.raises(UnknownInstructionError, match=r"instruction 'turn the dial' is not one .*" + known) as e:
        base.predict_chunk(row("turn the dial"))
    assert isinstance(e.value, _user_errors())  # robo-rl prints it in one line, as a user error
    with pytest.raises(UnknownInstructionError, match=r"carries no instruction .*\(policy.base.task"):
        base.predict_chunk(row(None))
    with pytest.raises(UnknownInstructionError, match="'turn the dial' is not one"):
        load_bc_base(path, SPACE, 2, task="turn the dial")  # a configured default is checked at load
    with pytest.raises(ConfigError, match="task_embedding=8 learns a vector per instruction"):
        env = SimpleNamespace(observation_space=SPACE, action_space=SimpleNamespace(shape=(2,)))
        build_policy(SimpleNamespace(images=False), env, None, {"kind": "flow", "task_embedding": 8}, [])


def test_it_runs_as_a_dsrl_and_a_residual_base_on_rows_carrying_the_instruction(checkpoint):
    _, path = checkpoint
    torch.manual_seed(0)
    dsrl = NoisePolicy(SPACE, 2, {"kind": "bc", "path": path}, hidden=[32, 32])
    for text in WANTED:
        dsrl.reset()
        action, extras = dsrl.act_with_extras(stack_obs([row(text)]))
        noise = extras["noise"][0].numpy().reshape(dsrl.noise_shape)
        assert np.array_equal(action[0].numpy(), dsrl.base.predict_chunk(row(text), noise=noise)[0])
    # a learner's replay rows name no instruction: the configured task stands for it
    default = NoisePolicy(SPACE, 2, {"kind": "bc", "path": path, "task": PULL}, hidden=[32, 32])
    model, batch = default.base.model, {"state": torch.as_tensor(STATE)[None], "images": {}}
    chunk = model.sample(model.features(batch), torch.zeros(1, 2, 2))[0, 0]
    np.testing.assert_allclose(chunk.numpy(), WANTED[PULL], atol=0.25)
    residual = ResidualPolicy(SPACE, 2, {"kind": "bc", "path": path}, hidden=[32, 32])
    for text in WANTED:
        residual.reset()
        action, extras = residual.act_with_extras(stack_obs([row(text)]), deterministic=True)
        assert np.array_equal(action, extras["base_action"])  # the residual starts at zero: the base acts
        assert float(extras["base_action"][0] @ torch.as_tensor(WANTED[text])) > 0.2  # in the instruction's direction
