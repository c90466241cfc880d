"""`robo-rl calibrate`: record an arm's home pose and the workspace box the safety layer keeps the tool in.

    robo-rl calibrate env=so101                          # by hand: torque off (SO-101) / free-drive (UR, Franka pilot)
    robo-rl calibrate env=ur5e mode=device human=spacemouse   # jog it with a teleop device instead
    robo-rl calibrate twin=so101 record_s=2              # on the twin (a test, or a look at the procedure)

Two phases: put the arm in its home pose, then move the tool through the corners of the space it may use. Each
ends with Enter on the terminal, a device's `success` button, or after `record_s` seconds when given. The file
written (`out=`, default `calibration/<robot>.yaml`) holds `env.driver.home` and `safety.workspace` (the box the
tool visited, shrunk by `margin_m`); `hardware.calibration=<file>` applies both to any later command.
"""

from __future__ import annotations

import datetime
import logging
import sys
import threading
import time
from pathlib import Path

import numpy as np

from hardware.arm import HardwareError

log = logging.getLogger(__name__)

SAMPLE_HZ = 20.0  # arm readings per second while recording
MIN_BOX_M = 0.02  # a box thinner than this on an axis was not really visited


class StdinEnded(HardwareError):
    """Stdin reached its end while a phase waited for Enter, and nothing else (a device, a timer) can end it."""


class Signal:
    """The operator's 'done': Enter on stdin (each Enter ends one phase, typed ahead or not), a device's success
    button, or a timer. The end of stdin (a pipe, </dev/null, Ctrl-D) with neither of the others ends the run."""

    def __init__(self, record_s: float | None, devices=()) -> None:
        self.record_s, self.devices = record_s, list(devices)
        self._enters, self._used, self._eof = 0, 0, False
        if record_s is None and sys.stdin is not None:
            threading.Thread(target=self._read_stdin, daemon=True).start()

    def _read_stdin(self) -> None:
        while True:
            try:
                line = sys.stdin.readline()
            except (OSError, ValueError):  # a closed or unreadable stdin is its end
                line = ""
            if line == "":
                self._eof = True
                return
            self._enters += 1

    def start(self) -> None:
        self._since = time.monotonic()

    def done(self) -> bool:
        if self._enters > self._used:
            self._used += 1
            return True
        for device in self.devices:
            if "success" in device.read().events:
                return True
        if self.record_s is not None:
            return time.monotonic() - self._since >= self.record_s
        if self._eof and not self.devices:
            raise StdinEnded("stdin ended")
        return False


def record(driver, signal: Signal, prompt: str, step=None, what: str = "the calibration") -> list:
    """Arm readings until the signal, printing the tool position; `step()` advances a device-driven arm."""
    print(prompt, flush=True)
    signal.start()
    states, period = [], 1.0 / SAMPLE_HZ
    tick = time.monotonic()
    try:
        while not signal.done():
            if step is not None:
                step()
            state = driver.read()
            states.append(state)
            print(f"\r  tool at {np.round(state.ee_pos, 3).tolist()} m   ", end="", flush=True)
            tick += period
            time.sleep(max(0.0, tick - time.monotonic()))
    except StdinEnded:
        print(flush=True)
        raise StdinEnded(
            f"stdin ended before {what} was recorded: nothing written (press Enter to end each phase, or give "
            "record_s=<seconds>)"
        ) from None
    print(flush=True)
    if not states:
        states.append(driver.read())
    return states


def workspace_box(positions: np.ndarray, margin_m: float) -> tuple[np.ndarray, np.ndarray]:
    """The box the tool visited, shrunk by `margin_m` on each side; raises if an axis was hardly moved along."""
    low, high = positions.min(axis=0) + margin_m, positions.max(axis=0) - margin_m
    thin = [axis for axis, lo, hi in zip("xyz", low, high, strict=True) if hi - lo < MIN_BOX_M]
    if thin:
        raise HardwareError(
            f"the tool hardly moved along {', '.join(thin)} (the box would be under "
            f"{MIN_BOX_M * 100:.0f} cm there, after the {margin_m * 100:.1f} cm margin): move it "
            "through the corners of the space it may use, then finish"
        )
    return low, high


def calibrate(driver, signal: Signal, margin_m: float, step=None, hand: bool = True) -> tuple:
    """(home joints, workspace low, workspace high) from the two phases; free-drive on while a hand moves the arm."""
    if hand:
        driver.freedrive(True)
    try:
        home = record(
            driver,
            signal,
            "1/2: put the arm in its home pose, then press Enter (or the device's success button)",
            step,
            "the home pose",
        )[-1].joints
        states = record(
            driver,
            signal,
            "2/2: move the tool through the corners of the space it may use, then press Enter",
            step,
            "the workspace",
        )
    finally:
        if hand:
            try:
                driver.freedrive(False)
            except HardwareError as e:
                log.error("could not end free-drive: %s", e)
    low, high = workspace_box(np.array([s.ee_pos for s in states]), margin_m)
    return home, low, high


