"""The VLAC-style pairwise progress critic: trained here from synthetic episodes (a square moving to a target
corner), its quality checks, its SigLIP backbone built as a tiny random model on disk, and bad input."""

import json
import time

import numpy as np
import pytest
import torch

from robo_rl.data.datasets import Episode
from robo_rl.rewards.base import RewardModelError, Task, load_model
from robo_rl.rewards.progress import ProgressCritic, evaluate_progress, hashed_words, spearman, train_progress_critic

INSTRUCTION = "move the square to the corner"


def episode(rng, success: bool, length: int = 12, size: int = 16, k: int = 0) -> Episode:
    """A bright square that walks from the top-left corner to the bottom-right one (success) or wanders near its
    start (failure), on a noisy dark background."""
    start, goal = np.array([1.0, 1.0]), np.array([size - 4.0, size - 4.0])
    pos = [start]
    for t in range(1, length + 1):
        pos.append(start + (goal - start) * t / length if success else np.clip(pos[-1] + rng.normal(0, 0.7, 2), 0, 5))
    frames = rng.integers(0, 30, (length + 1, size, size, 3)).astype(np.uint8)
    for t, (r, c) in enumerate(pos):
        frames[t, int(r) : int(r) + 3, int(c) : int(c) + 3] = 230
    done = np.zeros(length + 1, bool)
    done[-1] = success
    return Episode(
        {
            "image/top": frames,
            "success": done,
            "step": np.arange(length + 1),
            "reward": done * 1.0,
            "episode_id": np.full(length + 1, k),
            "ended_by": np.zeros(length + 1, np.int8),
        }
    )


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    eps = [episode(rng, k % 3 != 0, k=k) for k in range(30)]
    start = time.process_time()  # the training's own cost: wall time on a loaded 2-core machine measures the load
    model = train_progress_critic(
        eps,
        ("top",),
        [INSTRUCTION] * len(eps),
        other_instructions=("open the drawer",),
        steps=300,  # 5 seeds pass every check below at 300 (AUROC >= 0.93); at 250 two miss the done head's TPR
        batch_size=32,
        progress=False,
        size=16,
        channels=8,
        features=32,
        hidden=64,
    )
    return model, time.process_time() - start


def test_the_critic_orders_a_successful_episode_reverses_a_reversed_one_and_knows_its_instruction(trained):
    model, seconds = trained
    held_out = [episode(np.random.default_rng(100 + k), True, k=k) for k in range(6)]
    q = evaluate_progress(model, held_out, [INSTRUCTION] * 6, wrong_instruction="open the drawer")
    assert q["voc"] >= 0.9, q
    assert q["voc_reversed"] <= -0.8, q
    assert q["final_progress_wrong"] < q["final_progress_right"] - 0.3, q
    assert q["stalled_abs_delta"] < 0.1, q
    # the done head: the flagged last frame found; at most the 2 frames before it (done_last=3 trains them as done)
    assert q["done_auroc"] >= 0.9 and q["done_tpr_at_0.5"] == 1.0 and q["done_fpr_at_0.5"] <= 2 / 12 + 1e-6, q
    assert seconds < 120


def test_every_frame_flagged_a_success_is_a_done_positive_not_only_the_last_ones():
    """A success held for several steps (an env that does not end at its success, or a person's labels) makes each
    of those frames a positive for the done head; without flags, a successful episode's last `done_last` frames are
    (an episode that ends at its success); a mismatched instruction is never done."""
    from robo_rl.rewards.progress import _sample

    rng = np.random.default_rng(0)
    held = episode(rng, True, k=0)
    held.records["success"][6:] = True  # succeeded at frame 6 and held it to the end (frame 12)
    ended = episode(rng, True, k=1)  # only its last frame flagged
    for ep, positives in ((held, set(range(6, 13))), (ended, {10, 11, 12})):
        pairs = _sample(
            [ep], [INSTRUCTION], (INSTRUCTION, "open the drawer"), ("top",), 400, np.random.default_rng(1), done_last=3
        )
        frames = pairs.b["top"].numpy()
        index = {ep.records["image/top"][j].tobytes(): j for j in range(len(ep) + 1)}
        seen = [index[f.tobytes()] for f in frames]
        right = np.array([t == INSTRUCTION for t in pairs.text])
        done = pairs.done.numpy() > 0.5
        assert {j for j, d in zip(seen, done, strict=True) if d} == positives & set(np.array(seen)[right]), ep
        assert not done[~right].any(), "a mismatched instruction is never done"
        assert all(d == (j in positives) for j, d, r in zip(seen, done, right, strict=True) if r)


