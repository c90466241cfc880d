"""π0 and π0.5 as DSRL bases through our own loader (`policies/lerobot_base.py`), and a LeRobot ACT base named by path
in the config of an actor+learner run. The VLAs are tiny, built offline (tests/vla_tiny.py: lerobot's PI0Policy and
PI05Policy at toy PaliGemma/Gemma sizes, a tokenizer trained here), saved as `pretrained_model` folders and loaded by
path as any other; nothing is downloaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.lerobot_base import LeRobotBase
from robo_rl.config import ConfigError, make_algorithm, make_env, make_policy
from robo_rl.envs import make_observation_space
from tests.test_lerobot_base import tiny_act  # noqa: F401 (a fixture)
from tests.test_pipeline import run_pair, toy_config
from tests.vla_tiny import PI_TOKENIZER, lerobot_chunk, tiny_pi_sizes, write_tiny_pi

# point_reach with its camera: a state of 4, one 8x8 camera "top", actions of 2
STATE_DIM, ACTION_DIM, CHUNK, MAX_ACTION_DIM, CAMERA, IMAGE_HW, TASK = 4, 2, 4, 8, "top", (8, 8), "pick the cube"
SPACE = make_observation_space(STATE_DIM, {CAMERA: IMAGE_HW})
KINDS = ("pi0", "pi05")


@pytest.fixture(scope="module", params=KINDS)
def tiny_pi(request, tmp_path_factory):
    """(kind, folder) of a tiny π0 or π0.5; lerobot builds it at its tiny sizes while the tests of that kind run."""
    kind = request.param
    folder = write_tiny_pi(
        tmp_path_factory.mktemp(kind) / "pretrained_model",
        kind,
        STATE_DIM,
        ACTION_DIM,
        CAMERA,
        IMAGE_HW,
        chunk_size=CHUNK,
        max_action_dim=MAX_ACTION_DIM,
    )
    with tiny_pi_sizes(kind):
        yield kind, folder


def observation(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "state": rng.uniform(-1, 1, STATE_DIM).astype(np.float32),
        "images": {CAMERA: rng.integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)},
    }


def noise(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((CHUNK, MAX_ACTION_DIM)).astype(np.float32)


def test_tiny_pi_is_built_offline_and_loads_by_path_with_its_own_weights(tiny_pi):
    kind, folder = tiny_pi
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < 4e6, f"the tiny {kind} takes {size / 1e6:.1f} MB"
    assert json.loads((folder / "config.json").read_text())["type"] == kind
    steps = json.loads((folder / "policy_preprocessor.json").read_text())["steps"]
    tokenizer = next(s["config"]["tokenizer_name"] for s in steps if s["registry_name"] == "tokenizer_processor")
    assert tokenizer == str(folder / PI_TOKENIZER), "its tokenizer is the local one, named by path: no hub id"

    base = LeRobotBase.load(str(folder), SPACE, ACTION_DIM, task=TASK)
    assert base.name == f"{kind}:{folder}"
    assert base.inputs == {"observation.state": "state", f"observation.images.{CAMERA}": f"images/{CAMERA}"}
    assert (base.chunk_size, base.closed_loop, base.noise_shape) == (CHUNK, False, (CHUNK, MAX_ACTION_DIM))
    np.testing.assert_allclose(np.stack(base.action_range), [[-1.0] * ACTION_DIM, [1.0] * ACTION_DIM])
    # lerobot's π from_pretrained falls back to random weights on a failed load, printing a warning: these are the saved
    from safetensors.torch import load_file

    saved = load_file(folder / "model.safetensors")
    loaded = base.policy.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in saved.items()), "the weights loaded are the ones saved"
    with pytest.raises(ValueError, match="needs a task description: pass task="):
        LeRobotBase.load(folder, SPACE, ACTION_DIM)


def test_the_initial_noise_steers_the_pi_chunk_as_lerobot_runs_it(tiny_pi):
    kind, folder = tiny_pi
    base = LeRobotBase.load(folder, SPACE, ACTION_DIM, task=TASK)
    obs, z = observation(), noise()
    chunk = base.predict_chunk(obs, noise=z)
    assert chunk.shape == (CHUNK, ACTION_DIM) and chunk.dtype == np.float32 and np.all(np.abs(chunk) <= 1.0)
    np.testing.assert_array_equal(base.predict_chunk(obs, noise=z.copy()), chunk)  # same z: the same chunk
    assert not np.allclose(base.predict_chunk(obs, noise=noise(1)), chunk, atol=1e-4)
    padded = z.copy()
    padded[:, ACTION_DIM:] = 0.0  # the padded columns are cut from the output, yet they enter the action expert
    assert not np.allclose(base.predict_chunk(obs, noise=padded), chunk, atol=1e-5)
    other_image = {"state": obs["state"], "images": observation(1)["images"]}
    assert not np.allclose(base.predict_chunk(other_image, noise=z), chunk, atol=1e-5)  # it sees the camera
    other_state = {"state": -obs["state"], "images": obs["images"]}
    assert not np.allclose(base.predict_chunk(other_state, noise=z), chunk, atol=1e-5)  # and the state
    with pytest.raises(ValueError, match=r"must have shape \(4, 8\)"):
        base.predict_chunk(obs, noise=z[:, :ACTION_DIM])

    # lerobot's own inference path on the same observation and noise: its processors, predict_action_chunk(noise=)
    theirs = lerobot_chunk(kind, folder, obs, z, CAMERA, TASK)
    np.testing.assert_allclose(chunk, theirs, atol=1e-5)


def dsrl_overrides(folder: Path) -> list[str]:
    return [
        "env.camera=true",
        "policy=dsrl",
        "algo=dsrl",
        "algo.form=noise",
        "policy.base.kind=lerobot",
        f"policy.base.path={folder}",
        f"policy.base.task={TASK}",
        "policy.hidden=[32]",
        "policy.encoder.features=8",
        "policy.encoder.channels=8",
        "policy.encoder.kernels=[3]",
        "policy.encoder.strides=[2]",
        "algo.critic_hidden=[32,32]",
        "algo.batch_size=8",
    ]


# slow: [pi0], covered fast by [pi05] and test_the_initial_noise_steers_the_pi_chunk_as_lerobot_runs_it[pi0]
@pytest.mark.parametrize("tiny_pi", [pytest.param("pi0", marks=pytest.mark.slow), "pi05"], indirect=True)
def test_pi_is_a_dsrl_base_named_by_path_in_the_config_of_an_actor_and_a_learner(tiny_pi, tmp_path):
    """`policy=dsrl algo.form=noise policy.base.kind=lerobot policy.base.path=<π folder>`: the actor acts with the π's
    chunks from the noise actor's noises, the learner (the same config) updates on them."""
    kind, folder = tiny_pi
    torch.set_num_threads(1)
    cfg = toy_config(
        tmp_path,
        *dsrl_overrides(folder),
        "train.total_env_steps=40",
        "train.random_steps=16",
        "train.learning_starts=16",
        "demos.num_episodes=2",
    )
    env = make_env(cfg)
    policy = make_policy(cfg, env)
    assert type(policy.base) is LeRobotBase and policy.base.name == f"{kind}:{folder}"
    assert policy.noise_shape == (CHUNK, MAX_ACTION_DIM) and policy.execute_steps == CHUNK
    make_algorithm(cfg, policy, env)  # the learner's algorithm accepts it

    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages and learner.updates > 0
    online = learner.replay.online
    size = online.size
    live = np.flatnonzero(online.data["step"][:size] > 0)
    decisions = live[online.data["extra/decision"][live, 0] == 1]
    assert len(decisions) >= 40 // CHUNK - 1
    # each decision's first action is the π's chunk from that decision's noise, on the observation it was taken at
    base = policy.base
    for row in decisions[:3]:
        obs = {
            "state": online.data["state"][row - 1],
            "images": {CAMERA: online.data[f"image/{CAMERA}"][row - 1]},
        }
        z = online.data["extra/noise"][row].reshape(CHUNK, MAX_ACTION_DIM)
        np.testing.assert_allclose(online.data["action_executed"][row], base.predict_chunk(obs, noise=z)[0], atol=1e-5)


