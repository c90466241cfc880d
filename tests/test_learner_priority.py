"""The learner's CPU priority: below real-time actors' control loops unless set (train.learner_nice); and an actor
beside such a learner waits longer for a word from it before it holds the robot (transport.learner_timeout_s)."""

import pytest

from robo_rl.config import ConfigError, load_config
from robo_rl.configs.run import (
    LEARNER_TIMEOUT_S,
    NICED_LEARNER_TIMEOUT_S,
    REALTIME_LEARNER_NICE,
    learner_niceness,
    learner_timeout_s,
)


@pytest.mark.parametrize(
    ("overrides", "nice", "timeout_s"),
    [
        ([], 0, LEARNER_TIMEOUT_S),  # sim actors paced by the learner: nothing to yield to
        (["actor.realtime=true"], REALTIME_LEARNER_NICE, NICED_LEARNER_TIMEOUT_S),  # the control loop comes first
        (["actor.realtime=true", "train.learner_nice=0"], 0, LEARNER_TIMEOUT_S),  # a learner on a machine of its own
        (["train.learner_nice=19", "transport.learner_timeout_s=5"], 19, 5.0),
    ],
)
def test_the_learner_yields_to_real_time_actors_and_they_give_it_longer_unless_told_otherwise(
    overrides, nice, timeout_s
):
    cfg = load_config(["env=point_reach", *overrides])
    assert learner_niceness(cfg) == nice and learner_timeout_s(cfg) == timeout_s


@pytest.mark.parametrize("bad", ["train.learner_nice=20", "train.learner_nice=-1", "transport.learner_timeout_s=0"])
def test_a_learner_niceness_or_timeout_out_of_range_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match=bad.split(".")[1].split("=")[0]):
        load_config(["env=point_reach", bad])


def test_a_real_time_actor_gives_a_learner_below_its_priority_the_longer_wait_before_it_holds(tmp_path):
    from robo_rl.actor import Actor
    from tests.test_pipeline import toy_config

    actor = Actor(toy_config(tmp_path, "actor.realtime=true"), progress=False)
    try:
        assert actor.transport.link.learner_timeout_s == NICED_LEARNER_TIMEOUT_S
    finally:
        actor.transport.close("test over", linger_s=0)
        actor.env.close()
