"""HG-DAgger collection (`human.takeover=dagger`, robo_rl/teleop/dagger.py) on the SO-101 twin: a follower arm env
(lerobot's SOFollower on the fake Feetech bus) under the policy, a pedal (a key-table device whose keys are bound to
pause and intervention_toggle) and an SO-101 leader through lerobot's own `SO101Leader` on a second fake bus, its
motors backed by a second twin a person can move by hand. The leader is driven through lerobot's class
(`enable_torque`, `send_feedback` writing Goal_Position, `disable_torque`)."""

import time

import numpy as np
import pytest

from hardware.arm import Clock, VirtualClock
from hardware.env import ArmEnv
from hardware.so101 import SO101Driver, so101_model
from hardware.teleop.leader_arm import LeaderArmDevice
from hardware.twin import ArmTwin
from robo_rl.commands.record_dagger import correction_segments, record_dagger_episodes
from robo_rl.data.datasets.io import load_episodes
from robo_rl.data.schema import fields_for_env
from robo_rl.data.storage import SegmentStore
from robo_rl.teleop.base import FakeDevice
from robo_rl.teleop.dagger import PHASE_CODES
from robo_rl.teleop.intervention import InterventionWrapper
from robo_rl.teleop.keys import KeyTableDevice
from tests.test_leader_arm_lerobot import leader_factory

PEDAL_KEYS = {"a": "pause", "b": "intervention_toggle"}
LEADER_KEYS = ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "gripper.pos"]  # onto x, y, z, gripper
POLICY = np.array([0.6, 0.4, 0.5, -1.0], np.float32)  # the policy's steady push: the arm moves while it acts
TOLERANCE_RAD = 0.01  # a few millimetres at the tool: synced, the leader commands no jump
SPEED_RAD_S = 1.0  # at the env's 10 Hz: 0.1 rad per poll


class Pedal(KeyTableDevice):
    """A USB foot pedal: a keyboard-like device that types its keys (pressed here by the test)."""

    def press(self, key: str) -> None:
        self._key_down(key)
        self._key_up(key)


@pytest.fixture
def follower():
    env = ArmEnv(SO101Driver(twin=True, clock=VirtualClock()), max_ee_step_m=0.02, reset_mode=None)
    yield env
    env.close()


@pytest.fixture
def leader(tmp_path, follower):
    """An SO-101 leader commanding the follower's tool (`follow=ee`: the arm env's end-effector steps)."""
    twin = ArmTwin(so101_model(), Clock())  # real time: its servos move while the test polls
    device = LeaderArmDevice(
        port="/dev/ttyFAKE", id="leader", rate_hz=100, follow="ee", env=follower, factory=leader_factory(twin, tmp_path)
    )
    device.twin = twin
    yield device
    device.close()


def dagger_env(follower, devices, **settings):
    return InterventionWrapper(
        follower,
        devices,
        takeover="dagger",
        handback_steps=0,
        dagger_sync_tolerance_rad=TOLERANCE_RAD,
        dagger_sync_speed_rad_s=SPEED_RAD_S,
        **settings,
    )


