"""A leader arm (SO-100/SO-101/Koch, any lerobot teleoperator) as a teleop device: it commands the whole env action.

A daemon thread calls the teleoperator's `get_action()` at `rate_hz` (a bus read takes milliseconds, too long to do
in `read()`) and maps the values named by `action_keys`, in the order of the env's action vector, linearly from
their `ranges` onto [-1, 1]. The default factory builds the lerobot config with `use_degrees=False` where the config
has it, so calibrated joints read -100..100 and grippers 0..100, which are the default ranges.

Whether the human is in control is decided by the arbitration wrapper from the arm's motion; an explicit toggle is
another device's job. The arm is connected without calibrating (lerobot's calibration prompts on the terminal, which
would hang the actor): an uncalibrated arm is reported, with the command that calibrates it. Repeated read failures
(the arm unplugged) read `connected=False` and hand control back; reads that succeed again reconnect it.

A leader with motors (`motors: true`, an SO-101 leader's STS3215s) can be driven to the follower's pose before a
correction (`human.takeover=dagger`, robo_rl/teleop/dagger.py): `drive_toward` turns its torque on and writes goal
positions through lerobot's own leader class (`enable_torque`, and `send_feedback`, which writes `Goal_Position`),
each step at most `max_step_rad` from where the arm is; `release` turns the torque off for the person's hand. The
follower's pose is in radians from each joint's calibrated mid-range (lerobot's degrees convention, the one the
SO-101 follower driver reads in) and its gripper 0 open .. 1 closed (`gripper_open_pos`..`gripper_closed_pos` of
the leader's 0..100 jaw).

`follow` says what the leader commands: `joints` gives its readings as the env's action (`action_keys` onto the
action vector: an env that takes joint targets), `ee` the end-effector step toward where the leader's joints would put
the follower's tool (forward kinematics of the env's own arm model, as a fraction of the env's `max_ee_step_m` per
step) with the jaw's opening as the gripper: the arm envs' action (hardware/env.py). Synced first, an `ee` leader
commands no motion until the person moves it.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from robo_rl.teleop.base import DeviceUnavailable, TeleopDevice

# lerobot registers a teleoperator's config when its package is imported; these types live in a shared package.
_CONFIG_PACKAGES = {"so100_leader": "so_leader", "so101_leader": "so_leader", "bi_so_leader": "bi_so_leader"}


def lerobot_teleoperator(teleop_type: str, port: str, id: str | None = None, **options: Any) -> Any:  # noqa: A002
    """A lerobot teleoperator of `teleop_type` on `port` (not connected), through lerobot's own config registry."""
    from lerobot.teleoperators import TeleoperatorConfig, make_teleoperator_from_config

    try:
        importlib.import_module(f"lerobot.teleoperators.{_CONFIG_PACKAGES.get(teleop_type, teleop_type)}")
    except ImportError:
        pass  # an out-of-tree type may register itself by other means; get_choice_class says if it did not
    try:
        config_cls = TeleoperatorConfig.get_choice_class(teleop_type)
    except KeyError as exc:
        known = ", ".join(sorted(TeleoperatorConfig.get_known_choices()))
        raise ValueError(f"unknown lerobot teleoperator type {teleop_type!r} (registered: {known})") from exc
    fields = {field.name for field in dataclasses.fields(config_cls)}
    if "use_degrees" in fields:
        options.setdefault("use_degrees", False)
    return make_teleoperator_from_config(config_cls(port=port, id=id, **options))


