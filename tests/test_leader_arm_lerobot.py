"""The leader-arm teleop device through lerobot's real `SO101Leader`, on the project's fake Feetech bus backed by a
MuJoCo twin (as tests/test_so101.py runs lerobot's `SOFollower`): the device's own factory (`lerobot_teleoperator`,
lerobot's config registry), lerobot's connect, configure, calibration check, normalisation and sync reads all run;
only the serial SDK under the bus is fake. A person moving the leader is the twin moved by hand."""

import time

import lerobot.teleoperators.so_leader.so_leader  # noqa: F401 - the module whose bus the fake replaces
import numpy as np
import pytest
from lerobot.teleoperators.so_leader import SO101Leader

from hardware.arm import VirtualClock
from hardware.fake_feetech import _BUS_SWAP_LOCK, FakeFeetechBus, FakeFeetechServos, _fake_bus_in
from hardware.so101 import (
    ARM_MOTORS,
    CURRENT_LIMIT_RAW,
    GRIPPER_MOTOR,
    STEPS_PER_RAD,
    so101_model,
    twin_calibration,
    twin_servos,
)
from hardware.teleop.leader_arm import LeaderArmDevice, lerobot_teleoperator
from hardware.twin import ArmTwin
from robo_rl.teleop.base import DeviceUnavailable

LEADER_MODULE = "lerobot.teleoperators.so_leader.so_leader"
KEYS = [f"{m}.pos" for m in (*ARM_MOTORS, GRIPPER_MOTOR)]  # lerobot's order: the motors' order on the bus
STEP_ATOL = 2e-3  # in action units: a few encoder steps over the narrowest calibrated range


def leader_factory(twin: ArmTwin, calibration_dir, calibrated: bool = True):
    """The device's default factory, building lerobot's leader over a fake bus backed by `twin`; `calibrated` writes
    the file `lerobot-calibrate` would (the motors' EEPROM already holds the twin's calibration)."""
    servos = FakeFeetechServos(twin, twin_servos(twin.arm), CURRENT_LIMIT_RAW)
    made = []

    def factory(**kwargs):
        with _BUS_SWAP_LOCK, _fake_bus_in(LEADER_MODULE, servos):
            teleop = lerobot_teleoperator(calibration_dir=calibration_dir, **kwargs)
        if calibrated and not teleop.calibration:
            teleop.calibration = twin_calibration(twin.arm)
            teleop.bus.calibration = teleop.calibration
            teleop._save_calibration()
        made.append(teleop)
        return teleop

    factory.made = made
    return factory


def expected_action(twin: ArmTwin, q: np.ndarray, gripper: float) -> np.ndarray:
    """lerobot's RANGE_M100_100 of each joint's encoder over its calibrated range, and RANGE_0_100 of the jaw (100
    open), mapped by the device's default ranges onto [-1, 1]."""
    cal = twin_calibration(twin.arm)
    joints = []
    for i, motor in enumerate(ARM_MOTORS):
        lo, hi = cal[motor].range_min, cal[motor].range_max
        step = (lo + hi) / 2 + q[i] * STEPS_PER_RAD  # the encoder, homing offset removed: mid-range at the zero pose
        joints.append(((step - lo) / (hi - lo) * 200 - 100) / 100)
    return np.array([*joints, 1.0 - 2.0 * gripper])


def wait_for(device, predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while not predicate(reading := device.read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; last reading {reading}")
        time.sleep(0.005)
    return reading


@pytest.fixture
def twin():
    return ArmTwin(so101_model(), VirtualClock())


def test_the_so101_leader_reads_the_arm_a_person_moves_through_lerobot(twin, tmp_path):
    factory = leader_factory(twin, tmp_path)
    device = LeaderArmDevice(port="/dev/ttyFAKE", id="leader", rate_hz=100, factory=factory).start()
    try:
        teleop = factory.made[0]
        assert type(teleop) is SO101Leader and isinstance(teleop.bus, FakeFeetechBus)
        assert teleop.is_connected and teleop.is_calibrated
        assert not twin.torque_enabled  # lerobot's leader configure leaves the motors limp for the hand
        assert device.action_keys == KEYS
        home = twin.read()[1]
        np.testing.assert_allclose(device.read().action, expected_action(twin, home, 0.0), atol=STEP_ATOL)
        moved = home + np.array([0.4, -0.3, 0.5, -0.6, 1.0])
        twin.move_by_hand(moved, gripper=0.75)
        reading = wait_for(device, lambda r: r.action[0] > 0.05)
        np.testing.assert_allclose(reading.action, expected_action(twin, moved, 0.75), atol=STEP_ATOL)
        assert reading.action[-1] == pytest.approx(-0.5, abs=0.01) and reading.connected
    finally:
        device.close()
    assert not teleop.is_connected and not teleop.bus.port_handler.is_open


def test_an_unplugged_leader_hands_control_back_and_reconnects(twin, tmp_path):
    factory = leader_factory(twin, tmp_path)
    device = LeaderArmDevice(port="/dev/ttyFAKE", id="leader", rate_hz=100, max_failures=2, factory=factory).start()
    try:
        port = factory.made[0].bus.port_handler
        device._update(is_intervention=True)  # as if the arbitration had handed control to the arm
        port.closePort()  # the USB cable pulled: lerobot's sync read fails
        reading = wait_for(device, lambda r: not r.connected)
        assert not reading.is_intervention
        twin.move_by_hand(twin.read()[1] + 0.2)
        port.openPort()
        reading = wait_for(device, lambda r: r.connected)
        np.testing.assert_allclose(reading.action[:-1], expected_action(twin, twin.read()[1], 0.0)[:-1], atol=STEP_ATOL)
    finally:
        device.close()


def test_an_uncalibrated_so101_leader_is_refused_naming_lerobot_calibrate(twin, tmp_path):
    factory = leader_factory(twin, tmp_path, calibrated=False)
    device = LeaderArmDevice(port="/dev/ttyFAKE", id="leader", factory=factory)
    with pytest.raises(DeviceUnavailable) as info:
        device.start()
    assert "not calibrated; run `lerobot-calibrate --teleop.type=so101_leader --teleop.port=/dev/ttyFAKE" in str(
        info.value
    )
    assert not factory.made[0].is_connected  # a refused start leaves the bus closed
