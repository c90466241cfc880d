"""robomimic HDF5 import: record layout, end flags, ordering, filters, keys, images and bad inputs."""

from __future__ import annotations

import json
import logging

import h5py
import numpy as np
import pytest

from robo_rl.data.datasets.robomimic import import_robomimic, read_robomimic_info
from robo_rl.data.schema import ENDED_BY_CODES, check_step_batch, step_fields

LOW_DIM = {"robot0_eef_pos": 3, "robot0_gripper_qpos": 2, "object": 10}
KEYS = ["robot0_eef_pos", "robot0_gripper_qpos", "object"]
# demo number → (steps, success); demo_10 must come after demo_2
DEMOS = {2: (6, True), 3: (5, False), 10: (8, True)}
ACTION_DIM = 7


def _demo_arrays(num: int, t: int, success: bool) -> dict:
    rng = np.random.default_rng(num)
    d = {
        "actions": rng.uniform(-1, 1, (t, ACTION_DIM)),
        "rewards": np.zeros(t),
        "dones": np.zeros(t, np.int64),
        "states": rng.normal(size=(t, 32)),
    }
    if success:
        d["rewards"][-1] = 1.0
        d["dones"][-1] = 1
    for group in ("obs", "next_obs"):
        for k, n in LOW_DIM.items():
            d[f"{group}/{k}"] = rng.normal(size=(t, n))
        d[f"{group}/agentview_image"] = rng.integers(0, 256, (t, 16, 16, 3), dtype=np.uint8)
    return d


def write_file(path, demos=DEMOS, next_obs=True) -> dict:
    """A small robomimic-format file; returns demo name → arrays written."""
    written = {}
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20}})
        total = 0
        for num, (t, success) in demos.items():
            arrays = _demo_arrays(num, t, success)
            g = data.create_group(f"demo_{num}")
            g.attrs["num_samples"] = t
            for k, v in arrays.items():
                if next_obs or not k.startswith("next_obs/"):
                    g.create_dataset(k, data=v)
            written[f"demo_{num}"] = arrays
            total += t
        data.attrs["total"] = total
        f.create_dataset("mask/train", data=np.array([b"demo_10", b"demo_3"]))
        f.create_dataset("mask/valid", data=np.array([b"demo_2"]))
    return written


@pytest.fixture
def demo_file(tmp_path):
    path = tmp_path / "lift_demo.hdf5"
    return path, write_file(path)


def _concat(arrays: dict, group: str, i: int, keys=KEYS) -> np.ndarray:
    return np.concatenate([arrays[f"{group}/{k}"][i] for k in keys]).astype(np.float32)


def test_info(demo_file):
    path, _ = demo_file
    info = read_robomimic_info(path)
    assert info["env_name"] == "Lift" and info["env_args"]["type"] == 1
    assert info["demos"] == ["demo_2", "demo_3", "demo_10"]
    assert info["lengths"] == {"demo_2": 6, "demo_3": 5, "demo_10": 8}
    assert info["obs_keys"]["object"] == ((10,), "float64")
    assert info["obs_keys"]["agentview_image"] == ((16, 16, 3), "uint8")
    assert info["image_keys"] == ["agentview_image"]
    assert info["filter_keys"] == {"train": ["demo_3", "demo_10"], "valid": ["demo_2"]}


def test_record_layout(demo_file):
    path, written = demo_file
    episodes = import_robomimic(path, state_keys=KEYS, progress=False)
    fields = step_fields(15, ACTION_DIM, {"agentview": (16, 16)})
    assert [int(e.records["episode_id"][0]) for e in episodes] == [2, 3, 10]  # numeric, not lexical
    for ep, (name, a) in zip(episodes, written.items(), strict=True):
        r = ep.records
        t = len(a["actions"])
        assert check_step_batch(r, fields) == t + 1 and len(ep) == t
        assert ep.partition == "demos" and ep.source == "lift_demo.hdf5"
        assert set(r) == set(fields) and all(r[k].dtype == np.dtype(dt) for k, (_, dt) in fields.items())
        assert (r["episode_id"] == int(name.split("_")[1])).all()
        np.testing.assert_array_equal(r["step"], np.arange(t + 1))
        assert not r["action_executed"][0].any() and not r["action_policy"][0].any() and not r["action_base"].any()
        np.testing.assert_array_equal(r["state"][0], _concat(a, "obs", 0))
        np.testing.assert_array_equal(r["image/agentview"][0], a["obs/agentview_image"][0])
        for k in range(1, t + 1):
            np.testing.assert_array_equal(r["action_executed"][k], a["actions"][k - 1].astype(np.float32))
            np.testing.assert_array_equal(r["action_policy"][k], r["action_executed"][k])
            np.testing.assert_array_equal(r["state"][k], _concat(a, "next_obs", k - 1))
            np.testing.assert_array_equal(r["image/agentview"][k], a["next_obs/agentview_image"][k - 1])
        np.testing.assert_array_equal(r["reward"][1:], a["rewards"].astype(np.float32))
        np.testing.assert_allclose(r["timestamp"], np.arange(t + 1) / 20.0)
        assert not r["intervention"].any() and not r["terminated"][:-1].any() and not r["truncated"][:-1].any()


