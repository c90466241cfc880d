"""The SO-101 driver on its twin: lerobot's SOFollower (connect, configure, get_observation, send_action) over a
fake Feetech bus backed by MuJoCo, on a virtual clock so nothing sleeps."""

import importlib.util
import json

import numpy as np
import pytest
from lerobot.robots.so_follower import SOFollower

from hardware.arm import HardwareError, VirtualClock
from hardware.fake_feetech import FakeFeetechBus
from hardware.so101 import ARM_MOTORS, SO101Driver, so101_model
from hardware.twin import ArmTwin

QUANT_RAD = 2 * np.pi / 4095  # one encoder step
MOVE_TOL_RAD = 0.02  # ArmDriver.move_to's default tolerance
SETTLE_S = 3.0  # the twin's servos (2 rad/s) cover any test move in this


@pytest.fixture
def arm():
    clock = VirtualClock()
    driver = SO101Driver(twin=True, clock=clock)
    driver.connect()
    yield driver
    driver.close()


def settle(driver, seconds=SETTLE_S):
    driver.clock.sleep_until(driver.clock.now() + seconds)
    return driver.read()


def test_connect_reads_home_through_lerobot(arm):
    assert type(arm.lerobot) is SOFollower and isinstance(arm.lerobot.bus, FakeFeetechBus)
    assert arm.lerobot.is_calibrated
    assert "huggingface" not in str(arm.lerobot.calibration_fpath)  # the user's calibration is never touched
    model = so101_model()
    state = arm.read()
    np.testing.assert_allclose(state.joints, model.home, atol=QUANT_RAD)
    np.testing.assert_allclose(state.ee_pos, model.fk(model.home)[0], atol=1e-3)
    assert state.ee_pos[0] > 0.1  # the tool starts in front of the base
    assert state.gripper == pytest.approx(0.0, abs=0.01)  # open
    obs = arm.lerobot.get_observation()  # lerobot's own degrees agree with the model's radians
    np.testing.assert_allclose([obs[f"{m}.pos"] for m in ARM_MOTORS], np.rad2deg(model.home), atol=0.1)


def test_command_joints_moves_the_twin_over_time(arm):
    goal = np.array([0.6, 0.1, -0.2, 0.5, 1.0])
    arm.command_joints(goal)
    np.testing.assert_allclose(arm.twin.target, goal, atol=QUANT_RAD)
    assert np.max(np.abs(arm.read().joints - goal)) > 0.5  # not there at once
    moving = settle(arm, 0.1)
    assert np.max(np.abs(moving.joint_vel)) > 1.0  # rad/s from successive reads
    state = settle(arm)
    np.testing.assert_allclose(state.joints, goal, atol=2 * QUANT_RAD)
    np.testing.assert_allclose(state.ee_pos, arm.model.fk(goal)[0], atol=1e-3)


def test_home_returns_the_arm_from_elsewhere(arm):
    arm.command_joints(np.array([-0.8, 0.4, -0.5, -0.3, -1.2]))
    settle(arm)
    arm.home()
    state = settle(arm, 0.5)
    np.testing.assert_allclose(state.joints, arm.home_joints, atol=MOVE_TOL_RAD)
    assert arm.twin.gripper == 0.0  # home opens the gripper


def test_gripper_command_drives_the_twin_jaw(arm):
    arm.command_joints(arm.home_joints, gripper=1.0)
    assert settle(arm).gripper == pytest.approx(1.0, abs=0.01)
    assert arm.twin.gripper == pytest.approx(1.0, abs=0.01)
    arm.command_joints(arm.home_joints, gripper=0.3)
    assert settle(arm).gripper == pytest.approx(0.3, abs=0.01)
    assert arm.twin.gripper == pytest.approx(0.3, abs=0.01)
    arm.command_joints(arm.home_joints)  # None keeps the jaw where it is
    assert settle(arm).gripper == pytest.approx(0.3, abs=0.01)


def test_out_of_range_joint_is_clipped_to_the_model_limit(arm):
    goal = arm.home_joints.copy()
    goal[0] = 3.0  # shoulder_pan beyond its 1.92 rad limit
    arm.command_joints(goal)
    state = settle(arm)
    assert state.joints[0] == pytest.approx(arm.model.upper[0], abs=2 * QUANT_RAD)