class LeaderArmDevice(TeleopDevice):
    """A lerobot leader arm; `factory(teleop_type=, port=, id=)` builds the teleoperator (tests pass a fake)."""

    name = "leader_arm"
    needs_env = True  # follow=ee reads the env's arm model and step size

    def __init__(
        self,
        name: str | None = None,
        teleop_type: str = "so101_leader",
        port: str | None = None,
        id: str | None = None,  # noqa: A002 - lerobot's name for the calibration id
        action_keys: Sequence[str] | None = None,
        ranges: dict[str, Sequence[float]] | None = None,
        rate_hz: float = 50.0,
        max_failures: int = 3,
        factory: Callable[..., Any] | None = None,
        motors: bool = True,
        gripper_open_pos: float = 100.0,
        gripper_closed_pos: float = 0.0,
        follow: str = "joints",
        env: Any = None,
    ) -> None:
        super().__init__(name)
        if follow not in FOLLOW:
            raise ValueError(f"leader_arm follow={follow!r}: one of {', '.join(FOLLOW)}")
        self.follow, self._env = follow, env
        if follow == "ee":
            _check_arm_env(env)
            if action_keys is None:
                action_keys = [f"{joint}.pos" for joint in env.model.joint_names] + ["gripper.pos"]
        self._values: dict[str, Any] | None = None  # follow=ee: the newest joint readings
        self._ee_now: np.ndarray | None = None  # follow=ee: the tool's position in the newest observation
        self.teleop_type, self.port, self.id = teleop_type, port, id
        self.action_keys = list(action_keys) if action_keys is not None else None
        self.ranges = {key: (float(lo), float(hi)) for key, (lo, hi) in (ranges or {}).items()}
        for key, (lo, hi) in self.ranges.items():
            if hi == lo:
                raise ValueError(f"leader_arm ranges: {key!r} has an empty range [{lo}, {hi}]")
        self.rate_hz = rate_hz
        self.max_failures = max_failures
        self._factory = factory or lerobot_teleoperator
        self._teleop: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lo = self._hi = np.zeros(0, np.float32)
        self.motors = bool(motors)
        self.gripper_open_pos, self.gripper_closed_pos = float(gripper_open_pos), float(gripper_closed_pos)
        self._bus_lock = threading.Lock()  # the reader thread and a sync share one serial bus
        self._driving = False

    @property
    def label(self) -> str:
        return f"{self.name} ({self.teleop_type} on {self.port})"

    def _range(self, key: str) -> tuple[float, float]:
        if key in self.ranges:
            return self.ranges[key]
        return (0.0, 100.0) if "gripper" in key else (-100.0, 100.0)

    def _to_action(self, values: dict[str, Any]) -> np.ndarray:
        raw = np.array([float(values[key]) for key in self.action_keys or ()], np.float32)
        return (raw - self._lo) / (self._hi - self._lo) * 2.0 - 1.0

    def _open(self) -> None:
        if not self.port:
            raise DeviceUnavailable(f"{self.label}: no port given (set `port`; `lerobot-find-port` finds it)")
        teleop = None
        try:
            teleop = self._factory(teleop_type=self.teleop_type, port=self.port, id=self.id)
            teleop.connect(calibrate=False)
            if not getattr(teleop, "is_calibrated", True):
                raise DeviceUnavailable(
                    f"{self.label}: not calibrated; run `lerobot-calibrate --teleop.type={self.teleop_type} "
                    f"--teleop.port={self.port} --teleop.id={self.id}`"
                )
            first = teleop.get_action()
        except Exception as exc:
            if teleop is not None:
                _disconnect(teleop)
            if isinstance(exc, DeviceUnavailable):
                raise
            raise DeviceUnavailable(f"{self.label}: {type(exc).__name__}: {exc}") from exc
        if self.action_keys is None:
            self.action_keys = list(first)  # lerobot's own order: the motors' order on the bus
        missing = [key for key in self.action_keys if key not in first]
        if missing:
            _disconnect(teleop)
            raise DeviceUnavailable(f"{self.label}: the arm has no {missing}; its action keys are {list(first)}")
        bounds = np.array([self._range(key) for key in self.action_keys], np.float32).reshape(-1, 2)
        self._lo, self._hi = bounds[:, 0], bounds[:, 1]
        self._teleop = teleop
        self._take(first)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period, failures = 1.0 / self.rate_hz, 0
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += period
            try:
                with self._bus_lock:
                    values = self._teleop.get_action()
                self._take(values)
            except Exception:  # noqa: BLE001 - a bus glitch or an unplugged arm; counted, not fatal
                failures += 1
                if failures == self.max_failures:
                    self._update(connected=False, is_intervention=False)
                continue
            failures = 0
            next_at = max(next_at, time.monotonic())  # after a slow read, do not try to catch up in a burst

    def _take(self, values: dict[str, Any]) -> None:
        """A reading of the arm: its action now (follow=joints), or kept until the next observation (follow=ee)."""
        if self.follow == "ee":
            self._values = values
            self._update(connected=True)
        else:
            self._update(action=self._to_action(values), connected=True)

    # --- follow=ee: the follower's tool toward the leader's ------------------------------------
    def observe(self, obs: dict, policy_action: np.ndarray) -> None:
        if self.follow == "ee" and obs is not None:
            names = list(self._env.state_names)
            self._ee_now = np.asarray([obs["state"][names.index(n)] for n in EE_STATE], float)

    def _poll(self) -> None:
        values, ee_now = self._values, self._ee_now
        if self.follow == "ee" and values is not None and ee_now is not None:
            self._update(action=self._ee_action(values, ee_now))

    def _ee_action(self, values: dict[str, Any], ee_now: np.ndarray) -> np.ndarray:
        env, bus = self._env, self._teleop.bus
        q = np.array([self._to_rad(bus, joint, values[f"{joint}.pos"]) for joint in env.model.joint_names])
        step = np.clip((env.model.fk(q)[0] - ee_now) / env.max_ee_step_m, -1.0, 1.0)
        names = list(env.action_names)
        action = np.zeros(len(names), np.float32)
        action[[names.index(axis) for axis in "xyz"]] = step
        if "gripper" in names and "gripper.pos" in values:
            closed = (self.gripper_open_pos - values["gripper.pos"]) / (self.gripper_open_pos - self.gripper_closed_pos)
            action[names.index("gripper")] = 2.0 * float(np.clip(closed, 0.0, 1.0)) - 1.0
        return action

    # --- driving the leader to the follower (takeover=dagger) -----------------------------------
    def can_drive(self) -> bool:
        """Whether this leader's motors can be driven: configured so, and its lerobot class can write goals."""
        teleop = self._teleop
        return self.motors and all(callable(getattr(teleop, m, None)) for m in ("enable_torque", "send_feedback"))

    def drive_toward(self, pose: dict[str, float], max_step_rad: float) -> float:
        """One rate-limited step toward `pose` ({joint: rad, "gripper": 0 open .. 1 closed}): torque on, every joint's
        goal at most `max_step_rad` from where it is; returns the largest joint error (rad) before this step."""
        teleop, bus = self._teleop, self._teleop.bus
        with self._bus_lock:
            if not self._driving:
                teleop.enable_torque()  # a servo given torque holds where it is until a goal comes
                self._driving = True
            present = teleop.get_action()
        goals, errors = {}, []
        for joint, target in pose.items():
            key = f"{joint}.pos"
            if key not in present:
                continue
            if joint == "gripper":
                goals[key] = self.gripper_open_pos + float(target) * (self.gripper_closed_pos - self.gripper_open_pos)
                continue
            now = self._to_rad(bus, joint, present[key])
            errors.append(abs(float(target) - now))
            goals[key] = self._from_rad(bus, joint, now + float(np.clip(target - now, -max_step_rad, max_step_rad)))
        if not errors:
            raise ValueError(
                f"{self.label}: has none of the follower's joints {sorted(pose)}; its motors: {list(present)}"
            )
        with self._bus_lock:
            teleop.send_feedback(goals)
        return max(errors)

    def release(self) -> None:
        """Torque off, so the person moves the leader (once a drive turned it on)."""
        if self._driving and self._teleop is not None:
            with self._bus_lock:
                self._teleop.disable_torque()
            self._driving = False

    @staticmethod
    def _to_rad(bus, motor: str, value: float) -> float:
        mode = bus.motors[motor].norm_mode.value
        if mode == "degrees":
            return float(np.deg2rad(value))
        if mode != "range_m100_100":
            raise ValueError(f"leader joint {motor}: cannot drive a joint normalised as {mode}")
        cal = bus.calibration[motor]
        step = cal.range_min + (value + 100.0) / 200.0 * (cal.range_max - cal.range_min)
        return float(np.deg2rad((step - (cal.range_min + cal.range_max) / 2) * 360.0 / _max_step(bus, motor)))

    @staticmethod
    def _from_rad(bus, motor: str, rad: float) -> float:
        if bus.motors[motor].norm_mode.value == "degrees":
            return float(np.rad2deg(rad))
        cal = bus.calibration[motor]
        step = (cal.range_min + cal.range_max) / 2 + np.rad2deg(rad) * _max_step(bus, motor) / 360.0
        return float((step - cal.range_min) / (cal.range_max - cal.range_min) * 200.0 - 100.0)

    def _close(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - closing a leader that may already be gone
            pass
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._teleop is not None:
            _disconnect(self._teleop)
            self._teleop = None


FOLLOW = ("joints", "ee")
EE_STATE = ("ee_x", "ee_y", "ee_z")  # the arm envs' tool position in the state, m


def _check_arm_env(env) -> None:
    """follow=ee needs an arm env: its model's forward kinematics, step size and the tool's position in the state."""
    missing = [
        what
        for what, ok in (
            ("model.fk", callable(getattr(getattr(env, "model", None), "fk", None))),
            ("max_ee_step_m", hasattr(env, "max_ee_step_m")),
            ("ee_x/ee_y/ee_z in state_names", set(EE_STATE) <= set(getattr(env, "state_names", ()))),
            ("x/y/z in action_names", set("xyz") <= set(getattr(env, "action_names", ()))),
        )
        if not ok
    ]
    if missing:
        raise ValueError(
            f"leader_arm follow=ee needs an arm env (hardware.env.ArmEnv); this one lacks {', '.join(missing)}"
        )


def _max_step(bus, motor: str) -> int:
    """lerobot's degrees scale: a turn is the encoder's resolution less one step."""
    return bus.model_resolution_table[bus.motors[motor].model] - 1


def _disconnect(teleop: Any) -> None:
    try:
        teleop.disconnect()
    except Exception:  # noqa: BLE001 - closing a device that may already be gone
        pass