def test_end_flags_and_success(demo_file):
    path, _ = demo_file
    eps = {int(e.records["episode_id"][0]): e for e in import_robomimic(path, progress=False)}
    for num in (2, 10):
        r = eps[num].records
        assert r["terminated"][-1] and not r["truncated"][-1] and eps[num].success
        assert r["ended_by"][-1] == ENDED_BY_CODES["env"] and not r["ended_by"][:-1].any()
    r = eps[3].records
    assert r["truncated"][-1] and not r["terminated"][-1] and not eps[3].success
    assert r["ended_by"][-1] == ENDED_BY_CODES["time_limit"]
    every = import_robomimic(path, success_from="all", progress=False)
    assert all(e.success for e in every)
    with pytest.raises(ValueError, match="success_from"):
        import_robomimic(path, success_from="bogus", progress=False)


def test_state_keys_default_and_order(demo_file):
    path, written = demo_file
    a = written["demo_2"]
    default = import_robomimic(path, progress=False)[0].records["state"]
    np.testing.assert_array_equal(default[1], _concat(a, "next_obs", 0, sorted(KEYS)))  # sorted low-dim keys only
    order = ["object", "robot0_gripper_qpos"]
    custom = import_robomimic(path, state_keys=order, camera_keys={}, progress=False)[0].records
    assert custom["state"].shape == (7, 12) and not any(k.startswith("image/") for k in custom)
    np.testing.assert_array_equal(custom["state"][3], _concat(a, "next_obs", 2, order))


def test_filter_key(demo_file):
    path, _ = demo_file
    eps = import_robomimic(path, filter_key="train", progress=False)
    assert [int(e.records["episode_id"][0]) for e in eps] == [3, 10]
    with pytest.raises(ValueError, match=r"lift_demo\.hdf5.*'test'.*\['train', 'valid'\]"):
        import_robomimic(path, filter_key="test", progress=False)


def test_images_flip_resize_and_camera_names(demo_file):
    path, written = demo_file
    a = written["demo_2"]
    ep = import_robomimic(path, camera_keys={"front": "agentview_image"}, flip_images=True, progress=False)[0]
    np.testing.assert_array_equal(ep.records["image/front"][0], a["obs/agentview_image"][0][::-1])
    np.testing.assert_array_equal(ep.records["image/front"][2], a["next_obs/agentview_image"][1][::-1])
    small = import_robomimic(path, image_size=(8, 12), progress=False)[0]
    assert small.records["image/agentview"].shape == (7, 8, 12, 3)
    check_step_batch(small.records, step_fields(15, ACTION_DIM, {"agentview": (8, 12)}))


def test_without_next_obs_falls_back_to_obs(tmp_path):
    path = tmp_path / "no_next.hdf5"
    a = write_file(path, {4: (5, True)}, next_obs=False)["demo_4"]
    r = import_robomimic(path, state_keys=KEYS, progress=False)[0].records
    for k in range(1, 5):
        np.testing.assert_array_equal(r["state"][k], _concat(a, "obs", k))
    np.testing.assert_array_equal(r["state"][5], _concat(a, "obs", 4))  # last record repeats obs[T-1]


def test_bad_inputs(tmp_path, demo_file):
    path, _ = demo_file
    with pytest.raises(ValueError, match="missing.hdf5"):
        import_robomimic(tmp_path / "missing.hdf5")
    (tmp_path / "text.hdf5").write_text("not hdf5")
    with pytest.raises(ValueError, match="text.hdf5.*not an HDF5"):
        read_robomimic_info(tmp_path / "text.hdf5")
    with h5py.File(tmp_path / "empty.hdf5", "w") as f:
        f.create_group("other")
    with pytest.raises(ValueError, match="empty.hdf5.*no 'data' group"):
        import_robomimic(tmp_path / "empty.hdf5")
    with pytest.raises(ValueError, match=r"lift_demo.hdf5.*'robot0_joint_pos'.*available.*'object'"):
        import_robomimic(path, state_keys=["robot0_joint_pos"], progress=False)
    with pytest.raises(ValueError, match="'wrist_image'"):
        import_robomimic(path, camera_keys={"wrist": "wrist_image"}, progress=False)


