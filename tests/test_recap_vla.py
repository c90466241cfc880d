"""RECAP on a SmolVLA (robo_rl/offline/recap_vla.py): a tiny SmolVLA trained by lerobot-train collects episodes into
a new run folder, they are labelled, the labels go into each frame's prompt of a LeRobot dataset lerobot reads back,
lerobot-train fine-tunes the VLA on it, and the fine-tuned VLA is sampled with classifier-free guidance over its two
prompts: at w = 1 exactly SmolVLA's own sample for the positive prompt, at w = 0 for the plain one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from robo_rl.cli import main
from robo_rl.config import ConfigError
from tests.test_vla_train import ENV, LONG, TASK, make_export, train_tiny

SHORT = ["env.max_episode_steps=12", "logger.progress=false"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny SmolVLA trained by lerobot-train for 4 steps on three pick_cube demonstrations (32 px camera)."""
    return train_tiny(make_export(tmp_path_factory.mktemp("vla_data")), tmp_path_factory.mktemp("vla_run") / "run")


def conditioned_copy(trained: Path, tmp_path: Path, guidance: float) -> Path:
    """The trained VLA's folder with RECAP's marker: sampled as an advantage-conditioned one (the sampler's maths
    does not depend on whether its weights were fine-tuned)."""
    from robo_rl.offline.recap_vla import MARKER

    folder = shutil.copytree(trained, tmp_path / "pretrained_model")
    (folder / MARKER).write_text(json.dumps({"advantage": "prompt", "guidance": guidance}))
    return folder


def test_guided_sampling_over_the_two_prompts_is_smolvlas_own_sample_at_w_1_and_w_0(trained, tmp_path):
    import torch

    from policies.advantage import NEGATIVE, POSITIVE, advantage_prompt
    from robo_rl.config import load_config, make_env
    from robo_rl.offline.recap_vla import load_guided_vla

    torch.set_num_threads(1)
    env = make_env(load_config([*ENV]))
    try:
        obs, _ = env.reset(seed=3)
        vla = load_guided_vla(conditioned_copy(trained, tmp_path, 1.0), env, task=TASK)
        assert vla.model.advantage == "prompt" and vla.model.guidance == 1.0
        noise = np.random.default_rng(7).standard_normal(vla.base.noise_shape).astype(np.float32)
        own = {
            w: vla.base.predict_chunk({**obs, "instruction": advantage_prompt(TASK, label)}, noise=noise)
            for w, label in ((1.0, POSITIVE), (0.0, 2))
        }
        chunks = {}
        for w in (1.0, 0.0, 3.0):
            vla.model.guidance = w
            vla.reseed(7)
            chunks[w] = vla.predict_chunk(obs)
        np.testing.assert_allclose(chunks[1.0], own[1.0], atol=1e-5)  # the positive prompt alone
        np.testing.assert_allclose(chunks[0.0], own[0.0], atol=1e-5)  # the plain prompt alone
        assert chunks[3.0].shape == (vla.chunk_size, 4) and np.abs(chunks[3.0]).max() <= 1.0
        assert not np.allclose(chunks[3.0], chunks[1.0], atol=1e-4)  # guidance moves the sample
        negative = vla.base.predict_chunk({**obs, "instruction": advantage_prompt(TASK, NEGATIVE)}, noise=noise)
        assert not np.allclose(negative, own[1.0], atol=1e-4)  # the prompt reaches the action expert
        vla.reseed(7)
        again = vla.predict_chunk(obs)
        vla.model.guidance = 3.0
        vla.reseed(7)
        np.testing.assert_allclose(vla.predict_chunk(obs), chunks[3.0], atol=1e-6)  # reseeded: the same sample
        assert again.shape == chunks[1.0].shape
    finally:
        env.close()


