"""LeRobotDataset v3 export/import through the installed `lerobot` package."""

from __future__ import annotations

import numpy as np
import pytest

from robo_rl.data.datasets import Episode
from robo_rl.data.datasets.lerobot_v3 import export_lerobot, import_lerobot
from robo_rl.data.schema import ENDED_BY_CODES, check_step_batch, step_fields

FPS = 10
CAMS = {"front": (32, 32), "wrist": (32, 32)}
STATE_DIM, ACTION_DIM = 3, 2
# (episode id, transitions, terminated, partition, intervention steps, nonzero base action, instruction)
SPECS = [
    (10, 5, True, "online", (), False, "pick the red cube"),
    (11, 4, False, "demos", (), True, "pick the blue cube"),
    (12, 6, True, "interventions", (2, 3), False, None),
]


@pytest.fixture(scope="module")
def LeRobotDataset():  # noqa: N802 (the class it gives)
    """lerobot's dataset class, imported by the tests that use it: its import takes about 9 s on a small CPU, which
    every pytest worker would otherwise pay while collecting."""
    return pytest.importorskip("lerobot.datasets.lerobot_dataset").LeRobotDataset


def flat_image(value: int, cam: int) -> np.ndarray:
    """A flat colour (video codecs keep those nearly exact), distinct per frame and camera."""
    return np.broadcast_to(np.array([value, 255 - value, 60 + 100 * cam], np.uint8), (32, 32, 3)).copy()


def make_episode(
    ep_id: int, n: int, terminated: bool, partition: str, interventions, with_base: bool, instruction=None
) -> Episode:
    fields = step_fields(STATE_DIM, ACTION_DIM, CAMS)
    r = {name: np.zeros((n + 1, *shape), dtype) for name, (shape, dtype) in fields.items()}
    t = np.arange(n + 1)
    r["episode_id"][:] = ep_id
    r["step"][:] = t
    r["state"][:] = ep_id + 0.25 * np.arange((n + 1) * STATE_DIM).reshape(n + 1, STATE_DIM)
    r["action_executed"][1:] = -0.5 + 0.1 * np.arange(n * ACTION_DIM).reshape(n, ACTION_DIM) / n
    r["action_policy"][1:] = r["action_executed"][1:]
    for k in interventions:
        r["intervention"][k] = True
        r["action_policy"][k] = 0.75  # the human overrode this proposal
    if with_base:
        r["action_base"][1:] = 0.125
    r["reward"][1:] = 0.01 * t[1:]
    r["reward"][-1] = 1.0 if terminated else 0.0
    r["terminated"][-1], r["truncated"][-1], r["success"][-1] = terminated, not terminated, terminated
    r["ended_by"][-1] = ENDED_BY_CODES["env" if terminated else "time_limit"]
    r["timestamp"][:] = t / FPS
    for c, cam in enumerate(CAMS):
        r[f"image/{cam}"][:] = np.stack([flat_image(20 + 30 * k + 3 * (ep_id - 10), c) for k in t])
    r["task"][:] = 0 if instruction is None else 1  # its code in [instruction], as an imported episode's
    check_step_batch(r, fields)
    return Episode(r, partition, f"ep{ep_id}", instruction)


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    return [make_episode(*spec) for spec in SPECS]