def test_done_is_likely_at_the_end_of_a_success_only(trained):
    model, _ = trained
    rng = np.random.default_rng(7)
    ok, bad = episode(rng, True), episode(rng, False)
    s_ok = model.score_episode({"top": ok.records["image/top"]}, Task(INSTRUCTION))
    s_bad = model.score_episode({"top": bad.records["image/top"]}, Task(INSTRUCTION))
    assert s_ok.success_prob[-1] > 0.5 > s_ok.success_prob[0]
    assert s_bad.success_prob.max() < 0.5


def test_a_saved_critic_loads_back_exactly_and_a_wrong_folder_is_named(trained, tmp_path):
    model, _ = trained
    frames = {"top": episode(np.random.default_rng(3), True).records["image/top"]}
    model.save(tmp_path / "critic")
    again = load_model(tmp_path / "critic", "robo_rl.rewards.progress.ProgressCritic")
    a, b = model.score_episode(frames, Task(INSTRUCTION)), again.score_episode(frames, Task(INSTRUCTION))
    np.testing.assert_array_equal(a.progress, b.progress)
    np.testing.assert_array_equal(a.delta, b.delta)
    with pytest.raises(RewardModelError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    with pytest.raises(
        RewardModelError,
        match="holds a 'robo_rl.rewards.progress.ProgressCritic' reward model, "
        "not a 'robo_rl.rewards.classifier.SuccessClassifier' one",
    ):
        load_model(tmp_path / "critic", "robo_rl.rewards.classifier.SuccessClassifier")
    cfg = json.loads((tmp_path / "critic" / "reward_model.json").read_text())
    (tmp_path / "critic" / "reward_model.json").write_text(json.dumps({**cfg, "features": 48}))
    with pytest.raises(RewardModelError, match="weights of another architecture"):
        load_model(tmp_path / "critic")


def test_bad_frames_and_an_unknown_instruction(trained, caplog):
    model, _ = trained
    frames = episode(np.random.default_rng(4), True).records["image/top"]
    with pytest.raises(RewardModelError, match="missing \\['top'\\]"):
        model.score({"wrist": frames}, Task(INSTRUCTION))
    with pytest.raises(RewardModelError, match="must be uint8"):
        model.score({"top": frames.astype(np.float32)}, Task(INSTRUCTION))
    with caplog.at_level("WARNING"):
        model.score({"top": frames}, Task("move the square to the corners"))
    assert "nearest trained one is 'move the square to the corner'" in caplog.text


def test_the_siglip_backbone_runs_a_tiny_random_siglip_from_a_local_folder(tmp_path):
    from transformers import SiglipConfig, SiglipModel

    cfg = SiglipConfig(
        text_config={
            "vocab_size": 64,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 8,
        },
        vision_config={
            "image_size": 16,
            "patch_size": 8,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
        },
    )
    SiglipModel(cfg).save_pretrained(tmp_path / "siglip")
    rng = np.random.default_rng(0)
    eps = [episode(rng, True, k=k) for k in range(4)]
    model = train_progress_critic(
        eps,
        ("top",),
        [INSTRUCTION] * 4,
        steps=3,
        batch_size=8,
        progress=False,
        backbone="siglip",
        backbone_path=str(tmp_path / "siglip"),
        hidden=16,
    )
    tower = model.net.backbone.model
    assert not any(p.requires_grad for p in tower.parameters())  # frozen: only our heads train
    s = model.score_episode({"top": eps[0].records["image/top"]}, Task(INSTRUCTION))
    assert s.progress.shape == s.delta.shape == s.success_prob.shape == (13,)
    model.save(tmp_path / "critic")
    again = load_model(tmp_path / "critic")
    np.testing.assert_allclose(
        again.score_episode({"top": eps[0].records["image/top"]}, Task(INSTRUCTION)).delta, s.delta, atol=1e-6
    )
    with pytest.raises(RewardModelError, match="not a SigLIP model"):
        ProgressCritic(("top",), backbone="siglip", backbone_path=str(tmp_path / "critic"))


def test_helpers():
    assert hashed_words("Move the cube") == hashed_words("move the cube") and len(hashed_words("a b", length=4)) == 4
    assert spearman(np.arange(5.0), np.arange(5)) == pytest.approx(1.0)
    assert spearman(np.arange(5.0)[::-1], np.arange(5)) == pytest.approx(-1.0)


def test_robo_rl_reward_trains_and_evaluates_from_a_store_and_names_bad_arguments(tmp_path, capsys):
    from robo_rl.commands.common import MISSED_BARS
    from robo_rl.commands.reward import RewardUsageError, cmd_reward
    from robo_rl.data.datasets.io import save_store

    rng = np.random.default_rng(5)
    save_store([episode(rng, k % 2 == 0, k=k) for k in range(12)], tmp_path / "data")
    assert (
        cmd_reward(
            [
                "train",
                "kind=progress",
                f"data={tmp_path / 'data'}",
                f"out={tmp_path / 'critic'}",
                f"instruction={INSTRUCTION}",
                "steps=30",
            ]
        )
        == 0
    )
    assert load_model(tmp_path / "critic").instructions == (INSTRUCTION,)
    code = cmd_reward(["eval", f"model={tmp_path / 'critic'}", f"data={tmp_path / 'data'}"])
    report = json.loads((tmp_path / "critic" / "eval" / "report.json").read_text())
    assert code == (0 if report["voc"] >= 0.9 and report["voc_reversed"] <= -0.8 else MISSED_BARS), report
    # measured: 30 steps give VOC 0.96, reversed -0.71, AUROC 0.84; an untrained critic 1.0, 1.0 (both ways), 0.11
    assert report["episodes"] == 6 and report["voc"] >= 0.9 and report["voc_reversed"] <= -0.5, report
    md = (tmp_path / "critic" / "eval" / "report.md").read_text()
    assert "value-order correlation" in md and "done head on every frame the records flag: AUROC" in md
    assert report["done_auroc"] >= 0.7, report
    assert (tmp_path / "critic" / "eval" / "report.png").stat().st_size > 5000  # the curves
    assert (
        cmd_reward(
            ["relabel", f"model={tmp_path / 'critic'}", f"data={tmp_path / 'data'}", f"out={tmp_path / 'relabelled'}"]
        )
        == 0
    )
    from robo_rl.data.datasets.io import load_episodes

    before, after = (
        load_episodes(tmp_path / "data", progress=False),
        load_episodes(tmp_path / "relabelled", progress=False),
    )
    assert len(after) == len(before) == 12
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(new.records["extra/reward_env"], old.records["reward"])  # the env's, kept
        np.testing.assert_array_equal(new.records["image/top"], old.records["image/top"])
        assert new.records["reward"][0] == 0 and np.all(np.abs(new.records["reward"]) <= 2.0)
    assert not all(np.allclose(n.records["reward"], o.records["reward"]) for o, n in zip(before, after, strict=True))
    with pytest.raises(RewardUsageError, match="needs kind="):
        cmd_reward(["train", f"data={tmp_path / 'data'}", "out=x"])
    with pytest.raises(RewardUsageError, match="cameras \\['wrist'\\] are not in the data"):
        cmd_reward(["train", "kind=classifier", f"data={tmp_path / 'data'}", "out=x", "cameras=wrist"])
    with pytest.raises(RewardUsageError, match="data=/nowhere: /nowhere does not exist"):
        cmd_reward(["eval", f"model={tmp_path / 'critic'}", "data=/nowhere"])
    with pytest.raises(RewardUsageError, match="'epoch=3' is not one of"):
        cmd_reward(["train", "epoch=3"])
    with pytest.raises(RewardUsageError, match="gate_quantile=most: a number in \\(0, 1\\] or none"):
        cmd_reward(["train", "kind=classifier", f"data={tmp_path / 'data'}", "out=x", "gate_quantile=most"])


def test_a_retrain_runs_below_the_actors_cpu_priority_and_refuses_a_niceness_out_of_range(tmp_path):
    import subprocess
    import sys

    from robo_rl.commands.reward import RewardUsageError, cmd_reward

    # in a process of its own: niceness only goes up, and this test's worker must keep its own
    code = "import os; from robo_rl.commands.reward import at_least_nice as a; print(a(10), a(4), os.nice(0))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["10", "10", "10"]  # lowered to 10, then never raised back by a smaller request
    for bad, said in [
        ("nice=25", "nice=25: a retrain's CPU niceness is 0"),
        ("nice=low", "take whole numbers"),
        ("threads=0", "threads=0: a retrain needs at least one CPU thread"),
        ("mark_share=1", "mark_share=1: a share between 0 and 1 \\(exclusive\\), or none"),
        ("mark_share=lots", "mark_share=lots: a share between 0 and 1, or none"),
    ]:
        with pytest.raises(RewardUsageError, match=said):
            cmd_reward(["retrain", str(tmp_path), bad])
