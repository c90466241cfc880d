"""`robo-rl doctor` and `robo-rl calibrate` on the twins (and on a robot that is not there)."""

from __future__ import annotations

import json
import socket
import sys
import time

import numpy as np
import pytest
from omegaconf import OmegaConf

from hardware.arm import ArmDriver, HardwareError
from hardware.calibrate import calibrate, write_calibration
from hardware.doctor import Doctor, driver_class, twin_choices
from hardware.so101 import SO101Driver
from robo_rl.cli import main
from robo_rl.config import ConfigError, load_config

BOX = "safety.workspace={low: [0.1, -0.1, 0.05], high: [0.25, 0.1, 0.2]}"


class NetworkArm(ArmDriver):
    """A new robot as its own class: the doctor learns its SDK and port from it, not from a table of robots."""

    robot = "netarm"
    sdk_module, sdk_extra = "json", "netarm"
    network_port: int | None = None  # the test sets a port that listens here


def test_the_doctor_passes_the_so101_twin_and_reports_its_figures(tmp_path, capsys):
    report = tmp_path / "doctor.json"
    assert main(["doctor", "twin=so101", BOX, f"report={report}"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "0 failed" in out
    assert "passes within 0.6 s)" in out, out  # a hold at 0.51 s beside "limit 0.5 s" read as over the limit
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    for name in ("connect", "control rate", "workspace", "e-stop", "watchdog"):
        assert checks[name]["status"] == "ok", checks[name]
    figures = json.loads(report.read_text())["figures"]
    assert 8.0 < figures["rate"]["achieved_hz"] < 11.0 and figures["watchdog_hold_s"] <= 0.6


def test_the_doctor_names_what_is_wrong_and_how_to_fix_it(capsys):
    # a workspace the arm cannot reach, on the twin (its virtual clock: the test above times the real-time checks)
    bad_box = "safety.workspace={low: [0.5, -0.1, 0.05], high: [0.7, 0.1, 0.2]}"
    assert main(["doctor", "twin=so101", "env.twin_clock=virtual", bad_box]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] workspace: 8 of 8 corners" in out and "shrink safety.workspace" in out
    # the real arm: no serial port, no SDK here
    assert main(["doctor", "env=so101", "env.driver.port=/dev/ttyNOPE"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] serial port: /dev/ttyNOPE does not exist" in out and "env.driver.port=" in out
    assert "uv sync --extra so101" in out
    assert main(["doctor", "twin=kuka"]) == 2
    assert main(["doctor", "env=point_reach"]) == 1 and "drives no arm" in capsys.readouterr().out
    assert main(["calibrate", "env=point_reach"]) == 2 and "drives no arm" in capsys.readouterr().err


def test_calibrating_by_hand_records_the_home_pose_and_the_box_the_tool_visited(tmp_path):
    driver = SO101Driver(twin=True)
    driver.connect()
    twin, model = driver.twin, driver.model
    home = np.array([0.2, -0.3, 0.5, 1.1, 0.0])
    corners = [np.array([dx, -0.3 + dz, 0.5 - dz / 2, 1.1, 0.0]) for dx in (-0.3, 0.3) for dz in (-0.5, 0.5)]
    visited = [model.fk(q)[0] for q in corners]

    class Hand:  # the person, and their Enter: home in the first phase, then each corner in turn
        def start(self):
            self.poses = [home] if not hasattr(self, "poses") else list(corners)

        def done(self):
            if not self.poses:
                return True
            twin.move_by_hand(self.poses.pop(0))  # the driver turned the torque off for this
            return False

    try:
        got_home, low, high = calibrate(driver, Hand(), margin_m=0.005)
        assert twin.torque_enabled  # back on after the hand is done
    finally:
        driver.close()
    assert np.allclose(got_home, home, atol=0.01)
    assert np.allclose(low, np.min(visited, axis=0) + 0.005, atol=0.005)
    assert np.allclose(high, np.max(visited, axis=0) - 0.005, atol=0.005)
    path = tmp_path / "so101.yaml"
    write_calibration(path, "so101", "twin", got_home, low, high)
    cfg = load_config(["env=so101", "safety=default", f"hardware.calibration={path}"])
    assert np.allclose(cfg.safety.workspace.low, low, atol=1e-4)
    assert np.allclose(cfg.env.driver.home, got_home, atol=1e-4)
    given = load_config(["env=so101", "safety=default", f"hardware.calibration={path}", "env.driver.home=[0,0,0,0,0]"])
    assert list(given.env.driver.home) == [0, 0, 0, 0, 0]  # the command line wins


def test_free_drive_turns_the_so101_torque_off_and_back_on_holding_where_it_was_left():
    driver = SO101Driver(twin=True)
    driver.connect()
    try:
        driver.freedrive(True)
        assert not driver.twin.torque_enabled
        driver.twin.move_by_hand(np.array([0.3, -0.2, 0.4, 1.0, 0.1]))
        driver.freedrive(False)
        assert driver.twin.torque_enabled
        time.sleep(0.2)
        assert np.allclose(driver.read().joints, [0.3, -0.2, 0.4, 1.0, 0.1], atol=0.01)  # no jump to an old goal
    finally:
        driver.close()


def test_a_calibration_that_hardly_moved_is_refused_and_a_missing_file_named(tmp_path, capsys):
    assert main(["calibrate", "twin=so101", "record_s=0.2", f"out={tmp_path / 'c.yaml'}"]) == 2
    assert "hardly moved" in capsys.readouterr().err and not (tmp_path / "c.yaml").exists()
    with pytest.raises(ConfigError, match="no such file"):
        load_config(["env=so101", f"hardware.calibration={tmp_path / 'missing.yaml'}"])
    assert OmegaConf.select(load_config(["env=so101"]), "hardware.calibration") is None


def test_calibrating_with_a_device_jogs_the_arm_through_the_safety_layer():
    from hardware.calibrate import jog_session
    from robo_rl.teleop.base import FakeDevice

    pad = FakeDevice("pad")
    cfg = load_config(["env=so101", "hardware.dry_run=true", "env.twin_clock=virtual"])
    env, step = jog_session(OmegaConf.to_container(cfg.env, resolve=True), [pad])
    moves = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]]

    class Operator:  # pushes the stick one way for a few steps, then presses success (the phase's Enter)
        def start(self):
            self.left = [m for m in moves for _ in range(5)] if hasattr(self, "left") else [[0, 0, 0]]

        def done(self):
            if not self.left:
                pad.push(["success"])
                return "success" in pad.read().events
            pad.push(motion=[*self.left.pop(0), 0, 0, 0])
            return False

    try:
        home, low, high = calibrate(env.unwrapped.driver, Operator(), margin_m=0.0, step=step, hand=False)
        assert env.counts["intervention_steps"] > 0  # the device, not the policy, moved the arm
    finally:
        env.close()
    assert np.all(high - low > 0.02)  # it went some way along every axis
    assert np.allclose(home, env.unwrapped.driver.home_joints, atol=0.02)


def test_the_doctor_checks_the_sdk_and_network_port_the_driver_class_declares(monkeypatch, capsys):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    monkeypatch.setattr(NetworkArm, "network_port", port)
    driver = driver_class(f"{__name__}.NetworkArm")  # as from a config's env.driver._target_
    doctor = Doctor(load_config(["env=franka"]), twin=False)
    try:
        doctor.sdk(driver, dry=False)
        doctor.devices({"host": "127.0.0.1"}, driver)
    finally:
        listener.close()
    out = capsys.readouterr().out
    assert "[ok  ] sdk: json is installed" in out and f"[ok  ] network: 127.0.0.1:{port} answers" in out
    monkeypatch.setattr(NetworkArm, "sdk_module", "netarm_sdk_not_installed")
    doctor.sdk(driver, dry=False)
    doctor.devices({"host": "127.0.0.1"}, driver)  # nothing listens there now
    out = capsys.readouterr().out
    assert "[FAIL] sdk: netarm_sdk_not_installed is not installed" in out and "uv sync --extra netarm" in out
    assert f"[FAIL] network: 127.0.0.1:{port} does not answer" in out
    # a shipped robot's config: the port and SDK its driver class names (libfranka's, franky), nothing listening
    monkeypatch.setitem(sys.modules, "franky", None)  # as on a workstation without it (the dev group installs it)
    franka = load_config(["env=franka", "env.driver.host=127.0.0.1"])
    driver = driver_class(franka.env.driver._target_)
    Doctor(franka, twin=False).sdk(driver, dry=False)
    Doctor(franka, twin=False).devices(OmegaConf.to_container(franka.env.driver), driver)
    out = capsys.readouterr().out
    assert "[FAIL] network: 127.0.0.1:1337 does not answer" in out and "uv sync --extra franka" in out
    with pytest.raises(HardwareError, match="hardware.nowhere.KukaDriver: cannot import it"):
        driver_class("hardware.nowhere.KukaDriver")
    with pytest.raises(HardwareError, match="not an arm driver"):
        driver_class("collections.OrderedDict")


def test_a_new_robot_yaml_is_a_twin_choice_and_a_bad_twin_is_refused_naming_the_choices(tmp_path, monkeypatch, capsys):
    assert twin_choices() == ("franka", "so101", "ur5e")  # so101_twin's driver is a twin already
    assert main(["doctor", "twin=kuka"]) == 2
    assert "twin=kuka: one of franka, so101, ur5e" in capsys.readouterr().err
    assert main(["calibrate", "twin=kuka"]) == 2
    assert "twin=kuka: one of franka, so101, ur5e" in capsys.readouterr().err
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "kuka.yaml").write_text("_target_: hardware.env.ArmEnv\ndriver:\n  _target_: kuka.KukaDriver\n")
    (tmp_path / "env" / "point_reach.yaml").write_text("_target_: sim.point_reach.PointReachEnv\n")
    monkeypatch.setattr("robo_rl.config.CONF_DIR", tmp_path)
    assert twin_choices() == ("kuka",)
