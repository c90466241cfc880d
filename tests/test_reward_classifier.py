"""The success classifier reward model: labelling, training on synthetic episodes, saving, checks, AUROC."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from robo_rl.data.datasets import Episode
from robo_rl.rewards.base import CONFIG_FILE, RewardModelError, Task, load_model, model_class
from robo_rl.rewards.classifier import SuccessClassifier
from robo_rl.rewards.classifier_fit import (
    auroc,
    evaluate_classifier,
    label_frames,
    sampling_weights,
    train_classifier,
)

CLASSIFIER, PROGRESS = "robo_rl.rewards.classifier.SuccessClassifier", "robo_rl.rewards.progress.ProgressCritic"
SIZE, T = 16, 15  # 16×16 frames; T steps → T + 1 records
SMALL = {"channels": 8, "features": 16, "hidden": 32, "resize": None, "kernels": [3, 3], "strides": [2, 1]}


def _episode(rng: np.random.Generator, episode_id: int, success: bool) -> Episode:
    """A dark noisy scene; a bright 3×3 square moves from the top-left towards the bottom-right target region
    (top-left corner at rows/cols ≥ 11). Successful episodes reach it at step 12 and stay; failed ones stop beside it
    (one coordinate at the target, the other short of it)."""
    start = rng.integers(0, 5, size=2)
    end = np.array([12, 12]) if success else np.array([12, rng.integers(3, 8)])[rng.permutation(2)]
    frames = np.clip(rng.normal(20, 6, size=(T + 1, SIZE, SIZE, 3)), 0, 255)
    for t in range(T + 1):
        r, c = np.floor(start + (end - start) * min(t, 12) / 12).astype(int)
        frames[t, r : r + 3, c : c + 3] = rng.normal(210, 10, size=(3, 3, 3))
    flags = np.zeros(T + 1, bool)
    if success:
        flags[-3:] = True
    records = {
        "image/top": np.clip(frames, 0, 255).astype(np.uint8),
        "success": flags,
        "reward": flags.astype(np.float32),
        "step": np.arange(T + 1, dtype=np.int32),
        "episode_id": np.full(T + 1, episode_id, np.int64),
        "ended_by": np.zeros(T + 1, np.int8),
        "intervention": np.zeros(T + 1, bool),
    }
    return Episode(records)


def _episodes(n: int, seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    return [_episode(rng, i, success=i % 2 == 0) for i in range(n)]


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    episodes = _episodes(40)
    model, report = train_classifier(
        episodes,
        ["top"],
        epochs=10,
        batch_size=64,
        lr=3e-3,
        seed=0,
        progress=False,
        instructions=["put the square in the corner"],
        **SMALL,
    )
    return episodes, model, report


def test_label_frames_flagged_positives_margin_left_out_failures_negative():
    episodes = _episodes(2)  # 0 succeeds, 1 fails
    human = ({"top": np.zeros((4, SIZE, SIZE, 3), np.uint8)}, np.array([1, 0, 1, 0], np.float32))
    frames, labels, index = label_frames(episodes, ["top"], margin=2, human_labelled=human)
    ok = index == 0  # 16 records: 11 negatives, 2 left out, 3 positives
    assert labels[ok].tolist() == [0.0] * 11 + [1.0] * 3
    np.testing.assert_array_equal(frames["top"][ok], episodes[0].records["image/top"][np.r_[0:11, 13:16]])
    assert (index == 1).sum() == T + 1 and not labels[index == 1].any()
    assert labels[index == -1].tolist() == [1, 0, 1, 0] and frames["top"].shape == (14 + 16 + 4, SIZE, SIZE, 3)


def test_a_persons_marks_get_their_share_of_their_class_in_every_batch():
    """Each class half of a batch; with `human_share`, the marked frames of a class that share of its half (four
    marks beside a thousand recorded failures would otherwise be one draw in 500)."""
    labels = np.r_[np.ones(100), np.zeros(1000), np.zeros(4), np.ones(2)].astype(np.float32)
    human = np.r_[np.zeros(1100, bool), np.ones(6, bool)]
    alike = sampling_weights(labels, human).numpy()
    assert alike.dtype == np.float64 and np.isclose(alike.sum(), 1.0)
    assert np.isclose(alike[labels > 0.5].sum(), 0.5) and np.isclose(alike[1100:1104].sum(), 0.5 * 4 / 1004)
    shared = sampling_weights(labels, human, human_share=0.25).numpy()
    assert np.isclose(shared[labels > 0.5].sum(), 0.5) and np.isclose(shared[labels < 0.5].sum(), 0.5)
    assert np.isclose(shared[1100:1104].sum(), 0.125) and np.isclose(shared[1104:].sum(), 0.125)
    assert np.allclose(shared[1100:1104], 0.125 / 4) and np.allclose(shared[100:1100], 0.375 / 1000)
    draws = torch.multinomial(
        torch.from_numpy(shared), 20000, replacement=True, generator=torch.Generator().manual_seed(0)
    )
    assert abs(float((draws >= 1100).float().mean()) - 0.25) < 0.02
    # a class with no marks, or with nothing but marks, is drawn as before
    only_failures_marked = sampling_weights(labels[:1104], human[:1104], human_share=0.25).numpy()
    assert np.allclose(only_failures_marked[:100], 0.5 / 100)
    assert np.allclose(sampling_weights(labels[1100:], human[1100:], 0.25).numpy(), [0.125] * 4 + [0.25] * 2)
    # without human_share the weights are the float32 ones training always drew with (the same batches as before)
    y = torch.from_numpy(labels)
    before = torch.where(y > 0.5, 0.5 / 102, 0.5 / 1004).double()
    assert torch.equal(sampling_weights(labels, human), before)


def test_a_human_share_outside_zero_to_one_is_refused(tmp_path):
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(RewardModelError, match=f"human_share must be in \\(0, 1\\) or None, got {bad}"):
            train_classifier(_episodes(2), ["top"], epochs=1, human_share=bad, progress=False)


def test_label_frames_follow_per_frame_success_flags():
    """A success held for several frames: exactly the flagged frames are positives (never frames before the success,
    which look almost done), and the margin before the first one is left out."""
    flags = np.zeros(T + 1, bool)
    flags[6:] = True  # succeeds at record 6 and holds to the end
    episode = Episode({**_episodes(1)[0].records, "success": flags})
    frames, labels, _ = label_frames([episode], ["top"], margin=2)
    assert labels.tolist() == [0.0] * 4 + [1.0] * 10  # records 4, 5 (the margin) left out
    np.testing.assert_array_equal(frames["top"], episode.records["image/top"][np.r_[0:4, 6:16]])
    _, labels0, _ = label_frames([episode], ["top"], margin=0)
    assert labels0.tolist() == [0.0] * 6 + [1.0] * 10
    flags[12:] = False  # the success is lost at 12 (a slipping cube): its frames still look done, the later do not
    lost = Episode({**episode.records, "success": flags})
    assert not lost.success
    _, labels_lost, _ = label_frames([lost], ["top"], margin=2)
    assert labels_lost.tolist() == [0.0] * 4 + [1.0] * 6 + [0.0] * 4


def test_training_separates_success_and_splits_by_episode(trained):
    episodes, model, report = trained
    train, val = set(report["train_episode_indices"]), set(report["val_episode_indices"])
    assert not train & val and train | val == set(range(len(episodes)))
    assert report["val_episodes"] == 8 and report["successful_episodes"] == 4  # 20% of each outcome held out
    assert report["val_frames"] == 4 * 14 + 4 * 16 and report["train_positives"] == 16 * 3
    assert report["auroc"] >= 0.95, report
    assert report["episode_fpr"] == 0 and report["frame_fpr"] <= 0.01, report
    assert report["threshold"] == model.threshold >= 0.5
    assert all(type(report[k]) is float for k in ("auroc", "threshold", "frame_fpr", "episode_fpr", "seconds"))
    again = evaluate_classifier(model, [episodes[i] for i in sorted(val)])
    assert again["auroc"] == report["auroc"] and again["episode_fpr"] == report["episode_fpr"]


def _frame(rng: np.random.Generator, background: float) -> np.ndarray:
    """The square at the target as in every success, on a background brighter than any episode's."""
    frame = np.clip(rng.normal(background, 6, size=(SIZE, SIZE, 3)), 0, 255)
    frame[12:15, 12:15] = rng.normal(210, 10, size=(3, 3, 3))
    return np.clip(frame, 0, 255).astype(np.uint8)


