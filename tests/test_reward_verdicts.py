"""`robo-rl reward eval` gives a verdict a script can read: PASS/FAIL beside each bar and exit status MISSED_BARS when
a model misses one; the critic's wrong-instruction probe is a measurement, not a warning; and the README's recipe
records reward data whose successful episodes go on past their first success frame."""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

from robo_rl.cli import main
from robo_rl.commands.common import MISSED_BARS
from robo_rl.data.datasets.io import load_episodes, save_store
from tests.test_reward_classifier import SIZE, _episodes

INSTRUCTION = "put the square in the corner"
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("verdicts") / "data"
    save_store(_episodes(16), path, progress=False)  # test_reward_classifier's: a square reaching a corner or not
    return path


def _classifier(out: Path, trained: bool, store: Path) -> Path:
    from robo_rl.rewards.classifier import SuccessClassifier
    from robo_rl.rewards.classifier_fit import train_classifier

    torch.manual_seed(0)
    torch.set_num_threads(1)
    arch = {"channels": 4, "features": 8, "hidden": 16, "resize": None, "kernels": [3, 3], "strides": [2, 1]}
    if trained:
        episodes = load_episodes(store, progress=False)
        model, _ = train_classifier(episodes, ["top"], epochs=8, batch_size=64, lr=3e-3, progress=False, **arch)
    else:  # an untrained network ranks frames at random
        model = SuccessClassifier(("top",), image_sizes={"top": [SIZE, SIZE]}, **arch)
    return model.save(out)


def test_a_classifier_that_misses_its_bar_says_fail_and_exits_missed_bars(store, tmp_path, capsys):
    model = _classifier(tmp_path / "untrained", trained=False, store=store)
    assert main(["reward", "eval", f"model={model}", f"data={store}"]) == MISSED_BARS
    out = capsys.readouterr().out
    assert re.search(r"frame AUROC \*\*0\.\d+\*\* \(wanted ≥ 0\.98\): FAIL", out), out
    assert "verdict: FAIL" in out
    report = json.loads((model / "eval" / "report.json").read_text())
    assert report["passed"] is False and report["bars"][0]["name"] == "frame AUROC"
    assert "FAIL" in (model / "eval" / "report.md").read_text()


def test_a_classifier_that_meets_its_bar_says_pass_and_exits_0(store, tmp_path, capsys):
    model = _classifier(tmp_path / "trained", trained=True, store=store)
    assert main(["reward", "eval", f"model={model}", f"data={store}"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"frame AUROC \*\*(0\.9[89]\d|1\.000)\*\* \(wanted ≥ 0\.98\): PASS", out), out
    assert "verdict: PASS" in out and json.loads((model / "eval" / "report.json").read_text())["passed"] is True


def test_the_critics_wrong_instruction_probe_warns_nothing_and_its_bars_decide_the_exit(
    store, tmp_path, capsys, caplog
):
    from robo_rl.rewards.progress import ProgressCritic

    torch.manual_seed(0)
    critic = ProgressCritic(("top",), instructions=(INSTRUCTION,), size=16, channels=4, features=8, hidden=16)
    critic.save(tmp_path / "critic")
    with caplog.at_level(logging.WARNING):
        code = main(["reward", "eval", f"model={tmp_path / 'critic'}", f"data={store}", "wrong_instruction=open it"])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    report = json.loads((tmp_path / "critic" / "eval" / "report.json").read_text())
    met = report["voc"] >= 0.9 and report["voc_reversed"] <= -0.8
    assert code == (0 if met else MISSED_BARS) and report["passed"] is met
    out = capsys.readouterr().out
    assert re.search(r"value-order correlation .* \(wanted ≥ 0\.9\): (PASS|FAIL)", out), out
    assert re.search(r"reversed .* \(wanted ≤ −0\.8\): (PASS|FAIL)", out), out
    # an untrained critic's order both ways is the same: it cannot meet both bars
    assert not met and code == MISSED_BARS


def test_the_missed_bars_status_is_neither_success_nor_a_usage_error():
    assert MISSED_BARS not in (0, 1, 2, 130)
    from robo_rl.commands.help import command_help

    assert f"exit status {MISSED_BARS}" in command_help("reward")


def _readme_reward_recipe() -> list[str]:
    """The `data record` lines of the README's "Learned rewards" recipe."""
    section = README.read_text().split("## Learned rewards", 1)[1].split("\n## ", 1)[0]
    return [line.split("#")[0].strip() for line in section.splitlines() if "robo-rl data record" in line]


def test_the_readme_recipe_records_success_frames_past_the_first(tmp_path, capsys):
    lines = _readme_reward_recipe()
    assert lines, "the Learned rewards recipe records its data with robo-rl data record"
    tokens = shlex.split(lines[0])  # uv run robo-rl data record <dst> overrides...
    args = [a for a in tokens[tokens.index("record") + 2 :] if not a.startswith("demos.num_episodes=")]
    dst = tmp_path / "demos"
    assert main(["data", "record", str(dst), *args, "demos.num_episodes=1", "logger.progress=false"]) == 0
    (episode,) = load_episodes(dst, progress=False)
    assert episode.success and "image/front" in episode.records
    # a classifier's positives: the success holds for more than its first frame
    assert int(np.asarray(episode.records["success"]).sum()) >= 2
