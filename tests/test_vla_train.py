"""A SmolVLA trained by lerobot's own `lerobot-train` on a robo_rl LeRobot export (`robo-rl vla train`), loaded back by
path in an actor and a learner as a frozen base steered by DSRL (noise-space SAC) or corrected by a residual, and as
the policy ReinFlow fine-tunes (its action expert); a moved run folder; and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from robo_rl.cli import main
from robo_rl.envs import make_observation_space

CAMERA, IMAGE = "front", 32
TASK = "pick up the cube"
STATE_DIM, ACTION_DIM, CHUNK = 16, 4, 4  # pick_cube's full state and end-effector + gripper action
ENV = ["env=pick_cube", f"env.cameras=[{CAMERA}]", f"env.image_size={IMAGE}"]
# a few steps of a tiny SmolVLA (hidden 32) with a chunk of 4: lerobot's own settings, passed through as they are
LEROBOT = ["--policy.chunk_size=4", "--policy.n_action_steps=4", "--policy.num_steps=4"]
LONG = "pick up the cube then place it in the box on the left and push the red block " * 2  # over 48 tokens


def make_export(tmp: Path) -> Path:
    """Three scripted pick_cube demonstrations with a 32 px camera, exported as a LeRobot dataset."""
    from robo_rl.config import load_config
    from robo_rl.data.datasets import split_episodes
    from robo_rl.data.datasets.lerobot_v3 import export_lerobot
    from robo_rl.data.demos import load_or_make_demos

    cfg = load_config([*ENV, "demos.num_episodes=3", f"cache_dir={tmp / 'cache'}"])
    batch, _, _ = load_or_make_demos(cfg, progress=False)
    return export_lerobot(split_episodes(batch, partition="demos"), tmp / "ds", task=TASK, progress=False)


def train_tiny(export: Path, out: Path) -> Path:
    """lerobot-train, in this process (its import is shared with the test's), through the command's own code."""
    from robo_rl.offline.smolvla_train import train_smolvla

    return train_smolvla(
        export, out, vlm="tiny", steps=4, batch_size=4, workers=0, extra=LEROBOT, in_process=True, threads=1
    )


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return make_export(tmp_path_factory.mktemp("vla_data"))


@pytest.fixture(scope="module")
def trained(export, tmp_path_factory) -> Path:
    return train_tiny(export, tmp_path_factory.mktemp("vla_run") / "run")


def on_the_vla(trained: Path) -> list[str]:
    """A short off-policy run on the lerobot-trained VLA as the frozen base, small networks: the plumbing, not the
    learning (train.utd=0.2: 32 updates instead of 160)."""
    return [
        *ENV,
        "policy.base.kind=lerobot",
        f"policy.base.path={trained}",
        f"policy.base.task={TASK}",
        "policy.hidden=[32]",
        "policy.encoder.features=8",
        "algo.critic_hidden=[32,32]",
        "algo.batch_size=16",
        "demos.num_episodes=0",
        "train.random_steps=40",
        "train.learning_starts=40",
        "train.total_env_steps=200",
        "train.utd=0.2",
    ]


def run_online(tmp_path: Path, over: list[str]):
    """An actor and a learner (tests/test_pipeline.py's pair, one torch thread) run `over` to its end cleanly: the
    config, the learner, its online replay and the rows that follow a step (not an episode's first observation)."""
    import torch

    from robo_rl.config import save_config
    from tests.test_pipeline import run_pair, toy_config

    config = toy_config(tmp_path, *over)
    (tmp_path / "run").mkdir()
    save_config(config, tmp_path / "run" / "config.yaml")
    torch.set_num_threads(1)
    learner, reason = run_pair(config, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages and learner.env_steps >= 200
    online = learner.replay.online
    return config, learner, online, np.arange(online.size)[online.data["step"][: online.size] > 0]


def test_lerobot_train_makes_a_smolvla_that_dsrl_steers_in_an_actor_and_learner(export, trained, tmp_path):
    """The checkpoint is lerobot's own (its config, weights, processors with our export's statistics), built on the
    local tiny VLM with nothing from the hub; as a DSRL base it acts a few hundred pick_cube steps, one noise per
    chunk of 4, while the learner updates its noise actor."""
    run = trained.parents[3]
    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["type"] == "smolvla" and cfg["vlm_model_name"] == str(run / "vlm") and not cfg["load_vlm_weights"]
    assert not cfg["train_expert_only"] and not cfg["freeze_vision_encoder"]  # a random VLM trains with the expert
    assert cfg["resize_imgs_with_padding"] == [IMAGE, IMAGE] and cfg["chunk_size"] == CHUNK
    assert cfg["output_features"]["action"]["shape"] == [ACTION_DIM]
    train_cfg = json.loads((trained / "train_config.json").read_text())
    assert train_cfg["dataset"]["root"] == str(export) and train_cfg["steps"] == 4 and not train_cfg["wandb"]["enable"]
    summary = json.loads((run / "vla_train.json").read_text())
    assert summary["pretrained_model"] == str(trained) and summary["wall_s"] > 0 and summary["peak_rss_gb"] > 0
    print(f"\ntiny SmolVLA, 4 lerobot-train steps: {summary['wall_s']} s, peak RSS {summary['peak_rss_gb']} GB")
    # lerobot's normaliser carries our export's action statistics: what our actions un-normalise by
    from safetensors.torch import load_file

    post = load_file(next(trained.glob("policy_postprocessor_step_*_unnormalizer_processor.safetensors")))
    stats = json.loads((export / "meta" / "stats.json").read_text())["action"]
    np.testing.assert_allclose(post["action.mean"].numpy(), stats["mean"], atol=1e-6)

    over = ["policy=dsrl", "algo=dsrl", "algo.form=noise", *on_the_vla(trained)]
    config, learner, online, rows = run_online(tmp_path, over)
    assert learner.updates > 0
    assert len(rows) >= 200
    assert 0.2 <= online.data["extra/decision"][rows, 0].mean() <= 0.35, "one noise per chunk of 4"
    noise = online.data["extra/noise"][rows]
    assert noise.shape[1] == CHUNK * 32 and 0 < np.abs(noise).max() <= 1.5  # SmolVLA's padded width, in the box
    assert np.abs(online.data["action_executed"][rows]).max() <= 1.0


def _spy_on_the_base(monkeypatch) -> list:
    """Every chunk the actor's LeRobot base predicts, with the observation and the initial noise it drew: the noise
    comes from a seeded numpy generator instead of torch's, so a fresh load of the checkpoint can replay a chunk."""
    from policies.lerobot_base import LeRobotBase

    own, rng, calls = LeRobotBase.predict_chunk, np.random.default_rng(0), []

    def predict_chunk(self, obs, noise=None):
        noise = rng.standard_normal(self.noise_shape).astype(np.float32) if noise is None else noise
        chunk = own(self, obs, noise=noise)
        calls.append((obs, noise, chunk))
        return chunk

    monkeypatch.setattr(LeRobotBase, "predict_chunk", predict_chunk)
    return calls


def test_a_residual_corrects_the_lerobot_trained_smolvla_in_an_actor_and_learner(trained, tmp_path, monkeypatch):
    """`experiment=residual_pick_cube policy.base.kind=lerobot policy.base.path=<lerobot-train output>`: the VLA
    (its saved processors, the task's instruction) acts in chunks of 4, a residual of at most 0.2 corrects every
    step; the records carry the VLA's own actions, the learner updates the residual, its checkpoint loads back."""
    from robo_rl.config import make_env, make_policy
    from robo_rl.runs import load_checkpoint

    calls = _spy_on_the_base(monkeypatch)
    # the residual's plumbing: it moves from the first update
    over = ["experiment=residual_pick_cube", *on_the_vla(trained), "algo.actor_start_updates=0"]
    config, learner, online, rows = run_online(tmp_path, over)
    assert learner.updates > 0
    assert len(rows) >= 200
    # each step's base action is the VLA's: the actions of its chunks, in the order the actor executed them
    predicted = np.concatenate([chunk for _, _, chunk in calls])
    base = online.data["extra/base_action"][rows]
    assert len(calls) >= len(rows) // CHUNK and np.abs(base).sum() > 0
    assert all(np.isclose(predicted, b, atol=1e-6).all(-1).any() for b in base)
    np.testing.assert_array_equal(base[:CHUNK], calls[0][2])  # the first episode opens with the first chunk
    # the correction: at most s = 0.2 of the half-width of the actions lerobot's saved statistics kept, widened by 1 + s
    half = learner.algo.policy.action_half.numpy()
    assert np.all(half <= 1.2 + 1e-6) and half.min() < 1.2, half  # pick_cube's demonstrations never span all of ±1
    executed = online.data["action_executed"][rows]
    assert np.all(np.abs(executed - base) <= 0.2 * half + 1e-5)
    # a fresh load of the checkpoint folder (lerobot's config, weights, processors) gives the same chunk
    from policies.lerobot_base import LeRobotBase

    obs, noise, chunk = calls[0]
    space = make_observation_space(STATE_DIM, {CAMERA: (IMAGE, IMAGE)})
    again = LeRobotBase.load(trained, space, ACTION_DIM, task=TASK)
    np.testing.assert_allclose(again.predict_chunk(obs, noise=noise), chunk, atol=1e-5)
    # the learner moved the residual off its zero start; the run's checkpoint loads back into a fresh policy
    head = learner.algo.policy.head
    assert any(p.abs().sum() > 0 for p in list(head.parameters())[-2:])
    policy = make_policy(config, make_env(config))
    policy.load_state_dict(load_checkpoint(tmp_path / "run")["algo"]["policy"])
    assert any(p.abs().sum() > 0 for p in list(policy.head.parameters())[-2:])
    # an env's instruction, where it gives one, is what the VLA reads (pick_cube gives none: the task above)
    from policies.vla_checks import BaseMismatchError
    from robo_rl.policy_io import obs_to_torch

    with pytest.raises(BaseMismatchError, match="tokens, base .* reads at most 48"):
        policy.base_action(obs_to_torch({**obs, "instruction": LONG}))


def test_reinflow_fine_tunes_the_lerobot_trained_smolvlas_action_expert_in_an_actor_and_learner(trained, tmp_path):
    """`experiment=reinflow_pick_cube policy.path=<lerobot-train output>`: PPO over the VLA's 4 noisy Euler steps
    in on-policy iterations; its updates move the action expert (and the noise network), never the VLM or the state
    projection; the run's checkpoint loads back into the policy built from the same folder."""
    import torch

    from policies.vla_flow import EXPERT_PARTS
    from robo_rl.config import make_env, make_policy
    from robo_rl.runs import load_checkpoint

    over = [
        *ENV,
        "experiment=reinflow_pick_cube",
        f"policy.path={trained}",
        f"policy.task={TASK}",
        "policy.noise_hidden=[32]",
        "algo.value_hidden=[32]",
        "algo.rollout_env_steps=80",
        "algo.batch_size=40",
        "algo.epochs=1",
        "demos.num_episodes=0",
        "train.total_env_steps=200",
    ]
    config, learner, online, rows = run_online(tmp_path, over)
    assert learner.updates >= 2
    assert 0.2 <= online.data["extra/decision"][rows, 0].mean() <= 0.35, "one chain per chunk of 4"
    assert online.data["extra/chain"].shape[1] == (4 + 1) * CHUNK * 32  # the VLA's padded width, 4 Euler steps
    assert np.abs(online.data["action_executed"][rows]).max() <= 1.0
    fresh = make_policy(config, make_env(config)).state_dict()
    tuned = learner.algo.policy.state_dict()
    assert fresh.keys() == tuned.keys()
    # the VLA's weights: both from the same folder, so a difference is PPO's (the noise network starts at random)
    vla = [k for k in tuned if k.startswith("model.vla.")]
    moved = {k.removeprefix("model.vla.model.") for k in vla if not torch.equal(tuned[k], fresh[k])}
    frozen = [k for k in vla if ".vlm_with_expert.vlm." in k or ".state_proj." in k]
    assert frozen and all(torch.equal(tuned[k], fresh[k]) for k in frozen), "the frozen VLM moved"
    assert any(k.startswith("vlm_with_expert.lm_expert.") for k in moved), moved
    assert all(k.startswith(EXPERT_PARTS) for k in moved), sorted(k for k in moved if not k.startswith(EXPERT_PARTS))
    saved = load_checkpoint(tmp_path / "run")["algo"]["policy"]
    policy = make_policy(config, make_env(config))
    policy.load_state_dict(saved)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, saved[k]), k
    # an env's instruction, where it gives one, is what the VLA reads (pick_cube gives none: policy.task)
    from policies.vla_checks import BaseMismatchError
    from robo_rl.policy_io import stack_obs

    rng = np.random.default_rng(1)
    obs = {"state": rng.standard_normal(STATE_DIM).astype(np.float32)}
    obs["images"] = {CAMERA: rng.integers(0, 256, (IMAGE, IMAGE, 3), dtype=np.uint8)}

    def chunk(instruction):
        torch.manual_seed(0)  # the same initial noise: the chunk then depends on the observation alone
        chain, _ = policy.sample_chain(stack_obs([{**obs, "instruction": instruction}]), deterministic=True)
        return policy.model.to_actions(chain[0, -1])

    with torch.no_grad():
        assert torch.equal(chunk(None), chunk(TASK)) and not torch.equal(chunk(TASK), chunk("push the red block"))
        with pytest.raises(BaseMismatchError, match="tokens, base .* reads at most 48"):
            chunk(LONG)


def test_a_moved_run_folder_finds_its_vlm_and_one_without_it_is_refused_in_one_line(trained, tmp_path):
    """lerobot-train writes the VLM folder's absolute path into the checkpoint (config.json, the tokenizer step): a
    run folder copied elsewhere (to the robot's machine) loads with the VLM beside its checkpoint, and acts as before;
    without that folder it is refused in one line that names the path."""
    import shutil

    from policies.lerobot_base import LeRobotBase

    run = trained.parents[3]
    trained_at = tmp_path / "trained_at"  # a run trained here, then moved: its files name this folder
    shutil.copytree(run, trained_at, symlinks=True)
    for file in trained_at.rglob("*.json"):
        file.write_text(file.read_text().replace(str(run), str(trained_at)))
    moved = trained_at.rename(tmp_path / "moved")
    model = moved / trained.relative_to(run)
    space = make_observation_space(STATE_DIM, {CAMERA: (IMAGE, IMAGE)})
    base = LeRobotBase.load(model, space, ACTION_DIM, task=TASK)
    assert base.policy.config.vlm_model_name == str(moved / "vlm")
    obs = {"state": np.ones(STATE_DIM, np.float32), "images": {CAMERA: np.full((IMAGE, IMAGE, 3), 90, np.uint8)}}
    z = np.random.default_rng(0).standard_normal(base.noise_shape).astype(np.float32)
    original = LeRobotBase.load(trained, space, ACTION_DIM, task=TASK)
    np.testing.assert_allclose(base.predict_chunk(obs, noise=z), original.predict_chunk(obs, noise=z), atol=1e-6)
    shutil.rmtree(moved / "vlm")
    with pytest.raises(ValueError) as err:
        LeRobotBase.load(model, space, ACTION_DIM, task=TASK)
    message = str(err.value)
    assert f"builds on the VLM folder {trained_at / 'vlm'} (vlm_model_name in its config.json)" in message
    assert "copy the run's VLM folder with it" in message and "\n" not in message


def test_a_vla_for_another_action_size_or_a_too_long_instruction_is_refused_in_one_line(trained, tmp_path):
    from policies.lerobot_base import LeRobotBase
    from policies.vla_checks import BaseMismatchError
    from robo_rl.offline.smolvla_train import VLATrainError, check_instructions

    space = make_observation_space(STATE_DIM, {CAMERA: (IMAGE, IMAGE)})
    with pytest.raises(BaseMismatchError) as err:
        LeRobotBase.load(trained, space, 7, task=TASK)
    assert "(4,)" in str(err.value) and "action dimension is 7" in str(err.value) and "\n" not in str(err.value)
    long = LONG
    with pytest.raises(BaseMismatchError) as err:
        LeRobotBase.load(trained, space, ACTION_DIM, task=long)
    message = str(err.value)
    assert "tokens, base" in message and "reads at most 48" in message and "\n" not in message
    n = int(message.split(" is ")[1].split(" tokens")[0])
    assert n > 48
    base = LeRobotBase.load(trained, space, ACTION_DIM, task=TASK)  # the task it was trained on fits
    obs = {"state": np.zeros(STATE_DIM, np.float32), "images": {CAMERA: np.zeros((IMAGE, IMAGE, 3), np.uint8)}}
    assert base.predict_chunk(obs).shape == (CHUNK, ACTION_DIM)
    with pytest.raises(BaseMismatchError, match=f"is {n} tokens, base .* reads at most 48"):  # the env's instruction
        base.predict_chunk({**obs, "instruction": long})
    assert base.predict_chunk({**obs, "instruction": "pick up the red cube"}).shape == (CHUNK, ACTION_DIM)
    # the same count before training: lerobot's tokenizer step would cut it silently
    with pytest.raises(VLATrainError, match=f"is {n} tokens, SmolVLA's tokenizer_max_length is 48"):
        check_instructions([TASK, long], str(trained.parents[3] / "vlm"), 48)
    check_instructions([TASK, long], str(trained.parents[3] / "vlm"), n)  # a limit that holds it


def test_vla_train_refuses_bad_command_lines_in_one_line(export, tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    cases = [
        (["train", "out=o"], "needs dataset="),
        (["train", f"dataset={export}", "out=o", "stpes=3"], "'stpes=3' is not one of"),
        (["train", f"dataset={export}", "out=o", "steps=0"], "steps=0 is out of range"),
        (["train", f"dataset={export}", "out=o", "threads=two"], "threads=two is not a whole number"),
        (["train", f"dataset={tmp_path}", "out=o"], "is not a LeRobot v3 dataset"),
        (["train", f"dataset={export}", f"out={tmp_path / 'full'}"], "exists and is not empty"),
        (["train", f"dataset={export}", f"out={tmp_path / 'o'}", "vlm=nowhere"], "neither a size"),
        (["fit"], "unknown vla command 'fit'"),
    ]
    for argv, expected in cases:
        assert main(["vla", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert expected in err and "\n" not in err, (argv, err)
    assert main(["vla", "--help"]) == 0
    assert "policy_path=lerobot/smolvla_base" in capsys.readouterr().out


def test_a_smolvla_on_meta_worlds_39_d_state_is_widened_to_fit_trains_and_acts(tmp_path):
    """Meta-World's state is 39-d, wider than SmolVLA's default max_state_dim of 32, which lerobot passes on uncut to
    fail in its state projection: `vla train` widens a new SmolVLA to the dataset (and keeps a width given)."""
    from policies.lerobot_base import LeRobotBase
    from robo_rl.config import load_config, make_env
    from robo_rl.data.datasets import split_episodes
    from robo_rl.data.datasets.lerobot_v3 import export_lerobot
    from robo_rl.data.demos import load_or_make_demos
    from robo_rl.offline.smolvla_train import train_smolvla, widths_that_fit

    layout = {"state_dim": 39, "action_dim": 4}
    assert widths_that_fit(layout, []) == ["--policy.max_state_dim=39"]
    assert widths_that_fit(layout, ["--policy.max_state_dim=64"]) == []
    assert widths_that_fit({"state_dim": 16, "action_dim": 40}, []) == ["--policy.max_action_dim=40"]
    overrides = ["env=metaworld", "env.task=reach-v3", "env.cameras=[corner2]", f"env.image_size={IMAGE}"]
    cfg = load_config([*overrides, "demos.num_episodes=1", f"cache_dir={tmp_path / 'cache'}"])
    batch, _, _ = load_or_make_demos(cfg, progress=False)
    dataset = export_lerobot(split_episodes(batch, partition="demos"), tmp_path / "ds", progress=False)
    model = train_smolvla(
        dataset, tmp_path / "run", vlm="tiny", steps=2, batch_size=4, workers=0, extra=LEROBOT, in_process=True
    )
    assert json.loads((model / "config.json").read_text())["max_state_dim"] == 39
    env = make_env(cfg)
    try:
        obs, _ = env.reset(seed=0)
        assert obs["state"].shape == (39,) and obs["instruction"]
        base = LeRobotBase.load(model, env.observation_space, 4, task=obs["instruction"])
        chunk = base.predict_chunk(obs)
        assert chunk.shape == (CHUNK, 4) and np.all(np.isfinite(chunk))
    finally:
        env.close()
