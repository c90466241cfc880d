"""`robo-rl data`: record, inspect, convert; demonstrations for training from a dataset."""

import json

import numpy as np
import pytest

from robo_rl.cli import main
from robo_rl.config import ConfigError
from robo_rl.datasets.io import load_episodes
from robo_rl.demos import load_or_make_demos
from tests.test_pipeline import toy_config


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_record_inspect_and_convert_through_lerobot_and_back(tmp_path, capsys):
    store, lerobot, back = tmp_path / "store", tmp_path / "lerobot", tmp_path / "back"
    code, out, _ = run(capsys, "data", "record", str(store), "env=point_reach", "demos.num_episodes=6",
                       f"cache_dir={tmp_path}", "logger.progress=false")  # fmt: skip
    assert code == 0 and "recorded 6 episodes" in out
    code, out, _ = run(capsys, "data", "inspect", str(store), "json=true")
    summary = json.loads(out)
    assert summary["format"] == "store" and summary["partitions"]["demos"]["episodes"] == 6
    assert summary["partitions"]["demos"]["success_rate"] == 1.0
    assert run(capsys, "data", "convert", str(store), str(lerobot), "fps=10", "task=reach")[0] == 0
    assert run(capsys, "data", "convert", str(lerobot), str(back), "to=store")[0] == 0
    original, returned = load_episodes(store, progress=False), load_episodes(back, progress=False)
    assert [len(e) for e in original] == [len(e) for e in returned]
    for a, b in zip(original, returned, strict=True):
        np.testing.assert_array_equal(a.records["action_executed"], b.records["action_executed"])
        np.testing.assert_array_equal(a.records["state"][:-1], b.records["state"][:-1])  # LeRobot keeps no final obs
        assert a.success == b.success and b.partition == "demos"
    code, _, err = run(capsys, "data", "convert", str(store), str(lerobot))
    assert code == 2 and str(lerobot) in err and ("not empty" in err or "exists" in err)


def test_a_run_folder_is_inspected_by_partition_with_interventions(tmp_path, capsys):
    from robo_rl.storage import SegmentStore
    from tests.test_storage import FIELDS, episode

    store = SegmentStore(tmp_path / "run" / "replay" / "online", FIELDS)
    eps = [episode(0), episode(1, intervention_steps=[2, 3]), episode(2, end="time_limit")]
    for ep in eps:
        store.write(ep, np.full(6, "actor-0", dtype=object))
    code, out, _ = run(capsys, "data", "inspect", str(tmp_path / "run"), "json=true")
    parts = json.loads(out)["partitions"]
    assert parts["online"]["episodes"] == 2 and parts["interventions"]["episodes"] == 1
    assert parts["interventions"]["intervention_steps"] == 2 and parts["online"]["truncated"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["data", "inspect", "/nonexistent/x"], "does not exist"),
    (["data", "frobnicate"], "unknown data command"),
    (["data", "convert", "only-one"], "usage: robo-rl data convert"),
])  # fmt: skip
def test_bad_data_commands_get_one_line_errors(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_training_takes_demonstrations_from_a_dataset_and_refuses_one_of_another_layout(tmp_path, capsys):
    store = tmp_path / "demos"
    run(capsys, "data", "record", str(store), "env=point_reach", "demos.num_episodes=4", f"cache_dir={tmp_path}",
        "logger.progress=false")  # fmt: skip
    batch, path, _ = load_or_make_demos(toy_config(tmp_path, f"demos.path={store}"), progress=False)
    assert path == store and (batch["step"] == 0).sum() == 4
    with pytest.raises(ConfigError, match="holds state 4-d, action 2-d, cameras: none; this env needs state 4-d, "
                                          "action 2-d, cameras: top 8×8"):  # fmt: skip
        load_or_make_demos(toy_config(tmp_path, f"demos.path={store}", "+env.camera=true"), progress=False)