def test_reinflow_refuses_pi_by_name_saying_why(tiny_pi, tmp_path):
    """ReinFlow's chain runs SmolVLA's action expert step by step; π0/π0.5 keep theirs inside a PaliGemma stack:
    refused in one line that names the policy type and points to DSRL."""
    kind, folder = tiny_pi
    cfg = toy_config(
        tmp_path, "env.camera=true", "policy=reinflow", "algo=ppo", f"policy.path={folder}", f"policy.task={TASK}"
    )
    with pytest.raises(ConfigError) as err:
        make_policy(cfg, make_env(cfg))
    message = str(err.value)
    assert "\n" not in message
    assert (
        f"is a {kind} policy, whose expert its chain cannot step" in message and "inside a PaliGemma stack" in message
    )
    assert "ReinFlow fine-tunes the flow action expert of a SmolVLA" in message and "policy=dsrl" in message


def test_an_actor_and_a_learner_train_a_residual_on_a_lerobot_act_base_named_by_path(tiny_act, tmp_path):  # noqa: F811
    """`policy=residual policy.base.kind=lerobot policy.base.path=<ACT folder>` through the config: the actor's
    records carry the ACT's own actions as the base's, the learner trains the residual on them."""
    torch.set_num_threads(1)
    cfg = toy_config(
        tmp_path,
        "policy=residual",
        "algo=residual",
        "policy.base.kind=lerobot",
        f"policy.base.path={tiny_act}",
        "policy.hidden=[32]",
        "algo.critic_hidden=[32,32]",
        "algo.batch_size=16",
        "train.total_env_steps=100",  # 5 episodes at least (20 steps each): the test reads 2
        "train.random_steps=40",
        "train.learning_starts=40",
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages and learner.updates > 0
    assert type(learner.algo.policy.base.base) is LeRobotBase
    online = learner.replay.online
    size = online.size
    steps = online.data["step"][:size]
    first = np.flatnonzero(steps == 1)  # the first action of each episode: the ACT's chunk on the reset observation
    assert len(first) >= 2
    act = LeRobotBase.load(tiny_act, make_observation_space(STATE_DIM, {}), ACTION_DIM)
    for row in first:
        obs = {"state": online.data["state"][row - 1], "images": {}}
        act.reset()
        np.testing.assert_allclose(online.data["extra/base_action"][row], act.predict_chunk(obs)[0], atol=1e-5)
    live = steps > 0
    executed, base = online.data["action_executed"][:size][live], online.data["extra/base_action"][:size][live]
    assert np.abs(base).sum() > 0 and np.all(np.abs(executed - base) <= 0.2 + 1e-5)


def test_a_pi_whose_weights_do_not_load_is_refused_not_run_with_random_weights(tiny_pi, tmp_path):
    """lerobot's π `from_pretrained` prints a warning and keeps its random initialisation where the saved weights do
    not fit what config.json builds, or are missing: our loader refuses both in one line."""
    kind, folder = tiny_pi
    edited = Path(shutil.copytree(folder, tmp_path / "edited"))
    cfg = json.loads((edited / "config.json").read_text())
    cfg["max_action_dim"] = 2 * MAX_ACTION_DIM  # a config from another run: the action projections' shapes differ
    (edited / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as err:
        LeRobotBase.load(edited, SPACE, ACTION_DIM, task=TASK)
    message = str(err.value)
    assert "\n" not in message and f"({kind}) does not fit the policy its config.json builds" in message
    assert "'model.action_in_proj.weight' is (32, 8) in model.safetensors, (32, 16) in the policy" in message
    (edited / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="has no model.safetensors: its weights are missing"):
        LeRobotBase.load(edited, SPACE, ACTION_DIM, task=TASK)