def follower_q(env) -> np.ndarray:
    return env.unwrapped.driver.twin.read()[1]


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_pause_sync_the_leader_correct_and_hand_back_by_pedal(follower, leader):
    pedal = Pedal("pedal", keys=PEDAL_KEYS)
    env = dagger_env(follower, [pedal, leader], dagger_commander="leader_arm")
    assert env.record_extras["dagger_phase"] == ((), np.int8)
    env.reset(seed=0)
    for _ in range(4):  # autonomous: the policy's actions run, nobody intervenes
        _, _, _, _, info = env.step(POLICY)
        assert info["dagger_phase"] == "autonomous" and not info["intervention"]

    pedal.press("a")  # pause: the press's own step holds (the policy's push is not executed) ...
    _, _, _, _, info = env.step(POLICY)
    assert info["dagger_phase"] == "paused" and info["intervention"] and env.paused
    assert np.abs(info["action_executed"][:3]).max() < 0.05  # the IK's settling at most, not the policy's 0.4-0.6
    np.testing.assert_allclose(info["action_policy"], POLICY)
    held = follower_q(env)
    clock = follower.driver.clock
    for _ in range(5):  # ... and the robot holds while paused: its servos stay put as time passes
        env.poll()
        clock.sleep_until(clock.now() + 0.5)
    assert env.paused and env.dagger.phase == "paused"
    np.testing.assert_allclose(follower_q(env), held, atol=1e-3)

    leader.twin.move_by_hand(leader.twin.read()[1] + np.array([0.5, -0.4, 0.3, -0.3, 0.2]))
    gap = np.abs(leader.twin.read()[1] - held)
    assert gap.max() > 0.2  # the person's leader is far from the robot's pose
    pedal._key_down("b")  # take over: the leader is driven first, rate-limited, with its torque on
    env.poll()
    assert env.dagger.phase == "syncing" and env.paused and leader.twin.torque_enabled
    step = np.abs(leader.twin.target - leader.twin.read()[1])
    assert step.max() <= SPEED_RAD_S / follower.control_hz + 2e-3  # one poll's goal: at most 0.1 rad away
    polls = 1
    while env.dagger.phase == "syncing":
        assert np.abs(leader.twin.read()[1] - held).max() > TOLERANCE_RAD - 5e-3  # not correcting before it is there
        time.sleep(0.02)
        env.poll()
        polls += 1
        assert polls < 400, f"the leader never reached the robot: {env.dagger.sync_error_rad} rad off"
    assert env.dagger.phase == "correcting" and not env.paused
    np.testing.assert_allclose(leader.twin.read()[1], held, atol=TOLERANCE_RAD + 5e-3)
    np.testing.assert_allclose(follower_q(env), held, atol=1e-3)  # the robot held all through the sync
    assert not leader.twin.torque_enabled  # torque off: the person's hand moves the leader

    tool = follower.driver.read().ee_pos
    _, _, _, _, info = env.step(POLICY)  # correcting, the leader untouched: the robot does not jump
    assert info["dagger_phase"] == "correcting" and info["intervention"]
    assert np.linalg.norm(follower.driver.read().ee_pos - tool) < 0.005
    pan = leader.twin.read()[1][0] + 0.3
    leader.twin.move_by_hand(np.r_[pan, leader.twin.read()[1][1:]])  # the person swings the leader's base
    for _ in range(12):  # correcting: the leader drives the robot, the policy's proposal kept
        time.sleep(0.02)  # the leader's reader at 100 Hz
        _, _, _, _, info = env.step(POLICY)
        assert info["dagger_phase"] == "correcting" and info["intervention"]
        assert info["intervention_device"] == "leader_arm" and info["record_extras"]["dagger_phase"] == 3
        np.testing.assert_allclose(info["action_policy"], POLICY)
    assert abs(follower_q(env)[0] - pan) < 0.05  # the robot's base followed the leader's

    pedal._key_up("b")
    pedal.press("b")  # the toggle again: hand back
    _, _, _, _, info = env.step(POLICY)
    assert info["dagger_phase"] == "autonomous" and not info["intervention"] and info["dagger_handback"]
    np.testing.assert_allclose(info["action_policy"], POLICY)
    _, _, _, _, info = env.step(POLICY)
    assert not info["dagger_handback"]  # said once: the actor empties a chunked policy's queue then
    stats = env.stats()
    assert stats["dagger_pauses"] == 1 and stats["dagger_syncs"] == 1 and stats["dagger_corrections"] == 1
    assert stats["takeovers"] == 1 and stats["dagger_correcting_steps"] == 13


def test_a_device_without_motors_skips_the_sync(follower, caplog):
    pad = FakeDevice("gamepad")
    env = dagger_env(follower, [pad])
    env.reset(seed=0)
    env.step(POLICY)
    pad.push(events=["pause"])
    env.step(POLICY)
    assert env.paused
    pad.push(is_intervention=True, motion=np.array([0, 0, 1.0, 0, 0, 0]))
    with caplog.at_level("INFO"):
        env.poll()
    assert env.dagger.phase == "correcting" and not env.paused
    assert "gamepad has no motors to drive to the robot's pose: correcting starts now" in caplog.text
    _, _, _, _, info = env.step(POLICY)
    assert info["intervention"] and info["action_executed"][2] > 0.5 and info["dagger_phase"] == "correcting"
    assert env.stats()["dagger_sync_skipped"] == 1


def test_a_leader_configured_without_motors_is_not_driven(follower, tmp_path):
    twin = ArmTwin(so101_model(), Clock())
    passive = LeaderArmDevice(
        port="/dev/ttyFAKE", action_keys=LEADER_KEYS, motors=False, factory=leader_factory(twin, tmp_path)
    )
    pedal = Pedal("pedal", keys=PEDAL_KEYS)
    env = dagger_env(follower, [pedal, passive], dagger_commander="leader_arm")
    try:
        env.reset(seed=0)
        pedal.press("b")  # take over straight from the policy
        _, _, _, _, info = env.step(POLICY)
        assert info["dagger_phase"] == "correcting" and info["intervention_device"] == "leader_arm"
        assert not twin.torque_enabled and len(twin.commands) == 0  # no goal was ever written to it
    finally:
        env.close()


