"""The safety layer proven on the SO-101 twin, through the real driver code (lerobot's robot class on a fake bus):
out-of-box commands are clipped, a stalled actor triggers the watchdog hold in time, a force spike stops the arm
until a human acknowledges, a NaN action never reaches the driver."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hardware.arm import Clock, VirtualClock
from hardware.env import ArmEnv
from hardware.safety import SafetyWrapper
from hardware.so101 import SO101Driver
from robo_rl.envs import SafetyStop
from robo_rl.teleop.base import FakeDevice
from robo_rl.teleop.intervention import InterventionWrapper

BOX = {"low": [0.12, -0.1, 0.06], "high": [0.26, 0.1, 0.2]}


def arm_env(clock=None, **env_kw) -> ArmEnv:
    driver = SO101Driver(twin=True, clock=clock or VirtualClock())
    return ArmEnv(driver, **{"control_hz": 10.0, "max_ee_step_m": 0.02, **env_kw})


@pytest.fixture
def safe():
    env = SafetyWrapper(arm_env(), workspace=BOX, watchdog_s=None)
    env.reset(seed=0)
    yield env
    env.close()


def act(env, xyz, gripper=-1.0) -> np.ndarray:
    return np.array([*xyz, gripper], np.float32)


def test_home_is_inside_the_test_box(safe):
    pos = safe.unwrapped.last_state.ee_pos
    assert np.all(pos > BOX["low"]) and np.all(pos < BOX["high"]), pos


def test_a_policy_commanding_out_of_the_box_is_clipped_and_the_tool_stays_inside(safe):
    low, high = np.array(BOX["low"]), np.array(BOX["high"])
    reports = []
    for direction in ([1, 0, 0], [0, 0, -1], [0, -1, 0], [0, 0, 1]):
        for _ in range(15):
            _, _, _, _, info = safe.step(act(safe, direction))
            reports.append(info["safety"])
            pos = safe.unwrapped.last_state.ee_pos
            assert np.all(pos >= low - 2e-3) and np.all(pos <= high + 2e-3), (direction, pos)
    hits = {h for r in reports for h in r.get("workspace", [])}
    assert {"x_high", "z_low", "y_low", "z_high"} <= hits  # each face reported when it clipped
    assert safe.stats()["workspace"] > 0
    # the executed action says what was applied: at the face, no further motion outward
    _, _, _, _, info = safe.step(act(safe, [0, 0, 1]))
    assert info["action_executed"][2] == pytest.approx(0.0, abs=0.05) and info["action_policy"][2] == 1.0


def test_a_tool_outside_the_box_may_only_move_back_in():
    env = SafetyWrapper(arm_env(), workspace={"low": [0.0, -0.3, 0.0], "high": [0.5, 0.3, 0.05]}, watchdog_s=None)
    try:
        env.reset(seed=0)
        start = env.unwrapped.last_state.ee_pos.copy()
        assert start[2] > 0.05  # home is above this box
        env.step(act(env, [0, 0, 1]))
        assert env.unwrapped.last_state.ee_pos[2] <= start[2] + 1e-3  # not further out
        env.step(act(env, [0, 0, -1]))
        assert env.unwrapped.last_state.ee_pos[2] < start[2] - 5e-3  # back toward it
    finally:
        env.close()


def test_per_step_translation_and_joint_speed_limits():
    env = SafetyWrapper(arm_env(max_ee_step_m=0.05), max_step_m=0.01, max_joint_speed_rad_s=0.5, watchdog_s=None)
    try:
        env.reset(seed=0)
        before = env.unwrapped.last_state
        _, _, _, _, info = env.step(act(env, [1, 0, 0]))
        assert info["safety"]["translation_m"] == pytest.approx(0.05, abs=1e-3)
        assert np.linalg.norm(env.unwrapped.last_state.ee_pos - before.ee_pos) <= 0.0105
        assert np.max(np.abs(env.unwrapped.driver.last_command - before.joints)) <= 0.5 / 10 + 1e-6
    finally:
        env.close()


def test_joint_targets_keep_the_margin_inside_the_joint_limits(safe):
    model = safe.unwrapped.model
    q = model.upper + 0.3
    guarded, notes = safe.guard_joints(q, safe.unwrapped.last_state, 10.0)
    assert np.all(guarded <= model.upper - safe.joint_margin_rad + 1e-9)
    assert set(notes["joint_limits"]) == set(model.joint_names)


def test_a_nan_action_never_reaches_the_driver_and_ends_the_episode(safe):
    driver = safe.unwrapped.driver
    sent = driver.commands
    obs, reward, terminated, truncated, info = safe.step(np.array([np.nan, 0, 0, -1], np.float32))
    assert driver.commands == sent  # nothing commanded but a hold
    assert truncated and not terminated and info["ended_by"] == "safety" and "non-finite" in info["safety"]["refused"]
    assert np.all(np.isfinite(info["action_executed"])) and np.all(np.isfinite(info["action_policy"]))
    assert driver.holds >= 1 and safe.stats()["refused_steps"] == 1
    _, _, _, truncated, info = safe.step(np.zeros(7, np.float32))  # the wrong shape: refused the same way
    assert truncated and "shape" in info["safety"]["refused"]


def test_a_force_spike_stops_the_arm_and_it_stays_stopped_until_acknowledged(safe):
    twin = safe.unwrapped.driver.twin
    twin.inject_force(40.0, duration_s=0.2)
    _, _, terminated, truncated, info = safe.step(act(safe, [1, 0, 0]))
    assert truncated and info["ended_by"] == "safety" and "motor load" in info["safety"]["stop"]
    held = twin.read()[1]
    for _ in range(3):  # further commands are not executed: the arm holds
        _, _, _, truncated, info = safe.step(act(safe, [1, 0, 0]))
        assert truncated and info["safety"]["stopped"]
    safe.unwrapped.driver.clock.sleep_until(safe.unwrapped.driver.clock.now() + 1.0)
    assert np.allclose(twin.read()[1], held, atol=1e-6)
    acker = threading.Timer(0.3, lambda: safe.acknowledge("test"))
    start = time.monotonic()
    acker.start()
    safe.reset()  # waits for the acknowledgement before the arm moves home
    assert time.monotonic() - start >= 0.25 and safe.stopped is None
    assert safe.stats()["stops"] == 1 and safe.stats()["acknowledged"] == 1
    _, _, _, truncated, info = safe.step(act(safe, [0, 0, 0]))
    assert not truncated and "stop" not in info["safety"]


def test_a_device_acknowledges_a_stop_and_an_estop_while_stopped_ends_the_run():
    pad = FakeDevice("pad")
    env = InterventionWrapper(SafetyWrapper(arm_env(), watchdog_s=None, ack_timeout_s=5.0), [pad])
    safe = env.env
    try:
        env.reset(seed=0)
        safe.unwrapped.driver.twin.inject_force(40.0)
        env.step(act(env, [0, 0, 0]))
        assert safe.stopped
        threading.Timer(0.2, lambda: pad.push(["acknowledge"])).start()
        env.reset()  # the wrapper's devices are read while the arm waits
        assert safe.stopped is None
        safe.unwrapped.driver.twin.inject_force(40.0)
        env.step(act(env, [0, 0, 0]))
        threading.Timer(0.2, lambda: pad.push(["estop"])).start()
        with pytest.raises(SafetyStop, match="e-stop"):
            env.reset()
    finally:
        env.close()


def test_an_unacknowledged_stop_ends_after_the_timeout():
    env = SafetyWrapper(arm_env(), watchdog_s=None, ack_timeout_s=0.2)
    try:
        env.reset(seed=0)
        env.unwrapped.driver.twin.inject_force(40.0)
        env.step(act(env, [0, 0, 0]))
        with pytest.raises(SafetyStop, match="nobody acknowledged within"):
            env.reset()
    finally:
        env.close()


def test_a_stalled_actor_triggers_the_watchdog_hold_within_the_configured_time():
    limit = 0.3
    env = SafetyWrapper(arm_env(clock=Clock(), control_hz=50.0), watchdog_s=limit)
    try:
        env.reset(seed=0)
        twin = env.unwrapped.driver.twin
        for _ in range(3):
            env.step(act(env, [1, 0, 0]))
        stalled_at = time.monotonic()
        last_command = twin.commands[-1][0]
        time.sleep(limit * 2.5)
        holds = [t for t, _ in twin.commands if t > last_command]
        assert env.stats()["watchdog_holds"] == 1 and len(holds) == 1  # held once, not hammered
        assert limit <= holds[0] - stalled_at <= limit + 0.1, holds[0] - stalled_at
        moving = twin.read()[2]
        assert np.allclose(moving, 0.0)  # the hold's target is where the arm is
        _, _, _, truncated, info = env.step(act(env, [0, 0, 0]))
        assert info["safety"]["watchdog_hold_s"] >= limit and not truncated  # reported; the episode goes on
    finally:
        env.close()


def test_the_watchdog_does_not_fire_while_steps_keep_coming():
    env = SafetyWrapper(arm_env(clock=Clock(), control_hz=50.0), watchdog_s=0.2)
    try:
        env.reset(seed=0)
        for _ in range(30):  # 0.6 s of steps at 50 Hz
            env.step(act(env, [0, 0, 0]))
        assert env.stats().get("watchdog_holds", 0) == 0
    finally:
        env.close()


def test_the_safety_layer_refuses_an_env_that_is_not_an_arm():
    from sim.point_reach import PointReachEnv

    with pytest.raises(ValueError, match="guards an arm env"):
        SafetyWrapper(PointReachEnv())


def test_rotation_steps_are_limited_per_step_on_an_arm_with_orientation_actions():
    from hardware.franka import FrankaDriver
    from hardware.kinematics import quat_error

    env = SafetyWrapper(
        ArmEnv(FrankaDriver(twin=True, clock=VirtualClock()), rotation=True, max_rot_step_rad=0.1),
        max_rot_step_rad=0.05,
        watchdog_s=None,
    )
    try:
        env.reset(seed=0)
        before = env.unwrapped.last_state.ee_quat
        _, _, _, _, info = env.step(np.array([0, 0, 0, 1, 1, 1, -1], np.float32))
        assert info["safety"]["rotation_rad"] == pytest.approx(0.1 * np.sqrt(3), abs=1e-3)
        turned = np.linalg.norm(quat_error(env.unwrapped.last_state.ee_quat, before))
        assert 0.04 < turned <= 0.051, turned  # it turned, by the limit and no more
    finally:
        env.close()