def test_a_smolvla_collects_is_labelled_fine_tuned_with_the_label_in_each_frames_prompt_and_tuned(
    trained, tmp_path, capsys
):
    """`recap collect <new run> policy=<VLA>` → `recap label` → the fine-tune (lerobot-train, in this process) →
    `recap tune` and `recap collect` on the fine-tuned VLA. Each exported frame's prompt is its instruction with its
    own action's label, or the plain instruction where the CFG dropout dropped it."""
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_rl.commands.recap import recap_settings
    from robo_rl.offline.recap import read_labels
    from robo_rl.offline.recap_vla import MARKER, finetune_vla, read_marker

    torch.set_num_threads(1)
    run = tmp_path / "run"
    env = [*ENV, *SHORT]
    assert main(["recap", "collect", str(run), f"policy={trained}", "episodes=6", f"task={TASK}", *env]) == 0
    assert (run / "config.yaml").exists()
    assert main(["recap", "label", str(run), "demos=false", "recap.value_steps=30", "recap.value_hidden=[16]"]) == 0
    cols, _ = read_labels(run / "recap")
    positive = {
        (int(e), int(t)): bool(p) for e, t, p in zip(cols["episode_id"], cols["step"], cols["positive"], strict=True)
    }
    settings = recap_settings({"recap.updates": "2", "recap.batch_size": "4", "recap.cfg_dropout": "0.3"})
    model, summary = finetune_vla(
        run / "recap", trained, run / "recap" / "vla", settings, TASK, progress=False, in_process=True, threads=1
    )
    assert (model / MARKER).is_file() and read_marker(model)["guidance"] == 1.0
    train_config = json.loads((model / "train_config.json").read_text())  # from the base, its schedule fitted
    assert (
        train_config["policy"]["scheduler_decay_steps"] == 2 and train_config["policy"]["scheduler_warmup_steps"] == 1
    )
    assert train_config["steps"] == 2 and train_config["dataset"]["root"] == summary["dataset"]
    from safetensors.torch import load_file

    before, after = load_file(trained / "model.safetensors"), load_file(model / "model.safetensors")
    assert before.keys() == after.keys() and any(not (before[k] == after[k]).all() for k in before)  # trained
    for side in ("postprocessor_step_*_unnormalizer", "preprocessor_step_*_normalizer"):  # normalised as the base
        base_stats, tuned_stats = (
            load_file(next(f.glob(f"policy_{side}_processor.safetensors"))) for f in (trained, model)
        )
        for key in ("action.mean", "action.std", "observation.state.mean", "observation.state.std"):
            if key in base_stats:
                assert torch.equal(base_stats[key], tuned_stats[key]), key
    new_stats = json.loads((Path(summary["dataset"]) / "meta" / "stats.json").read_text())
    assert new_stats["action"]["mean"] == base_stats["action.mean"].tolist()
    assert summary["frames"] == len(positive) and summary["episodes"] == 6
    data = LeRobotDataset("local/recap", root=summary["dataset"], video_backend="pyav")
    plain = 0
    for i in range(len(data)):
        item = data.hf_dataset[i]
        prompt = data.meta.tasks.index[int(item["task_index"])]
        key = (int(item["episode_index"]), int(item["frame_index"]))
        label = "positive" if positive[key] else "negative"
        assert prompt in (TASK, f"{TASK}. Advantage: {label}"), (key, prompt)
        plain += prompt == TASK
    assert 0.1 <= plain / len(data) <= 0.55 and abs(summary["dropout_rate"] - plain / len(data)) < 1e-9
    tune = ["recap", "tune", str(run), f"policy={model}", "guidances=1,2", "episodes=2", f"task={TASK}", *SHORT]
    assert main(tune) == 0
    tuned = read_marker(model)
    assert tuned["guidance"] in (1.0, 2.0) and set(tuned["tuned"]["results"]) == {"1.0", "2.0"}
    capsys.readouterr()
    assert main(["recap", "collect", str(run), "episodes=2", "guidance=2", f"task={TASK}", *SHORT]) == 0
    said = capsys.readouterr().out  # the run's own fine-tuned VLA, found without policy=
    assert f"{model} (guidance 2.0): success" in said and "(source collect_2)" in said


def test_recap_finetune_with_a_vla_base_goes_to_lerobot_train_and_a_flow_base_to_our_own(tmp_path, monkeypatch):
    import robo_rl.offline.recap_vla as recap_vla

    seen = {}

    def finetune_vla(labels, base, out, settings, task, device="cpu"):
        seen.update(labels=labels, base=base, out=out, updates=settings.updates, task=task)
        model = out / "lerobot" / "checkpoints" / "last" / "pretrained_model"
        return model, {"updates": 5, "train_s": 1.0, "frames": 10, "episodes": 2, "positive_frames": 0.3,
                       "dropout_rate": 0.1, "guidance": 1.0}  # fmt: skip

    monkeypatch.setattr(recap_vla, "finetune_vla", finetune_vla)
    folder = tmp_path / "vla"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (tmp_path / "run" / "recap").mkdir(parents=True)
    args = ["recap", "finetune", str(tmp_path / "run"), f"base={folder}", "task=pick", "recap.updates=5"]
    assert main(args) == 0
    labels = tmp_path / "run" / "recap"
    assert seen == {"labels": labels, "base": str(folder), "out": labels / "vla", "updates": 5, "task": "pick"}


def test_refusals_name_the_problem(trained, tmp_path, capsys):
    from robo_rl.config import load_config, make_env
    from robo_rl.offline.recap_vla import frame_prompts, load_guided_vla

    env = make_env(load_config([*ENV]))
    try:
        with pytest.raises(ConfigError, match="guidance=2.0: .* is not advantage-conditioned"):
            load_guided_vla(trained, env, guidance=2.0, task=TASK)
        with pytest.raises(ConfigError, match="needs a task description"):
            load_guided_vla(trained, env)  # pick_cube gives no instruction and none was given
    finally:
        env.close()
    from robo_rl.data.datasets import Episode

    records = {"episode_id": np.zeros(3, np.int64), "step": np.arange(3)}
    with pytest.raises(ConfigError, match="has no instruction: give the VLA's task text, task="):
        frame_prompts([Episode(records)], [np.zeros(3, np.int64)], None, 0.1, 0)
    from robo_rl.offline.smolvla_train import VLATrainError, check_instructions

    with pytest.raises(VLATrainError, match="tokenizer_max_length is 48"):  # the label makes a prompt too long
        config = json.loads((trained / "config.json").read_text())
        check_instructions([f"{LONG}. Advantage: positive"], config["vlm_model_name"], 48)
    assert main(["recap", "collect", str(tmp_path / "nowhere"), "episodes=1"]) != 0
    assert "is no run folder; a new one needs policy=" in capsys.readouterr().err
    assert main(["recap", "collect", str(tmp_path / "new"), f"policy={tmp_path / 'typo.pt'}", *ENV]) != 0
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "new").exists()  # no folder made
