"""The learner's CPU priority: below real-time actors' control loops unless set (train.learner_nice); and an actor
beside such a learner waits longer for a word from it before it holds the robot (transport.learner_timeout_s)."""

import subprocess
import sys
from pathlib import Path

import pytest

from robo_rl.config import ConfigError, load_config
from robo_rl.configs.run import (
    LEARNER_TIMEOUT_S,
    NICED_LEARNER_TIMEOUT_S,
    REALTIME_LEARNER_NICE,
    learner_niceness,
    learner_timeout_s,
)

ROOT = Path(__file__).resolve().parents[1]


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


AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")
needs_autogroups = pytest.mark.skipif(
    not AUTOGROUPS.exists() or AUTOGROUPS.read_text().strip() != "1", reason="the kernel groups no sessions"
)
NICED = "from robo_rl.commands.common import at_least_nice, autogroup_nice; print(at_least_nice(7), autogroup_nice())"


@needs_autogroups
@pytest.mark.parametrize("own_session", [True, False])
def test_a_learner_in_a_session_of_its_own_lowers_its_sessions_share_and_one_in_its_callers_leaves_it(own_session):
    """Niceness weighs only within a session's autogroup: a learner `robo-rl launch` started in its own session lowers
    the group's niceness too; one under `robo-rl train`, in the caller's session, must not lower the caller's."""
    from robo_rl.commands.common import autogroup_nice

    cmd = [sys.executable, "-c", NICED]
    done = subprocess.run(cmd, capture_output=True, text=True, start_new_session=own_session, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    nice, group = (None if word == "None" else int(word) for word in done.stdout.split()[-2:])
    # nice: 7, or this test's own niceness if that is higher. group: None in the kernel's root group, which has no
    # niceness of its own: the first session's (a container's init, where CI runs), which a caller's child shares
    assert nice >= 7 and group == (nice if own_session else autogroup_nice())


SPIN = """
import os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # both on one CPU: they compete for it
if sys.argv[1] == "yield":
    from robo_rl.commands.common import at_least_nice
    at_least_nice(19)
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.01)
used = time.process_time()
while time.time() < start + 2.0:
    pass
print(time.process_time() - used)
"""


@needs_autogroups
def test_a_niced_learner_in_a_session_of_its_own_leaves_the_cpu_to_a_busy_process_in_another_session():
    """What `robo-rl launch` makes: learner and actor each in a session of its own, both wanting the same CPU. With
    the threads' niceness alone the kernel shares it half and half between the two sessions; with the group's too the
    niced one gets a small part (weights 15 against 1024 at niceness 19)."""
    import time

    start = f"{time.time() + 1.5:.3f}"
    procs = {
        who: subprocess.Popen(
            [sys.executable, "-c", SPIN, who, start],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            cwd=ROOT,
        )
        for who in ("yield", "busy")
    }
    cpu = {who: float(p.communicate(timeout=120)[0].split()[-1]) for who, p in procs.items()}
    assert cpu["yield"] < 0.3 * cpu["busy"], cpu