def _ungated(model: SuccessClassifier, frames: dict) -> np.ndarray:
    gate, model.gate = model.gate, None
    try:
        return model.score(frames, _task_of(model)).success_prob
    finally:
        model.gate = gate


def _task_of(model: SuccessClassifier) -> Task:
    return Task(model.instructions[0])


def test_novelty_gate_keeps_held_out_successes_and_damps_a_success_unlike_any_seen(trained):
    """The frames an RL policy farms a classifier with are ones it never saw labelled: a frame the head calls a success
    but whose features are far from every training success loses its probability; held-out successes keep theirs."""
    episodes, model, report = trained
    assert report["gate_quantile"] == 0.99 and report["bank_frames"] == report["train_positives"] == 48
    assert report["val_positives_within_gate"] == 1.0 and model.gate == report["gate"] > 0
    held = [episodes[i] for i in report["val_episode_indices"] if episodes[i].success]
    frames = {"top": np.concatenate([ep.records["image/top"][ep.records["success"]] for ep in held])}
    scores = model.score(frames, _task_of(model))
    assert (scores.extra["novelty"] <= model.gate).all()
    np.testing.assert_allclose(scores.success_prob, _ungated(model, frames), rtol=1e-5)  # untouched within the gate
    unseen = {"top": np.stack([_frame(np.random.default_rng(k), background=35) for k in range(4)])}
    head, gated = _ungated(model, unseen), model.score(unseen, _task_of(model))
    assert (head > model.threshold).all(), head  # the head alone would end the episode on these
    assert (gated.extra["novelty"] > 2 * model.gate).all() and (gated.success_prob < 0.01).all(), gated
    np.testing.assert_allclose(gated.success_prob, head * (model.gate / gated.extra["novelty"]) ** 8, rtol=1e-5)


