"""The camera reset check (`env.reset_check=camera`, robo_rl/envs/reset_check.py) on the pick sim with two 64x64
cameras: `robo-rl reset-check label` and `train` make a classifier from a few dozen auto-labelled frames that tells
ready from not ready on fresh scenes; with it as the check a scene left unreset calls the (simulated) person and a
reset scene does not; a person at a robot labels scenes with a device's presses; bad settings are refused in one
line."""

import json

import numpy as np
import pytest
import torch

from robo_rl.cli import main
from robo_rl.config import ConfigError, load_config
from robo_rl.envs.base import SafetyStop
from robo_rl.envs.reset_check import LABELLED_BY_PERSON, ResetFrames, label_reset_frames
from robo_rl.envs.resets import ResetWrapper
from robo_rl.envs.wrappers import make_actor_env
from robo_rl.rewards.classifier import SuccessClassifier
from robo_rl.rewards.reset_classifier import ResetClassifier
from robo_rl.teleop.base import TeleopDevice
from sim.pick_cube import PickCubeEnv

CAMERAS = ("front", "wrist")
ENV = ["env=pick_cube", "env.cameras=[front,wrist]", "env.image_size=64"]
FAR_XY = (0.66, 0.21)  # outside the cube's start region (0.5 ± 0.1, 0 ± 0.1) by 6 and 11 cm


