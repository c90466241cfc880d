"""The learner's CPU priority: below real-time actors' control loops unless set (train.learner_nice)."""

import pytest

from robo_rl.commands.run import REALTIME_LEARNER_NICE, learner_niceness
from robo_rl.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("overrides", "nice"),
    [
        ([], 0),  # sim actors paced by the learner: nothing to yield to
        (["actor.realtime=true"], REALTIME_LEARNER_NICE),  # a robot's control loop on this machine comes first
        (["actor.realtime=true", "train.learner_nice=0"], 0),  # a learner on a machine of its own keeps full priority
        (["train.learner_nice=19"], 19),
    ],
)
def test_the_learner_yields_to_real_time_actors_unless_told_otherwise(overrides, nice):
    assert learner_niceness(load_config(["env=point_reach", *overrides])) == nice


@pytest.mark.parametrize("bad", ["train.learner_nice=20", "train.learner_nice=-1"])
def test_a_learner_niceness_out_of_range_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="learner_nice"):
        load_config(["env=point_reach", bad])