class ScriptedPedal(FakeDevice):
    """A person's presses by the number of the read (the wrapper reads once per step, and once per poll while the
    robot holds): pause on the 3rd, take over (pushing the tool down) on the 5th, hand back on the 11th."""

    SCRIPT = {
        3: {"events": ["pause"]},
        5: {"is_intervention": True, "motion": np.array([0, 0, -1.0, 0, 0, 0])},
        11: {"is_intervention": False, "motion": np.zeros(6)},
    }

    def episode_start(self) -> None:
        self.reads = 0

    def _poll(self) -> None:
        self.reads += 1
        self.push(**self.SCRIPT.get(self.reads, {}))


def test_keep_corrections_writes_only_the_corrected_steps_and_the_chunk_queue_restarts(follower, tmp_path):
    pedal = ScriptedPedal("pedal")
    env = dagger_env(follower, [pedal])
    follower.max_episode_steps = 14
    resets = []

    def run(keep, path):
        resets.clear()
        store = SegmentStore(path, fields_for_env(env), partition="demos")
        counts = record_dagger_episodes(
            env, lambda obs: POLICY, lambda: resets.append(pedal.reads), store, 1, keep, realtime=False
        )
        return counts, load_episodes(path, progress=False)

    counts, episodes = run("corrections", tmp_path / "corrections")
    assert counts["corrections"] == 1 and counts["written"] == 1 and counts["stopped"] == "done"
    (episode,) = episodes
    n = len(episode.records["intervention"]) - 1  # its first record is the observation the correction started from
    assert n == counts["corrected_steps"] == 5  # steps 4..8 of the policy's asking: the person's, no more
    assert episode.records["intervention"][1:].all()
    assert (episode.records["extra/dagger_phase"][1:] == PHASE_CODES["correcting"]).all()
    np.testing.assert_allclose(episode.records["action_policy"][1:], np.tile(POLICY, (n, 1)))
    assert (episode.records["action_executed"][1:, 2] < -0.5).all()  # what the person commanded
    assert episode.records["truncated"][-1]  # cut at the hand-back, not a true end
    assert resets == [0, 11]  # at the episode's start and on the hand-back: a chunked policy re-plans from here

    counts, episodes = run("all", tmp_path / "all")
    (episode,) = episodes
    phases = episode.records["extra/dagger_phase"][1:]
    assert len(phases) == 14 == counts["steps"]
    assert list(phases[:3]) == [0, 0, 1]  # two policy steps, then the held step of the pause press
    assert correction_segments(list(phases)) == [(3, 8)]
    assert episode.records["intervention"][1:].sum() == 6  # the held step and five corrected ones


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"dagger_commander": "leader"}, "human.dagger_commander='leader' is not one of the devices (pedal)"),
        ({"dagger_sync_tolerance_rad": 0.0}, "must be above 0 (got 0.0, 1.0, 10.0)"),
        ({"takeover": "dagger_please"}, "human.takeover='dagger_please': must be one of explicit, implicit, both"),
    ],
)
def test_bad_settings_are_refused_in_one_line(follower, settings, message):
    base = {"takeover": "dagger", "dagger_sync_speed_rad_s": 1.0}
    with pytest.raises(ValueError) as info:
        InterventionWrapper(follower, [FakeDevice("pedal")], **{**base, **settings})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_record_mode_dagger_refuses_a_missing_policy_and_a_bad_keep(tmp_path):
    from robo_rl.commands.record import cmd_record
    from robo_rl.commands.record_dagger import DaggerUsageError

    with pytest.raises(DaggerUsageError, match="mode=dagger needs policy=<checkpoint .pt or run folder>"):
        cmd_record([str(tmp_path / "out"), "mode=dagger"])
    with pytest.raises(DaggerUsageError, match="keep=some: corrections"):
        cmd_record([str(tmp_path / "out"), "mode=dagger", f"policy={tmp_path}", "keep=some"])
    with pytest.raises(DaggerUsageError, match="does not exist"):
        cmd_record([str(tmp_path / "out"), "mode=dagger", f"policy={tmp_path / 'nope.pt'}"])


