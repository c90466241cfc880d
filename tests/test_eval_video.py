"""Evaluation videos: MP4s that decode back to one frame per step (plus the reset frame), linked from the report."""

import json

import numpy as np
import pytest
import torch

from robo_rl.config import load_config, make_env
from robo_rl.eval.episodes import evaluate_policy, write_report
from robo_rl.eval.video import VideoError, count_frames


class GoalSidePolicy:
    """Reaches the goal when it lies right of centre, stands still otherwise: successes and failures by seed."""

    def act(self, obs, deterministic=True):
        s = obs["state"][0]
        direction = torch.clamp((s[2:] - s[:2]) / 0.2, -1, 1) if s[2] > 0 else torch.zeros(2)
        return direction.unsqueeze(0)


def test_the_first_episodes_and_one_success_and_one_failure_are_filmed_and_play_back(tmp_path):
    env = make_env(load_config(["env=point_reach"]))
    result = evaluate_policy(
        env, GoalSidePolicy(), episodes=12, seed=0, video_dir=tmp_path / "videos", video_episodes=1
    )
    outcomes = [r["success"] for r in result["per_episode"]]
    assert any(outcomes) and not all(outcomes), "the seeds give both outcomes"
    videos = result["videos"]
    assert videos[0]["episode"] == 0 and len(videos) == 2, videos
    assert {v["success"] for v in videos} == {True, False}
    for v in videos:
        episode = result["per_episode"][v["episode"]]
        assert v["success"] == episode["success"], "a replayed episode ends as it did when evaluated"
        path = tmp_path / v["path"]
        assert path.suffix == ".mp4" and ("success" if v["success"] else "failure") in path.name
        assert count_frames(path) == episode["length"] + 1  # one frame per step and the reset frame
    report = write_report(tmp_path, result, "ckpt.pt", 123, None)
    text = report.read_text()
    for v in videos:
        assert f"]({v['path']})" in text
    assert json.loads((tmp_path / "report.json").read_text())["videos"] == videos


def test_the_default_task_films_its_front_camera(tmp_path):
    env = make_env(load_config([]), max_episode_steps=5)
    try:

        class Still:
            def act(self, obs, deterministic=True):
                return torch.zeros(1, env.action_space.shape[0])

        result = evaluate_policy(env, Still(), episodes=1, seed=0, video_dir=tmp_path, video_episodes=1)
    finally:
        env.close()
    (video,) = result["videos"]
    assert count_frames(tmp_path / video["path"].split("/", 1)[1]) == 6
    import av

    with av.open(str(tmp_path / video["path"].split("/", 1)[1])) as container:
        frame = next(container.decode(video=0)).to_ndarray(format="rgb24")
    assert frame.shape == (128, 128, 3) and frame.std() > 5, "a picture of the scene, not a blank frame"


def test_an_env_that_cannot_render_is_refused_by_name(tmp_path):
    env = make_env(load_config(["env=point_reach"]))
    env.render = lambda: None
    with pytest.raises(VideoError, match="PointReachEnv.render\\(\\) gives no image.*eval.video=false"):
        evaluate_policy(env, GoalSidePolicy(), episodes=1, seed=0, video_dir=tmp_path, video_episodes=1)


def test_odd_sized_frames_are_padded_to_a_playable_video(tmp_path):
    from robo_rl.eval.video import write_mp4

    frames = [np.full((33, 47, 3), i * 20, np.uint8) for i in range(7)]
    assert count_frames(write_mp4(tmp_path / "odd.mp4", frames, fps=12.5)) == 7