@pytest.fixture(scope="module")
def exported(episodes, tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "ours"
    empty = Episode({k: v[:1] for k, v in episodes[0].records.items()}, "online")  # no transition: skipped
    assert export_lerobot([episodes[0], empty, *episodes[1:]], root, fps=FPS, progress=False) == root
    return root


def test_export_reads_back_through_lerobot(episodes, exported, LeRobotDataset):
    ds = LeRobotDataset("local/robo_rl", root=exported, video_backend="pyav")
    assert ds.num_episodes == 3
    assert ds.num_frames == sum(len(e) for e in episodes)
    assert ds.fps == FPS
    assert ds.meta.video_keys == ["observation.images.front", "observation.images.wrist"]
    assert sorted(ds.meta.tasks.index) == ["pick the blue cube", "pick the red cube", "robo_rl episode"]
    cols = ds.hf_dataset.with_format("numpy")[:]
    i = 0
    for e_index, ep in enumerate(episodes):
        r, n = ep.records, len(ep)
        rows = slice(i, i + n)
        assert np.all(cols["episode_index"][rows] == e_index)
        np.testing.assert_array_equal(cols["observation.state"][rows], r["state"][:-1])
        np.testing.assert_array_equal(cols["action"][rows], r["action_executed"][1:])
        np.testing.assert_array_equal(cols["next.reward"][rows], r["reward"][1:])
        np.testing.assert_array_equal(cols["next.done"][rows], r["terminated"][1:] | r["truncated"][1:])
        np.testing.assert_array_equal(cols["complementary_info.is_intervention"][rows], r["intervention"][1:])
        for k in range(n):
            item = ds[i + k]
            assert item["task"] == (ep.instruction or "robo_rl episode")  # each episode's own instruction
            for cam in CAMS:
                img = item[f"observation.images.{cam}"]  # float CHW in [0, 1]
                assert tuple(img.shape) == (3, 32, 32)
                err = np.abs(img.numpy().transpose(1, 2, 0) * 255.0 - r[f"image/{cam}"][k]).mean()
                assert err < 8, (e_index, k, cam, err)
        i += n


def test_import_from_lerobot_recording(tmp_path, LeRobotDataset):
    """A dataset written by lerobot itself, without our complementary_info fields."""
    root = tmp_path / "foreign"
    features = {
        "observation.state": {"dtype": "float32", "shape": (4,), "names": None},
        "observation.images.top": {"dtype": "video", "shape": (24, 32, 3), "names": ["height", "width", "channels"]},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        "intervention": {"dtype": "bool", "shape": (1,), "names": None},  # as LeRobot's DAgger rollouts name it
    }
    ds = LeRobotDataset.create("someone/pick", fps=FPS, root=root, features=features, use_videos=True)
    lengths, states, actions, images = [5, 3], [], [], []
    for e, n in enumerate(lengths):
        s = (100 * e + np.arange(n * 4).reshape(n, 4)).astype(np.float32)
        a = (e - np.arange(n * 2).reshape(n, 2) / 10).astype(np.float32)
        imgs = [np.full((24, 32, 3), 40 + 40 * k, np.uint8) for k in range(n)]
        for k in range(n):
            ds.add_frame(
                {
                    "observation.state": s[k],
                    "observation.images.top": imgs[k],
                    "action": a[k],
                    "next.reward": np.array([float(k == n - 1 and e == 0)], np.float32),
                    "next.done": np.array([k == n - 1]),
                    "intervention": np.array([e == 1 and k == 1]),
                    "task": "pick the cube",
                }
            )
        ds.save_episode()
        states.append(s), actions.append(a), images.append(np.stack(imgs))
    ds.finalize()

    eps = import_lerobot(root, progress=False)
    assert [len(e) for e in eps] == lengths
    fields = step_fields(4, 2, {"top": (24, 32)})
    for e, ep in enumerate(eps):
        r, n = ep.records, lengths[e]
        assert check_step_batch(r, fields) == n + 1
        assert set(r) == set(fields)
        assert ep.partition == "demos"
        assert np.all(r["episode_id"] == e) and np.array_equal(r["step"], np.arange(n + 1))
        np.testing.assert_array_equal(r["state"][:n], states[e])
        np.testing.assert_array_equal(r["state"][n], states[e][-1])  # the final observation is a copy
        assert not r["action_executed"][0].any() and r["reward"][0] == 0
        np.testing.assert_array_equal(r["action_executed"][1:], actions[e])
        np.testing.assert_array_equal(r["action_policy"][1:], actions[e])
        assert r["terminated"][-1] and not r["terminated"][:-1].any() and not r["truncated"].any()
        assert r["ended_by"][-1] == ENDED_BY_CODES["env"] and not r["ended_by"][:-1].any()
        assert r["success"][-1] == (e == 0) and not r["success"][:-1].any()
        np.testing.assert_array_equal(r["intervention"], np.arange(n + 1) == 2 if e == 1 else False)
        np.testing.assert_allclose(r["timestamp"], np.arange(n + 1) / FPS, atol=1e-6)
        assert np.abs(r["image/top"][:n].astype(float) - images[e]).mean() < 8

    small = import_lerobot(
        root,
        state_keys=["observation.state"],
        camera_keys={"cam": "observation.images.top"},
        image_size=(12, 16),
        terminal_on_done=False,
        progress=False,
    )
    r = small[0].records
    assert r["image/cam"].shape == (6, 12, 16, 3)
    assert r["truncated"][-1] and not r["terminated"].any() and r["ended_by"][-1] == ENDED_BY_CODES["time_limit"]
    with pytest.raises(ValueError, match=r"observation\.nope.*available features"):
        import_lerobot(root, state_keys=["observation.nope"], progress=False)


def test_import_image_features(tmp_path, LeRobotDataset):
    """Images stored as PNG ("image" dtype) under LeRobot's single-camera name `observation.image`; no state key
    called observation.state (the 1-d float observation features are concatenated in sorted order)."""
    root = tmp_path / "pngs"
    vec = {"dtype": "float32", "shape": (2,), "names": None}
    features = {
        "observation.image": {"dtype": "image", "shape": (16, 16, 3), "names": ["height", "width", "channel"]},
        "observation.joints": vec,
        "observation.environment_state": vec,
        "action": vec,
    }
    ds = LeRobotDataset.create("someone/pngs", fps=FPS, root=root, features=features, use_videos=False)
    for k in range(3):
        ds.add_frame(
            {
                "observation.image": np.full((16, 16, 3), 10 * k, np.uint8),
                "action": np.full(2, k, np.float32),
                "observation.joints": np.full(2, k, np.float32),
                "task": "t",
                "observation.environment_state": np.full(2, -k, np.float32),
            }
        )
    ds.save_episode()
    ds.finalize()
    (ep,) = import_lerobot(root, progress=False)
    r = ep.records
    assert r["state"].shape == (4, 4) and np.array_equal(r["state"][2], [-2, -2, 2, 2])  # environment_state first
    np.testing.assert_array_equal(r["image/image"][:3], np.arange(3)[:, None, None, None] * np.full((16, 16, 3), 10))
    assert r["truncated"][-1] and not r["terminated"].any() and not r["reward"].any()  # no done, no reward: truncated
    assert r["ended_by"][-1] == ENDED_BY_CODES["time_limit"] and not r["success"].any()


def test_round_trip_keeps_every_field(episodes, exported, LeRobotDataset):
    back = import_lerobot(exported, progress=False)
    # the importer decodes whole episodes at once: the same frames as lerobot's own per-item path
    ds = LeRobotDataset("local/robo_rl", root=exported, video_backend="pyav")
    for i in (0, 6, len(ds) - 1):
        item = ds[i]
        ep, k = int(item["episode_index"]), int(item["frame_index"])
        img = np.rint(item["observation.images.wrist"].numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
        np.testing.assert_array_equal(back[ep].records["image/wrist"][k], img)
    assert len(back) == len(episodes)
    for index, (ep, got) in enumerate(zip(episodes, back, strict=True)):
        assert (
            got.partition == ep.partition
            and got.interventions == ep.interventions
            and got.instruction == ep.instruction
        )
        r, g = ep.records, got.records
        assert set(g) == set(r)
        for name in r:
            assert g[name].dtype == r[name].dtype, name
            if name == "episode_id":
                assert np.all(g[name] == index)  # the LeRobot episode index
            elif name == "timestamp":
                np.testing.assert_allclose(g[name], r[name], atol=1e-6)
            elif name.startswith("image/"):
                assert np.abs(g[name][:-1].astype(float) - r[name][:-1]).mean() < 8, name
                np.testing.assert_array_equal(g[name][-1], g[name][-2])
            elif name == "state":
                np.testing.assert_array_equal(g[name][:-1], r[name][:-1])
                np.testing.assert_array_equal(g[name][-1], g[name][-2])
            else:
                np.testing.assert_array_equal(g[name], r[name], err_msg=name)


def test_interventions_partition_needs_intervention_flags(tmp_path):
    export_lerobot([make_episode(10, 3, True, "interventions", (), False)], tmp_path / "ds", progress=False)
    (ep,) = import_lerobot(tmp_path / "ds", progress=False)
    assert ep.partition == "demos" and ep.interventions == 0


def test_bad_input(exported, tmp_path):
    not_a_dataset = tmp_path / "plain"
    not_a_dataset.mkdir()
    (not_a_dataset / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="plain"):
        import_lerobot(not_a_dataset, progress=False)
    old = tmp_path / "old_format"
    (old / "meta").mkdir(parents=True)
    (old / "data").mkdir()
    (old / "meta" / "info.json").write_text('{"codebase_version": "v2.1"}')
    with pytest.raises(ValueError, match=r"old_format.*v2\.1"):
        import_lerobot(old, progress=False)
    with pytest.raises(ValueError, match="missing_dir"):
        import_lerobot(tmp_path / "missing_dir", progress=False)
    with pytest.raises(FileExistsError, match="plain"):
        export_lerobot([make_episode(*SPECS[0])], not_a_dataset, progress=False)
    with pytest.raises(FileExistsError):
        export_lerobot([make_episode(*SPECS[0])], exported, progress=False)
    assert (not_a_dataset / "notes.txt").read_text() == "hello"


def test_export_split_over_many_data_and_video_files_reads_back_frame_for_frame(
    episodes, tmp_path, monkeypatch, LeRobotDataset
):
    """A large export rolls to new parquet and mp4 files at lerobot's size limits; shrunk here to a few frames."""
    from robo_rl.data.datasets import lerobot_writer
    from robo_rl.data.datasets.lerobot_v3 import DEFAULT_TASK, _columns, _features
    from robo_rl.data.datasets.lerobot_writer import LeRobotV3Writer

    monkeypatch.setattr(lerobot_writer, "MB", 0)  # every size limit is reached at once: a video file per episode
    root = tmp_path / "split"
    writer = LeRobotV3Writer(root, "local/split", FPS, _features(episodes[0].records), frames_per_write=3)
    writer.frames_per_file = 6  # 5, 4 and 6 frames: a data file per episode
    for ep in episodes:
        writer.add(*_columns(ep), DEFAULT_TASK)
    writer.finish()
    assert len(list((root / "data").rglob("*.parquet"))) == 3
    assert len(list((root / "videos" / "observation.images.front").rglob("*.mp4"))) == 3
    ds = LeRobotDataset("local/split", root=root, video_backend="pyav")
    assert ds.num_episodes == 3 and ds.num_frames == sum(len(e) for e in episodes)
    i = 0
    for e_index, ep in enumerate(episodes):
        r = ep.records
        for k in range(len(ep)):
            item = ds[i]
            assert int(item["episode_index"]) == e_index and int(item["frame_index"]) == k
            np.testing.assert_array_equal(item["observation.state"].numpy(), r["state"][k])
            np.testing.assert_array_equal(item["action"].numpy(), r["action_executed"][k + 1])
            img = item["observation.images.wrist"].numpy().transpose(1, 2, 0) * 255.0
            assert np.abs(img - r["image/wrist"][k]).mean() < 8, (e_index, k)
            i += 1
    assert ds.meta.stats["observation.images.front"]["mean"].shape == (3, 1, 1)


def test_a_camera_too_small_for_video_is_refused_in_one_line(tmp_path):
    """8x8 frames killed the whole process inside the AV1 encoder (exit 136, no Python error)."""
    from robo_rl.data.datasets.lerobot_v3 import _features

    records = {
        "action_executed": np.zeros((2, 2), np.float32),
        "state": np.zeros((2, 4), np.float32),
        "image/top": np.zeros((2, 8, 8, 3), np.uint8),
    }
    with pytest.raises(ValueError, match="camera 'top' is 8x8: .* at least 32x32"):
        _features(records)