def test_corrupt_demos_are_skipped(tmp_path, caplog):
    path = tmp_path / "corrupt.hdf5"
    write_file(path, {**DEMOS, 5: (5, True)})
    with h5py.File(path, "a") as f:
        f["data/demo_5/next_obs/object"][3, 0] = np.inf
        del f["data/demo_3/rewards"]
        f["data/demo_3/rewards"] = np.zeros(4)  # 5 actions, 4 rewards
        f["data/demo_10/actions"][2, 1] = np.nan
    with caplog.at_level(logging.WARNING, logger="robo_rl.data.datasets.robomimic"):
        eps = import_robomimic(path, progress=False)
    assert [int(e.records["episode_id"][0]) for e in eps] == [2]
    assert "demo_3" in caplog.text and "inconsistent lengths" in caplog.text
    assert "demo_10" in caplog.text and "NaN" in caplog.text and "demo_5" in caplog.text


def test_robosuite_collected_demo(tmp_path):
    """robosuite's own writer (DataCollectionWrapper + gather_demonstrations_as_hdf5) gives states only: the
    importer says so; with robosuite's observations added the robomimic way, the demo imports."""
    suite = pytest.importorskip("robosuite")
    from robosuite.scripts.collect_human_demonstrations import gather_demonstrations_as_hdf5
    from robosuite.wrappers import DataCollectionWrapper

    env = suite.make(
        "Lift",
        robots="Panda",
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
        control_freq=20,
        horizon=50,
    )
    collector = DataCollectionWrapper(env, str(tmp_path / "raw"))
    obs = [collector.reset()]
    cube = env.cube.joints[0]
    lifted = np.concatenate([env.sim.data.get_joint_qpos(cube)[:3] + [0, 0, 0.5], [1, 0, 0, 0]])
    env.sim.data.set_joint_qpos(cube, lifted)
    env.sim.forward()
    obs[0] = env._get_observations(force_update=True)
    actions, rewards = np.zeros((6, env.action_dim)), []
    actions[:, 0] = np.linspace(-0.2, 0.2, 6)
    for act in actions:  # the lifted cube is still above the table for the first steps: success, reward 1
        o, r, _, _ = collector.step(act)
        obs.append(o)
        rewards.append(r)
    collector.close()
    gather_demonstrations_as_hdf5(str(tmp_path / "raw"), str(tmp_path), json.dumps({"env_name": "Lift"}))
    path = tmp_path / "demo.hdf5"
    info = read_robomimic_info(path)
    assert info["env_name"] == "Lift" and info["demos"] == ["demo_1"] and info["lengths"] == {"demo_1": 6}
    with pytest.raises(ValueError, match="dataset_states_to_obs"):
        import_robomimic(path, progress=False)

    with h5py.File(path, "a") as f:  # add what robomimic's dataset_states_to_obs writes
        f["data"].attrs["env_args"] = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20}})
        g = f["data/demo_1"]
        g.attrs["num_samples"] = 6
        g["rewards"] = np.asarray(rewards)
        g["dones"] = np.eye(6, dtype=np.int64)[-1]
        for k in obs[0]:
            g[f"obs/{k}"] = np.stack([o[k] for o in obs[:-1]])
            g[f"next_obs/{k}"] = np.stack([o[k] for o in obs[1:]])
        saved_actions = g["actions"][()]
    np.testing.assert_allclose(saved_actions, actions)
    keys = ["robot0_eef_pos", "robot0_gripper_qpos", "object-state"]
    (ep,) = import_robomimic(path, state_keys=keys, progress=False)
    check_step_batch(ep.records, step_fields(15, env.action_dim, {}))
    assert ep.success and ep.records["terminated"][-1] and max(rewards) >= 1
    np.testing.assert_allclose(ep.records["action_executed"][1:], actions.astype(np.float32))
    np.testing.assert_allclose(ep.records["state"][6], np.concatenate([obs[6][k] for k in keys]), rtol=1e-6)
