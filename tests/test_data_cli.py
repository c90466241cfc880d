"""`robo-rl data`: record, inspect, convert; demonstrations for training from a dataset."""

import json

import numpy as np
import pytest

from robo_rl.cli import main
from robo_rl.config import ConfigError
from robo_rl.data.datasets.io import load_episodes
from robo_rl.data.demos import load_or_make_demos
from tests.test_pipeline import toy_config


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_record_inspect_and_convert_through_lerobot_and_back(tmp_path, capsys):
    store, lerobot, back = tmp_path / "store", tmp_path / "lerobot", tmp_path / "back"
    code, out, _ = run(
        capsys,
        "data",
        "record",
        str(store),
        "env=point_reach",
        "experiment=rlpd",
        "demos.num_episodes=6",
        f"cache_dir={tmp_path}",
        "logger.progress=false",
    )
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
    from robo_rl.data.storage import SegmentStore
    from tests.test_storage import FIELDS, episode

    store = SegmentStore(tmp_path / "run" / "replay" / "online", FIELDS)
    eps = [episode(0), episode(1, intervention_steps=[2, 3]), episode(2, end="time_limit")]
    for ep in eps:
        store.write(ep, np.full(6, "actor-0", dtype=object))
    code, out, _ = run(capsys, "data", "inspect", str(tmp_path / "run"), "json=true")
    parts = json.loads(out)["partitions"]
    assert parts["online"]["episodes"] == 2 and parts["interventions"]["episodes"] == 1
    assert parts["interventions"]["intervention_steps"] == 2 and parts["online"]["truncated"] == 1
    code, out, _ = run(capsys, "data", "inspect", str(tmp_path / "run"))  # the same, for a person to read
    online = next(line for line in out.splitlines() if line.strip().startswith("online"))
    assert code == 0 and online.endswith("ended by env 1, time_limit 1"), online  # not a Python dict


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["data", "inspect", "/nonexistent/x"], "does not exist"),
        (["data", "frobnicate"], "unknown data command"),
        (["data", "convert", "only-one"], "usage: robo-rl data convert"),
    ],
)
def test_bad_data_commands_get_one_line_errors(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_recording_on_a_robot_env_with_no_scripted_expert_is_refused_before_the_robot_is_opened(
    tmp_path, capsys, monkeypatch
):
    from hardware.env import ArmEnv

    def refuse(*args, **kwargs):
        pytest.fail("the robot env was built: that opens the hardware (here: a serial port)")

    monkeypatch.setattr(ArmEnv, "__init__", refuse)
    code, _, err = run(capsys, "data", "record", str(tmp_path / "demos"), "env=so101", f"cache_dir={tmp_path}")
    assert code == 2 and "no scripted expert" in err and "robo-rl record" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "demos").exists()


def test_training_takes_demonstrations_from_a_dataset_and_refuses_one_of_another_layout(tmp_path, capsys):
    store = tmp_path / "demos"
    run(
        capsys,
        "data",
        "record",
        str(store),
        "env=point_reach",
        "experiment=rlpd",
        "demos.num_episodes=4",
        f"cache_dir={tmp_path}",
        "logger.progress=false",
    )
    batch, path, _ = load_or_make_demos(toy_config(tmp_path, f"demos.path={store}"), progress=False)
    assert path == store and (batch["step"] == 0).sum() == 4
    with pytest.raises(
        ConfigError,
        match="holds state 4-d, action 2-d, cameras: none; this env needs state 4-d, action 2-d, cameras: top 8×8",
    ):
        load_or_make_demos(toy_config(tmp_path, f"demos.path={store}", "env.camera=true"), progress=False)