def test_novelty_gate_saves_with_the_model_and_can_be_left_out(trained, tmp_path):
    episodes, model, _ = trained
    frames = {"top": np.concatenate([episodes[0].records["image/top"], _frame(np.random.default_rng(0), 35)[None]])}
    before = model.score(frames, _task_of(model))
    loaded = load_model(model.save(tmp_path / "gated"), CLASSIFIER)
    assert loaded.gate == model.gate and loaded.arch["bank_size"] == 48
    after = loaded.score(frames, _task_of(loaded))
    np.testing.assert_array_equal(after.success_prob, before.success_prob)
    np.testing.assert_array_equal(after.extra["novelty"], before.extra["novelty"])
    plain, report = train_classifier(
        episodes[:10], ["top"], epochs=1, seed=0, progress=False, gate_quantile=None, **SMALL
    )
    assert plain.gate is None and "bank" not in plain.net and "gate" not in report
    assert plain.score(frames, Task()).extra == {}
    with pytest.raises(RewardModelError, match="gate_quantile must be in \\(0, 1\\] or None, got 1.5"):
        train_classifier(episodes[:10], ["top"], epochs=1, progress=False, gate_quantile=1.5, **SMALL)


def test_save_load_round_trip_and_bad_folders(tmp_path):
    torch.manual_seed(0)
    model = SuccessClassifier(["top"], ["pick"], threshold=0.7, **SMALL | {"image_sizes": {"top": [SIZE, SIZE]}})
    frames = {"top": _episodes(1)[0].records["image/top"]}
    before = model.score(frames, Task("pick")).success_prob
    loaded = load_model(model.save(tmp_path / "m"), CLASSIFIER)
    assert isinstance(loaded, SuccessClassifier) and loaded.threshold == 0.7
    assert json.loads((tmp_path / "m" / CONFIG_FILE).read_text())["_target_"] == CLASSIFIER
    assert before.dtype == np.float32 and before.shape == (T + 1,)
    np.testing.assert_array_equal(loaded.score(frames, Task("pick")).success_prob, before)

    with pytest.raises(RewardModelError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    other = tmp_path / "other"
    other.mkdir()
    (other / CONFIG_FILE).write_text(json.dumps({"_target_": PROGRESS, "cameras": ["top"]}))
    with pytest.raises(RewardModelError, match=f"holds a '{PROGRESS}' reward model, not a '{CLASSIFIER}' one"):
        load_model(other, CLASSIFIER)
    (other / CONFIG_FILE).write_text(json.dumps({"kind": "progress", "cameras": ["top"]}))  # a folder of before
    with pytest.raises(RewardModelError, match=f"holds a '{PROGRESS}' reward model, not a '{CLASSIFIER}' one"):
        load_model(other, CLASSIFIER)
    config = json.loads((tmp_path / "m" / CONFIG_FILE).read_text())
    (tmp_path / "m" / CONFIG_FILE).write_text(json.dumps(config | {"channels": 16}))
    with pytest.raises(RewardModelError, match="another architecture"):
        load_model(tmp_path / "m")


def test_a_folder_saved_before_target_named_the_class_loads_by_its_kind(tmp_path):
    torch.manual_seed(0)
    model = SuccessClassifier(["top"], ["pick"], threshold=0.7, **SMALL | {"image_sizes": {"top": [SIZE, SIZE]}})
    frames = {"top": _episodes(1)[0].records["image/top"]}
    config = json.loads((model.save(tmp_path / "old") / CONFIG_FILE).read_text())
    old = {"kind": "classifier", **{k: v for k, v in config.items() if k != "_target_"}}  # what such a folder holds
    (tmp_path / "old" / CONFIG_FILE).write_text(json.dumps(old))
    for expected in (None, CLASSIFIER, "classifier"):
        loaded = load_model(tmp_path / "old", expected)
        assert isinstance(loaded, SuccessClassifier) and loaded.threshold == 0.7
        np.testing.assert_array_equal(
            loaded.score(frames, Task("pick")).success_prob, model.score(frames, Task("pick")).success_prob
        )


@pytest.mark.parametrize(
    ("named", "suggestion"),
    [
        ("robo_rl.rewards.classifier.SucessClassifier", CLASSIFIER),  # a typo in the class
        ("robo_rl.reward.classifier.SuccessClassifier", CLASSIFIER),  # a typo in the module
        ("ProgressCritic", PROGRESS),  # the class without its module
        ("clasifier", CLASSIFIER),  # an old kind, misspelt
    ],
)
def test_an_unknown_class_is_refused_with_the_nearest_known_one(tmp_path, named, suggestion):
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"_target_": named, "cameras": ["top"]}))
    with pytest.raises(RewardModelError, match=f"unknown reward model class '{named}'; did you mean '{suggestion}'"):
        load_model(tmp_path)
    with pytest.raises(RewardModelError, match=f"unknown reward model class '{named}'; did you mean '{suggestion}'"):
        model_class(named)