def test_injected_force_reads_as_high_effort(arm):
    assert arm.read().effort < 0.2
    arm.twin.inject_force(45.0, duration_s=0.5)
    assert arm.read().effort > arm.default_effort_limit
    assert settle(arm, 1.0).effort < 0.2


def test_torque_off_lets_a_hand_move_the_arm(arm):
    arm.lerobot.bus.disable_torque()  # lerobot's own call, through Torque_Enable
    assert not arm.twin.torque_enabled
    by_hand = np.array([0.3, -0.2, 0.8, 0.6, 0.4])
    arm.twin.move_by_hand(by_hand)
    np.testing.assert_allclose(arm.read().joints, by_hand, atol=QUANT_RAD)
    arm.lerobot.bus.enable_torque()
    assert arm.twin.torque_enabled
    goal, present = arm.lerobot.bus.sync_read("Goal_Position"), arm.lerobot.bus.sync_read("Present_Position")
    assert goal == pytest.approx(present, abs=0.1)  # degrees: the motors' goals followed them by hand
    np.testing.assert_allclose(settle(arm).joints, by_hand, atol=QUANT_RAD)  # holds there, no jump back


def test_hold_stops_a_move_where_the_arm_is():
    clock = VirtualClock()
    twin = ArmTwin(so101_model(), clock)  # a twin the caller built: the driver runs on its model and clock
    with SO101Driver(twin=twin) as driver:
        assert driver.clock is clock and driver.model is twin.arm
        driver.command_joints(np.array([1.2, 0.5, -0.5, 0.0, 1.5]))
        clock.sleep_until(0.2)
        driver.hold()
        held = driver.read().joints
        assert np.max(np.abs(held - driver.home_joints)) > 0.2  # it had moved
        np.testing.assert_allclose(settle(driver).joints, held, atol=2 * QUANT_RAD)


def test_close_leaves_torque_off_as_lerobot_does(arm):
    arm.close()
    assert not arm.twin.torque_enabled
    with pytest.raises(HardwareError, match="not connected"):
        arm.command_joints(arm.home_joints)


def test_max_relative_target_is_lerobots_step_limit():
    driver = SO101Driver(twin=True, clock=VirtualClock(), max_relative_target=5.0)
    with driver:
        start = driver.read().joints
        driver.command_joints(start + 1.0)
        np.testing.assert_allclose(driver.twin.target - start, np.deg2rad(5.0), atol=2 * QUANT_RAD)


def test_missing_sdk_is_one_line_naming_the_extra():
    if importlib.util.find_spec("scservo_sdk") is not None:
        pytest.skip("feetech-servo-sdk is installed here")
    with pytest.raises(ImportError) as err:
        SO101Driver(port="/dev/ttyACM0")
    assert "uv sync --extra so101" in str(err.value) and "\n" not in str(err.value)


def test_mismatching_calibration_names_lerobot_calibrate(tmp_path):
    SO101Driver(twin=True, clock=VirtualClock(), calibration_dir=str(tmp_path), id="left").close()
    path = tmp_path / "left.json"
    calibration = json.loads(path.read_text())
    calibration["elbow_flex"]["homing_offset"] += 100  # a stale file: the motors were calibrated since
    path.write_text(json.dumps(calibration))
    driver = SO101Driver(twin=True, clock=VirtualClock(), calibration_dir=str(tmp_path), id="left", port="/dev/ttyX")
    with pytest.raises(
        HardwareError, match="lerobot-calibrate --robot.type=so101_follower --robot.port=/dev/ttyX --robot.id=left"
    ):
        driver.connect()
    assert not driver.connected and not driver.lerobot.is_connected


@pytest.mark.parametrize("q", [[0.0, -0.4, 0.4, 1.3, 0.0], [0.5, 0.3, 0.2, 0.6, 0.5], [-0.7, -0.1, 0.9, 1.0, -1.0]])
def test_ik_round_trip(q):
    model = so101_model()
    pos, _ = model.fk(np.array(q))
    result = model.ik(pos, None, model.home)
    assert result.ok
    np.testing.assert_allclose(model.fk(result.q)[0], pos, atol=5e-3)