def state_only_run(run_dir, episodes=40, seed=0):
    """A run folder as the learner leaves it (replay/online segments of several actors), written directly."""
    from robo_rl.data.learner_replay import online_store_root
    from robo_rl.data.schema import ENDED_BY_CODES, step_fields
    from robo_rl.data.storage import SegmentStore

    fields, rng = step_fields(6, 3, {}), np.random.default_rng(seed)
    store = SegmentStore(online_store_root(run_dir), fields)
    for first in range(0, episodes, 8):  # a segment holds 8 episodes
        eps = []
        for e in range(first, min(first + 8, episodes)):
            n = int(rng.integers(3, 13))
            r = {k: np.zeros((n + 1, *s), d) for k, (s, d) in fields.items()}
            r["episode_id"][:], r["step"][:] = e, np.arange(n + 1)
            r["state"][:] = rng.standard_normal((n + 1, 6))
            r["action_executed"][1:] = rng.uniform(-1, 1, (n, 3))
            r["action_policy"][1:] = rng.uniform(-1, 1, (n, 3))
            r["reward"][1:] = rng.standard_normal(n)
            r["intervention"][1:] = rng.random(n) < 0.2
            end = "env" if e % 3 else "time_limit"
            r["terminated" if end == "env" else "truncated"][-1] = True
            r["ended_by"][-1], r["success"][-1] = ENDED_BY_CODES[end], end == "env"
            eps.append(r)
        batch = {k: np.concatenate([r[k] for r in eps]) for k in fields}
        store.write(batch, np.array([f"actor-{e % 2}" for e in batch["episode_id"]], dtype=object))
    return run_dir


def test_converting_a_run_folder_gives_a_lerobot_dataset_frame_for_frame_with_one_progress_bar(
    tmp_path, capsys, caplog
):
    import logging
    import re

    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset")
    run_dir, dst = state_only_run(tmp_path / "run"), tmp_path / "lerobot"
    code, out, err = run(capsys, "data", "convert", str(run_dir), str(dst))
    assert code == 0 and "wrote 40 episodes" in out
    text = out + err
    assert "Traceback" not in text and "torchcodec" not in text and "Svt[" not in text
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not logged, logged[0][:300]  # e.g. lerobot's torchcodec fallback with its 90-line traceback
    bars = {m.group(1) for m in re.finditer(r"(?:^|[\r\n])([^\r\n:|]+): *\d+%\|", text)}
    assert bars == {"export lerobot"}, bars  # one bar, none of the `datasets` library's per-episode ones

    episodes = load_episodes(run_dir, progress=False)
    ds = lerobot_dataset.LeRobotDataset("local/robo_rl", root=dst, video_backend="pyav")
    assert ds.num_episodes == 40 and ds.num_frames == sum(len(e) for e in episodes) and ds.fps == 10
    cols = ds.hf_dataset.with_format("numpy")[:]
    row = 0
    for index, ep in enumerate(episodes):
        r, n = ep.records, len(ep)
        rows = slice(row, row + n)
        assert np.all(cols["episode_index"][rows] == index)
        np.testing.assert_array_equal(cols["frame_index"][rows], np.arange(n))
        np.testing.assert_array_equal(cols["index"][rows], np.arange(row, row + n))
        np.testing.assert_allclose(cols["timestamp"][rows], np.arange(n) / 10, atol=1e-6)
        np.testing.assert_array_equal(cols["observation.state"][rows], r["state"][:-1])
        np.testing.assert_array_equal(cols["action"][rows], r["action_executed"][1:])
        np.testing.assert_array_equal(cols["complementary_info.action_policy"][rows], r["action_policy"][1:])
        np.testing.assert_array_equal(cols["next.reward"][rows], r["reward"][1:])
        np.testing.assert_array_equal(cols["next.terminated"][rows], r["terminated"][1:])
        np.testing.assert_array_equal(cols["next.truncated"][rows], r["truncated"][1:])
        np.testing.assert_array_equal(cols["complementary_info.is_intervention"][rows], r["intervention"][1:])
        np.testing.assert_array_equal(cols["complementary_info.ended_by"][rows], r["ended_by"][1:])
        item = ds[row + n - 1]  # lerobot's own per-item path agrees
        assert int(item["episode_index"]) == index and item["task"] == "robo_rl episode"
        np.testing.assert_array_equal(item["observation.state"].numpy(), r["state"][-2])
        row += n
    states = np.concatenate([e.records["state"][:-1] for e in episodes])
    np.testing.assert_allclose(ds.meta.stats["observation.state"]["mean"], states.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ds.meta.stats["observation.state"]["max"], states.max(0))