def test_a_class_that_is_no_reward_model_is_refused(tmp_path):
    with pytest.raises(RewardModelError, match="'robo_rl.rewards.base.Task' is not a reward model"):
        model_class("robo_rl.rewards.base.Task")
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"cameras": ["top"]}))
    with pytest.raises(RewardModelError, match="does not name its reward model class"):
        load_model(tmp_path)


def test_unknown_camera_and_float_frames_are_refused():
    model = SuccessClassifier(["top"], **SMALL | {"image_sizes": {"top": [SIZE, SIZE]}})
    with pytest.raises(RewardModelError, match="'top'.*'wrist'"):
        model.score({"wrist": np.zeros((2, SIZE, SIZE, 3), np.uint8)}, Task())
    with pytest.raises(RewardModelError, match="camera top.*float32"):
        model.score({"top": np.zeros((2, SIZE, SIZE, 3), np.float32)}, Task())
    with pytest.raises(RewardModelError, match=r"camera top: frames are \(20, 20\)"):
        model.score({"top": np.zeros((2, 20, 20, 3), np.uint8)}, Task())
    resized = SuccessClassifier(
        ["top"], channels=4, features=8, hidden=8, resize=[SIZE, SIZE], kernels=[3, 3], strides=[2, 1]
    )
    assert resized.score({"top": np.zeros((3, 40, 30, 3), np.uint8)}, Task()).success_prob.shape == (3,)


