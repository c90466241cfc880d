"""The page's dead man is not silent: an actor paused by it says so in its heartbeat, and `train`'s bar shows PAUSED,
why and how to resume; a simulated actor's dead man carries on by default, a robot's pauses."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from robo_rl.actor import Actor
from robo_rl.config import ConfigError, load_config, make_env
from robo_rl.loop_timing import LoopClock
from robo_rl.progress import TrainingBar
from robo_rl.transport.codec import decode, encode
from robo_rl.transport.messages import CTRL_KINDS

POINT_REACH = ["env=point_reach", "demos.num_episodes=0"]


@pytest.fixture(scope="module")
def env():
    env = make_env(load_config(POINT_REACH))
    yield env
    env.close()


def _heartbeat_stats(human) -> dict:
    """The actor's heartbeat stats for this human wrapper, through the wire codec and its checks."""
    loop = SimpleNamespace(policy_version=3, refused_steps=0, sent_records=0, clock=LoopClock(10))
    loop.acting = SimpleNamespace(chunk_stats=dict)  # a policy without chunks
    loop.reward = loop.safety = None
    loop.resets = []  # no env.reset_mode
    loop.human = human
    stats = Actor.loop_stats(loop)
    _, meta, _ = decode(encode("heartbeat", {"actor": "actor-0", "stats": stats}), CTRL_KINDS)
    return meta["stats"]


def test_the_pages_dead_man_shows_paused_why_and_how_to_resume_on_the_bar(env, capsys):
    from robo_rl.gui.bridge import GuiBridge
    from robo_rl.gui.web_device import WebDevice
    from robo_rl.teleop.intervention import InterventionWrapper

    web = WebDevice()
    human = InterventionWrapper(env, [web], start_devices=False)
    bridge = GuiBridge("actor-0", "127.0.0.1", 1, web, human, deadman="pause")
    try:
        assert _heartbeat_stats(human)["paused"] is False
        bridge._dead_man("no page watches any more")  # what the GUI's notice of a closed tab applies
    finally:
        bridge.close()
    stats = _heartbeat_stats(human)
    assert stats["paused"] is True and "dead man: no page watches any more" in stats["paused_why"]

    bar = TrainingBar(load_config([*POINT_REACH, "gui=true"]), None, enabled=True)
    line = {"kind": "learner", "env_steps": 700, "episodes": 9, "updates_per_s": 0.0, "actor_stats": {"actor-0": stats}}
    bar.learner_line(line)
    assert bar.bar.desc == "PAUSED"
    shown = bar.bar.postfix
    assert "actor-0 paused: the page's dead man: no page watches any more (gui.deadman=pause)" in shown, shown
    assert "resume: Resume on the page, http://127.0.0.1:8765/" in shown and "ETA" not in shown, shown
    said = capsys.readouterr().out
    assert "PAUSED: actor-0 paused: the page's dead man" in said, said  # in the scrollback too, once
    bar.learner_line(line)
    assert "PAUSED" not in capsys.readouterr().out

    resumed = {**line, "env_steps": 720, "actor_stats": {"actor-0": {**stats, "paused": False}}}
    bar.learner_line(resumed)
    assert bar.bar.desc != "PAUSED" and "ETA" in bar.bar.postfix and "resumed" in capsys.readouterr().out
    bar.finish(done=False)


def test_without_the_page_the_bar_says_resume_on_the_device(capsys):
    bar = TrainingBar(load_config(POINT_REACH), None, enabled=True)
    paused = {"paused": True, "paused_why": "a person pressed pause"}
    bar.learner_line({"env_steps": 10, "episodes": 0, "actor_stats": {"actor-0": paused}})
    assert bar.bar.desc == "PAUSED" and "press pause again on the device" in bar.bar.postfix
    # one of two actors paused: training goes on, and the bar names the paused one
    bar.learner_line({"env_steps": 20, "episodes": 0, "actor_stats": {"actor-0": paused, "actor-1": {"paused": False}}})
    assert bar.bar.desc != "PAUSED" and "actor-0 paused: a person pressed pause" in bar.bar.postfix
    bar.finish(done=False)


def test_the_dead_mans_default_pauses_a_robot_and_lets_a_simulation_carry_on(env):
    from robo_rl.gui.actor_view import deadman_for

    assert load_config(POINT_REACH).gui.deadman is None
    assert not env.unwrapped.drives_robot and deadman_for(None, env) == "continue"
    robot = SimpleNamespace(unwrapped=SimpleNamespace(drives_robot=True))
    assert deadman_for(None, robot) == "pause"
    assert deadman_for("continue", robot) == "continue" and deadman_for("pause", env) == "pause"  # a setting wins
    assert load_config([*POINT_REACH, "gui.deadman=pause"]).gui.deadman == "pause"
    with pytest.raises(ConfigError, match="gui.deadman=stop is not allowed"):
        load_config([*POINT_REACH, "gui.deadman=stop"])