def _env(**kw) -> PickCubeEnv:
    return PickCubeEnv(cameras=CAMERAS, image_size=64, reset_mode="scripted", reset_person="sim", **kw)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A classifier made as a user makes one: 16 scenes labelled and trained by the command; 8 fresh scenes held out."""
    torch.set_num_threads(1)  # this fixture runs before the per-test one that sets it (conftest.py)
    root = tmp_path_factory.mktemp("reset_check")
    frames, folder = root / "frames.npz", root / "classifier"
    assert main(["reset-check", "label", f"out={frames}", "scenes=16", "seed=0", *ENV]) == 0
    assert main(["reset-check", "train", f"data={frames}", f"out={folder}", "epochs=100"]) == 0
    env = _env()
    try:
        fresh = label_reset_frames(env, 8, seed=1000)
    finally:
        env.close()
    fresh.save(root / "fresh.npz")
    return {"root": root, "frames": frames, "folder": folder, "fresh": root / "fresh.npz"}


def test_a_classifier_from_a_few_dozen_auto_labelled_frames_tells_ready_from_not_ready_on_fresh_scenes(made, capsys):
    frames = ResetFrames.load(made["frames"])
    assert len(frames) == 48 and 16 <= frames.ready.sum() <= 40  # a few dozen frames, of both kinds
    report = json.loads((made["folder"] / "train_report.json").read_text())
    assert report["train_frames"] + report["held_out"]["frames"] == 48
    out = made["root"] / "eval.json"
    assert main(["reset-check", "eval", f"model={made['folder']}", f"data={made['fresh']}", f"out={out}"]) == 0
    quality = json.loads(out.read_text())
    assert quality["ready_frames"] >= 4 and quality["not_ready_frames"] >= 4  # fresh scenes, of both kinds
    assert quality["accuracy"] >= 0.9, quality
    assert quality["false_ready_rate"] <= 0.2, quality
    assert "accuracy" in capsys.readouterr().out


def test_with_the_camera_check_a_scene_left_unreset_calls_the_person_and_a_reset_scene_passes(made):
    env = ResetWrapper(e := _env(reset_check="camera", reset_classifier=str(made["folder"])), e.reset_settings)
    task = env.unwrapped
    env.reset(seed=3)
    _, info = env.reset()  # an episode that left the scene as it was: the scripted reset and the check pass
    assert (
        info["reset"]["problem"] is None
        and info["reset"]["ready_prob"] > ResetClassifier.open_reset_check(made["folder"]).threshold
    )
    task.reset(options={"cube_xy": FAR_XY})  # the cube pushed far away, and a scripted reset that does nothing
    task.scripted_reset = lambda: None
    assert "outside its start region" in task.reset_problem(0.03)
    _, info = env.reset()
    problem = info["reset"]["problem"]
    assert f"reset classifier {made['folder']}" in problem and "P(ready)" in problem
    assert env.stats() == {"resets": 2, "resets_ok": 1, "resets_failed": 1, "reset_calls": 1}
    assert task.reset_problem(0.03) is None and info["reset"]["ready_prob"] > 0.5  # the person put it back
    env.close()


def test_a_never_ready_classifier_fails_the_check_after_a_good_reset_and_stops_the_simulated_person(tmp_path):
    folder = tmp_path / "never"
    never = ResetClassifier(CAMERAS, resize=[32, 32], channels=4, features=4, hidden=4, threshold=1.0)
    never.save(folder)  # P(ready) is never above 1
    env = ResetWrapper(e := _env(reset_check="both", reset_classifier=str(folder)), e.reset_settings)
    env.reset(seed=0)
    with pytest.raises(SafetyStop, match="could not reset the scene in 3 tries: the reset classifier"):
        env.reset()
    assert env.unwrapped.reset_problem(0.03) is None  # the state check alone would have passed
    assert env.stats()["reset_calls"] == 1
    env.close()


def test_on_the_so101_twin_both_checks_ask_the_joints_and_the_camera(tmp_path):
    """An arm's own check (joints home) and the classifier on its camera, through the actor's env and safety layer."""
    from robo_rl.envs.wrappers import find_wrapper

    camera = "env.cameras={front: {_target_: hardware.twin_camera.TwinCamera, width: 48, height: 48, fps: 10}}"
    for threshold, calls in ((0.0, 0), (1.0, 1)):  # P(ready) is above 0, and never above 1
        folder = tmp_path / f"threshold_{threshold}"
        ResetClassifier(("front",), resize=[32, 32], channels=4, features=4, hidden=4, threshold=threshold).save(folder)
        settings = ["env.reset_mode=scripted", "env.reset_person=sim", "env.reset_check=both"]
        settings.append(f"env.reset_classifier={folder}")
        cfg = load_config(["env=so101_twin", "safety=default", "experiment=rlpd", camera, *settings])
        env = make_actor_env(cfg)
        try:
            env.reset(seed=0)
            for _ in range(8):
                env.step(np.array([1.0, 0.5, 0.5, 1.0], np.float32))
            assert "from its home pose" in env.unwrapped.reset_problem(0.05)
            if calls:
                with pytest.raises(SafetyStop, match="the reset classifier"):
                    env.reset()
            else:
                _, info = env.reset()
                assert info["reset"]["problem"] is None and info["reset"]["ready_prob"] > 0
            assert find_wrapper(env, ResetWrapper).stats()["reset_calls"] == calls
        finally:
            env.close()


@pytest.mark.parametrize(
    ("settings", "refusal"),
    [
        (["env.reset_mode=scripted", "env.reset_check=maybe"], "env.reset_check=maybe"),
        (["env.reset_mode=scripted", "env.reset_check=camera"], "env.reset_check=camera needs env.reset_classifier"),
        (["env.reset_check=camera", "env.reset_classifier=x"], "it needs an env.reset_mode"),
        (["env.reset_mode=scripted", "env.reset_classifier=x"], "read only with env.reset_check=camera or both"),
        (["env.reset_mode=scripted", "env.reset_check=camera", "env.reset_classifier={missing}"], "no model folder"),
        (["env.reset_mode=scripted", "env.reset_check=camera", "env.reset_classifier={reward}"], "not a reset class"),
        (
            [
                "env.reset_mode=scripted",
                "env.reset_check=camera",
                "env.reset_classifier={folder}",
                "env.cameras=[front]",
            ],
            "needs cameras ['front', 'wrist']; this env has ['front'], not ['wrist']",
        ),
    ],
)
def test_bad_settings_are_refused_in_one_line(made, tmp_path, settings, refusal):
    reward = tmp_path / "reward"
    SuccessClassifier(CAMERAS, resize=[32, 32], channels=4, features=4, hidden=4).save(reward)
    paths = {"missing": tmp_path / "nothing", "reward": reward, "folder": made["folder"]}
    overrides = [*ENV, *(s.format(**paths) for s in settings)]
    with pytest.raises(ConfigError) as e:
        make_actor_env(load_config([*overrides, "human=none"]))
    assert refusal in str(e.value) and "\n" not in str(e.value)


def test_the_commands_refuse_bad_input_in_one_line(made, tmp_path, capsys):
    assert main(["reset-check", "train", f"data={tmp_path / 'none.npz'}", f"out={tmp_path / 'm'}"]) == 2
    assert "none.npz: no such file" in capsys.readouterr().err
    one_kind = ResetFrames.load(made["frames"])
    one_kind.take(one_kind.ready).save(tmp_path / "ready_only.npz")
    assert main(["reset-check", "train", f"data={tmp_path / 'ready_only.npz'}", f"out={tmp_path / 'm'}"]) == 2
    assert "needs not-ready frames of two scenes" in capsys.readouterr().err
    assert main(["reset-check", "label", f"out={tmp_path / 'f.npz'}", "env=pick_cube"]) == 2  # no cameras
    assert "has no cameras to label (env.cameras)" in capsys.readouterr().err
    assert main(["reset-check", "train", f"data={made['frames']}", f"out={made['folder']}"]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert main(["reset-check", "eval", f"model={made['root'] / 'frames.npz'}", f"data={made['frames']}"]) == 2
    err = capsys.readouterr().err
    assert "frames.npz" in err and len(err.strip().splitlines()) == 1


def test_labelled_frames_keep_their_labels_and_scenes_through_a_file_and_refuse_another_file(tmp_path):
    images = {"front": np.zeros((3, 8, 8, 3), np.uint8)}
    frames = ResetFrames(images, [True, False, True], [0, 0, 1], ["", "the cube is moving", ""])
    both = ResetFrames.concat([ResetFrames.load(frames.save(tmp_path / "a")), frames])
    assert both.ready.tolist() == [True, False, True] * 2 and both.scene.tolist() == [0, 0, 1, 2, 2, 3]
    assert both.problem[1] == "the cube is moving"
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a version-1 labelled-frames file"):
        ResetFrames.load(tmp_path / "other.npz")
    with pytest.raises(ValueError, match="3 uint8 frames"):
        ResetFrames({"front": np.zeros((2, 8, 8, 3), np.uint8)}, [True] * 3, [0] * 3, [""] * 3)


class Presses(TeleopDevice):
    """A person at the robot: a scene labelled ready, one not ready, one ready, then the session ended."""

    name = "presses"

    def _open(self) -> None:
        self.script = [set(), {"success"}, set(), {"failure"}, {"success"}, {"terminate_episode"}, {"success"}]

    def _poll(self) -> None:
        for event in self.script.pop(0) if self.script else ():
            self._emit(event)


def test_a_person_labels_scenes_at_the_robot_with_a_devices_presses(tmp_path, capsys):
    out = tmp_path / "person.npz"
    device = "human.devices=[{_target_: tests.test_reset_check_camera.Presses}]"
    assert main(["reset-check", "label", f"out={out}", *ENV, "human=keyboard", device]) == 0
    frames = ResetFrames.load(out)
    assert frames.ready.tolist() == [True, False, True] and frames.scene.tolist() == [0, 1, 2]  # abort ended it
    assert frames.images["wrist"].shape == (3, 64, 64, 3) and frames.problem.tolist() == ["", LABELLED_BY_PERSON, ""]
    assert "3 frames of 3 scenes (2 ready)" in capsys.readouterr().out