def test_unknown_instruction_warns_with_the_nearest_and_still_scores(caplog):
    model = SuccessClassifier(
        ["top"], ["put the square in the corner", "open the drawer"], **SMALL | {"image_sizes": {"top": [SIZE, SIZE]}}
    )
    with caplog.at_level(logging.WARNING, logger="robo_rl.rewards.base"):
        scores = model.score({"top": np.zeros((2, SIZE, SIZE, 3), np.uint8)}, Task("put the square in a corner"))
    assert scores.success_prob.shape == (2,)
    assert "put the square in a corner" in caplog.text and "'put the square in the corner'" in caplog.text


def test_auroc_matches_pairwise_count_with_ties():
    rng = np.random.default_rng(3)
    scores, labels = rng.integers(0, 5, 40).astype(np.float32), rng.random(40) < 0.4
    pos, neg = scores[labels], scores[~labels]
    brute = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    assert auroc(scores, labels) == pytest.approx(brute)
    assert auroc([0.1, 0.9], [0, 1]) == 1.0 and np.isnan(auroc([0.1, 0.2], [0, 0]))


class _ScriptedSuccessEnv:
    """Success at the steps listed in `success`, never terminating on it; truncated after `limit` steps."""

    class action_space:  # noqa: N801 - stands in for a gymnasium Box
        shape = (2,)

    def __init__(self, success: set[int], limit: int = 30) -> None:
        self.success, self.limit, self.t = success, limit, 0

    def reset(self, seed=None):
        self.t = 0
        return {"state": np.zeros(1, np.float32), "images": {}}, {}

    def step(self, action):
        self.t += 1
        info = {"success": self.t in self.success, "action_executed": action, "action_policy": action}
        return {"state": np.full(1, self.t, np.float32), "images": {}}, 0.0, False, self.t >= self.limit, info


@pytest.mark.parametrize(
    "success, hold, steps, succeeded",
    [
        (set(range(5, 31)), 0, 30, True),  # hold 0: the env alone ends the episode (here at its time limit)
        (set(range(5, 31)), 3, 8, True),  # held 3 steps past the first success (step 5), ended there
        ({5, 6}, 3, 6, True),  # lost at step 7: ends at step 6, its last success frame
        (set(), 3, 30, False),  # never: the time limit ends it, as without a hold
    ],
)
def test_rollout_episode_holds_a_success_and_ends_where_it_is_lost(success, hold, steps, succeeded):
    from robo_rl.data.demos import rollout_episode

    records, ok = rollout_episode(
        _ScriptedSuccessEnv(success), lambda obs: np.zeros(2, np.float32), 0, 0, hold_success=hold
    )
    assert ok is succeeded and len(records) == steps + 1
    assert records[-1]["success"] is succeeded
    assert records[-1]["terminated"] is (succeeded and hold > 0) and not any(r["terminated"] for r in records[:-1])
