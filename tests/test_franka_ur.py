"""The Franka and UR drivers against their MuJoCo twins: the same driver code as on metal, only franky / ur_rtde
replaced by fakes backed by the twin, on a virtual clock (no test sleeps)."""

import sys

import mujoco
import numpy as np
import pytest

from hardware.arm import VirtualClock
from hardware.franka import FrankaDriver, panda_model
from hardware.ur import URDriver, ur5e_model

DRIVERS = {"franka": FrankaDriver, "ur": URDriver}
STEP_RAD = 0.1  # a joint move every arm can make from home without meeting a limit
SETTLE_S = 1.5  # enough clock time for the twin's servos (2 rad/s) and gripper (full stroke in 0.5 s) to arrive


@pytest.fixture(params=sorted(DRIVERS))
def arm(request):
    driver = DRIVERS[request.param](twin=True, clock=VirtualClock())
    driver.connect()
    yield driver
    driver.close()


def wait(driver, seconds: float) -> None:
    driver.clock.sleep_until(driver.clock.now() + seconds)


def test_reads_home_as_the_model_places_it(arm):
    state = arm.read()
    pos, quat = arm.model.fk(arm.model.home)
    np.testing.assert_allclose(state.joints, arm.model.home)
    np.testing.assert_allclose(state.ee_pos, pos, atol=1e-9)
    assert abs(abs(float(np.dot(state.ee_quat, quat))) - 1.0) < 1e-9
    assert state.fault is None and state.effort == 0.0 and state.gripper == 0.0
    assert arm.effort_kind == "force_n"


def test_command_joints_streams_to_the_twin_without_waiting(arm):
    goal = arm.home_joints + STEP_RAD
    t0 = arm.clock.now()
    arm.command_joints(goal)
    assert arm.clock.now() == t0  # asynchronous: the control loop keeps its rate
    wait(arm, 0.02)
    assert 0 < np.max(np.abs(arm.read().joints - arm.home_joints)) < STEP_RAD  # on its way, at servo speed
    wait(arm, SETTLE_S)
    np.testing.assert_allclose(arm.twin.read()[1], goal, atol=1e-9)
    state = arm.read()
    np.testing.assert_allclose(state.joints, goal, atol=1e-9)
    np.testing.assert_allclose(state.ee_pos, arm.model.fk(goal)[0], atol=1e-9)


def test_ur_servoj_runs_at_the_configured_rate():
    driver = URDriver(twin=True, clock=VirtualClock(), control_hz=20.0, servo_lookahead_s=0.05, servo_gain=500)
    driver.connect()
    driver.command_joints(driver.home_joints + STEP_RAD)
    control = driver._control
    assert control.servo_calls[-1] == (pytest.approx(0.05), 0.05, 500.0)  # servoJ's time = one command period
    with pytest.raises(ValueError, match="lookahead"):
        URDriver(twin=True, servo_lookahead_s=0.5)


def test_home_from_elsewhere(arm):
    arm.twin.move_by_hand(arm.home_joints - 3 * STEP_RAD, gripper=1.0)
    arm.home()
    wait(arm, SETTLE_S)
    state = arm.read()
    np.testing.assert_allclose(state.joints, arm.home_joints, atol=0.02)
    assert state.gripper == pytest.approx(0.0, abs=0.01)  # home opens the gripper


@pytest.mark.parametrize("closed", [1.0, 0.5, 0.0])
def test_gripper_command_maps_to_the_twin(arm, closed):
    arm.command_joints(arm.home_joints, gripper=closed)
    wait(arm, SETTLE_S)
    twin_gripper = arm.twin.read()[3]
    assert twin_gripper == pytest.approx(closed, abs=0.01)
    assert arm.read().gripper == pytest.approx(twin_gripper, abs=0.01)