def test_a_training_run_records_each_steps_phase(tmp_path):
    """`robo-rl train human=sim human.takeover=dagger`: the simulated human's takeovers (no motors: no sync) reach the
    learner as correcting records, flagged intervention, and the actor reports its corrections."""
    from robo_rl.runs import read_metrics
    from tests.test_pipeline import run_pair, toy_config

    cfg = toy_config(
        tmp_path, "human=sim", "human.takeover=dagger", "train.total_env_steps=200", "human.devices.0.hold_steps=3"
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done"
    data, n = learner.replay.online.data, learner.replay.online.size
    phase, human = data["extra/dagger_phase"][:n], data["intervention"][:n].astype(bool)
    assert human.sum() > 20, "the simulated human took over a random-ish policy"
    np.testing.assert_array_equal(phase == PHASE_CODES["correcting"], human)  # every takeover step, and only those
    stats = [m["actor_stats"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m.get("actor_stats")]
    assert any(s.get("actor-0", {}).get("human_dagger_corrections", 0) > 0 for s in stats), stats[-1]

    # the run's policy, corrected by a person: `robo-rl record <dst> mode=dagger policy=<run> human=sim`
    from robo_rl.cli import main

    dst = tmp_path / "corrections"
    (checkpoint,) = (tmp_path / "run" / "checkpoints").glob("step_*.pt")  # a checkpoint given alone: its config too
    args = ["record", str(dst), "mode=dagger", f"policy={checkpoint}", "human=sim", "episodes=2", "keep=all"]
    assert main([*args, "env=point_reach", "experiment=rlpd", f"cache_dir={tmp_path}", "actor.realtime=false"]) == 0
    episodes = load_episodes(dst, progress=False)
    assert len(episodes) == 2  # whole episodes (keep=all), each to its end
    assert all(e.records["terminated"][-1] or e.records["truncated"][-1] for e in episodes)
    for e in episodes:
        phase, human = e.records["extra/dagger_phase"][1:], e.records["intervention"][1:].astype(bool)
        np.testing.assert_array_equal(phase == PHASE_CODES["correcting"], human)
    assert any(e.interventions for e in episodes)


def test_a_leader_following_the_tool_needs_an_arm_env():
    from sim.point_reach import PointReachEnv

    with pytest.raises(ValueError) as info:
        LeaderArmDevice(port="/dev/ttyFAKE", follow="ee", env=PointReachEnv())
    assert str(info.value).startswith("leader_arm follow=ee needs an arm env (hardware.env.ArmEnv); this one lacks")
    assert "model.fk" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="leader_arm follow='wrist': one of joints, ee"):
        LeaderArmDevice(port="/dev/ttyFAKE", follow="wrist")


def test_a_commanding_leader_that_is_not_plugged_in_leaves_the_others_to_correct(follower, caplog):
    unplugged = FakeDevice("leader_arm", fail_on_open=True)
    pad = FakeDevice("gamepad")
    with caplog.at_level("WARNING"):
        env = dagger_env(follower, [pad, unplugged], dagger_commander="leader_arm")
    assert "leader_arm is not plugged in: the device that takes over drives the corrections" in caplog.text
    env.reset(seed=0)
    pad.push(is_intervention=True, motion=np.array([0, 0, 1.0, 0, 0, 0]))
    _, _, _, _, info = env.step(POLICY)
    assert info["dagger_phase"] == "correcting" and info["intervention_device"] == "gamepad"


class AbortingPedal(ScriptedPedal):
    """The same presses, and abort (terminate_episode) on the 8th read, mid-correction."""

    SCRIPT = {**ScriptedPedal.SCRIPT, 8: {"events": ["terminate_episode"]}}


def test_an_abort_ends_the_session_and_keeps_the_corrections_made_before_it(follower, tmp_path):
    # unlike `robo-rl record`, whose aborted demonstration is all or nothing and is dropped, a correction is the
    # person's data from the step it began: the steps corrected before the abort stay on disk, the session ends
    pedal = AbortingPedal("pedal")
    env = dagger_env(follower, [pedal])
    follower.max_episode_steps = 14
    store = SegmentStore(tmp_path / "out", fields_for_env(env), partition="demos")
    counts = record_dagger_episodes(env, lambda obs: POLICY, lambda: None, store, 3, "corrections", realtime=False)
    assert counts["stopped"] == "aborted by the person (terminate_episode)" and counts["episodes"] == 1
    (episode,) = load_episodes(tmp_path / "out", progress=False)
    assert 0 < counts["corrected_steps"] < 5  # cut short by the abort, not the five a hand-back would give
    assert len(episode.records["intervention"]) - 1 == counts["corrected_steps"]
    assert episode.records["intervention"][1:].all()