def jog_session(env_cfg: dict, devices: list):
    """The arm behind the safety layer (no box yet) with the human's devices in control (implicit takeover), and a
    `step()` that advances it one control period: a device jogs the arm while the calibration records."""
    from hardware.env import ArmEnv
    from hardware.safety import SafetyWrapper
    from robo_rl.teleop.intervention import InterventionWrapper

    settings = {k: v for k, v in env_cfg.items() if k != "_target_"}
    arm = ArmEnv(**{**settings, "reach": None, "max_episode_steps": 10**9})
    env = InterventionWrapper(SafetyWrapper(arm, watchdog_s=None), devices, takeover="implicit")
    env.reset(seed=0)
    still = np.zeros(arm.action_space.shape, np.float32)  # the 'policy' asks for nothing; the device moves the arm
    return env, lambda: env.step(still)


def require_sdk(driver_class) -> None:
    """The arm's SDK is importable, or a HardwareError naming the extra that installs it."""
    import importlib.util

    module = getattr(driver_class, "sdk_module", None)
    if module is not None and importlib.util.find_spec(module) is None:
        raise HardwareError(
            f"{module} is not installed ({driver_class.__name__}'s SDK): uv sync --extra {driver_class.sdk_extra}"
        )


def write_calibration(path: Path, robot: str, where: str, home: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
    from omegaconf import OmegaConf

    data = {
        "robot": robot,
        "env": {"driver": {"home": [round(float(x), 4) for x in home]}},
        "safety": {"workspace": {"low": [round(float(x), 4) for x in low], "high": [round(float(x), 4) for x in high]}},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    path.write_text(
        f"# robo-rl calibrate: {robot} ({where}), {stamp}; apply with hardware.calibration={path}\n"
        + OmegaConf.to_yaml(OmegaConf.create(data))
    )


def cmd_calibrate(overrides: list[str]) -> int:
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from hardware.doctor import twin_choices
    from hardware.env import _make_driver
    from robo_rl.config import ConfigError, load_config

    opts = {
        k: v
        for k, _, v in (o.partition("=") for o in overrides)
        if k in ("out", "mode", "margin_m", "record_s", "twin")
    }
    rest = [o for o in overrides if o.partition("=")[0] not in opts]
    mode = opts.get("mode", "hand")
    if mode not in ("hand", "device"):
        raise ConfigError(f"mode={mode}: hand (move the arm yourself) or device (jog it with human=<device>)")
    if "twin" in opts:
        if opts["twin"] not in (twins := twin_choices()):
            raise ConfigError(f"twin={opts['twin']}: one of {', '.join(twins)}")
        rest = [f"env={opts['twin']}", "hardware.dry_run=true", "env.twin_clock=real", *rest]
    cfg = load_config(rest)
    driver_cfg = OmegaConf.to_container(cfg.env.get("driver") or OmegaConf.create(), resolve=True)
    if not driver_cfg:
        raise ConfigError(f"env {cfg.env.get('_target_')} drives no arm: env=so101 | franka | ur5e")
    margin = float(opts.get("margin_m", 0.01))
    record_s = float(opts["record_s"]) if "record_s" in opts else None
    env_cfg = OmegaConf.to_container(cfg.env, resolve=True)
    if not (env_cfg.get("dry_run") or driver_cfg.get("twin")):
        require_sdk(get_class(driver_cfg["_target_"]))  # before connecting: one line, as `robo-rl doctor` says it
    env = None
    if mode == "device":
        if not cfg.get("human") or "devices" not in cfg.human:
            raise ConfigError("mode=device needs a teleop device: human=keyboard | spacemouse | gamepad | ...")
        env, step = jog_session(env_cfg, OmegaConf.to_container(cfg.human.devices, resolve=True))
        driver, signal = env.unwrapped.driver, Signal(record_s, env.devices)
    else:
        driver = _make_driver(env_cfg["driver"], bool(env_cfg.get("dry_run")), env_cfg.get("twin_clock", "real"))
        driver.connect()
        signal, step = Signal(record_s), None
    where = driver_cfg.get("port") or driver_cfg.get("host") or "twin"
    out = Path(opts.get("out") or f"calibration/{driver.robot}.yaml")
    try:
        home, low, high = calibrate(driver, signal, margin, step, hand=mode == "hand")
    finally:
        (env or driver).close()
    write_calibration(out, driver.robot, where, home, low, high)
    print(
        f"wrote {out}: home {np.round(home, 3).tolist()} rad, workspace {np.round(low, 3).tolist()} .. "
        f"{np.round(high, 3).tolist()} m\napply it with hardware.calibration={out} (and safety=default)"
    )
    return 0