def test_ur_gripper_speaks_the_robotiq_urcap_protocol():
    driver = URDriver(twin=True, clock=VirtualClock())
    driver.connect()
    driver.command_joints(driver.home_joints, gripper=0.5)
    lines = driver.sdk.urcap.lines
    assert "SET ACT 1" in lines and lines[-1] == "SET POS 128 GTO 1"
    driver.command_joints(driver.home_joints, gripper=0.505)  # below the deadband: not sent again
    assert lines[-1] == "SET POS 128 GTO 1" and lines.count("SET POS 128 GTO 1") == 1


def test_external_force_reads_as_effort_in_newtons(arm):
    arm.twin.inject_force(30.0, duration_s=0.5)
    assert arm.read().effort == pytest.approx(30.0)
    assert arm.default_effort_limit < 30.0  # the safety layer's default stops at such a contact
    wait(arm, 1.0)
    assert arm.read().effort == 0.0


def test_fault_surfaces_and_recover_clears_it(arm):
    arm.command_joints(arm.home_joints + STEP_RAD)
    wait(arm, 0.02)
    arm.twin.fault = "collision"
    state = arm.read()
    assert state.fault
    arm.command_joints(arm.home_joints - STEP_RAD)  # refused while faulted: the arm does not move
    wait(arm, SETTLE_S)
    np.testing.assert_allclose(arm.read().joints, state.joints)
    assert arm.read().fault
    arm.recover()
    assert arm.read().fault is None and arm.twin.fault is None
    wait(arm, SETTLE_S)
    np.testing.assert_allclose(arm.read().joints, state.joints)  # it stays where it stopped
    arm.command_joints(arm.home_joints)  # and takes commands again
    wait(arm, SETTLE_S)
    np.testing.assert_allclose(arm.read().joints, arm.home_joints, atol=1e-9)


def test_hold_stops_at_the_present_joints(arm):
    arm.command_joints(arm.home_joints + 5 * STEP_RAD)
    wait(arm, 0.05)
    arm.hold()
    stopped = arm.read().joints
    np.testing.assert_allclose(arm.twin.target, stopped)
    assert not np.allclose(stopped, arm.home_joints)
    wait(arm, SETTLE_S)
    np.testing.assert_allclose(arm.read().joints, stopped)
    assert arm.holds == 1


@pytest.mark.parametrize(("robot", "module", "extra"), [("franka", "franky", "franka"), ("ur", "rtde_control", "ur")])
def test_missing_sdk_is_one_line_naming_the_extra(robot, module, extra, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as where it is not installed (dev installs it)
    with pytest.raises(ImportError) as info:
        DRIVERS[robot]()
    message = str(info.value)
    assert "\n" not in message and f"uv sync --extra {extra}" in message and module in message


@pytest.fixture(scope="module")
def models():
    return [panda_model(), ur5e_model()]


def test_home_puts_the_tool_in_front_of_the_base_pointing_down(models):
    for model in models:
        pos, quat = model.fk(model.home)
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, quat)
        tool_axis = rot.reshape(3, 3)[:, 2]
        assert 0.3 < pos[0] < 0.6 and abs(pos[1]) < 0.2 and 0.3 < pos[2] < 0.6, (model.name, pos)
        assert tool_axis[2] < -0.99, (model.name, tool_axis)


@pytest.mark.parametrize("offset", [(0.1, 0.0, 0.0), (0.0, 0.12, -0.05), (-0.08, -0.1, -0.15), (0.05, 0.05, 0.1)])
def test_ik_round_trips_reachable_poses(models, offset):
    for model in models:
        pos, quat = model.fk(model.home)
        target = pos + np.asarray(offset)
        result = model.ik(target, quat, model.home, iters=100)
        assert result.ok, (model.name, offset, result)
        reached_pos, reached_quat = model.fk(result.q)
        np.testing.assert_allclose(reached_pos, target, atol=5e-3)
        assert abs(float(np.dot(reached_quat, quat))) > np.cos(0.05 / 2)
