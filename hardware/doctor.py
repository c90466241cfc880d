"""`robo-rl doctor`: check a robot workstation before the arm learns anything, and say what is wrong and how to fix it.

    robo-rl doctor env=so101                 # the arm and cameras of a robot config (it goes home, then holds still)
    robo-rl doctor twin=so101                # the same checks on the arm's MuJoCo twin (so101 | franka | ur5e)
    robo-rl doctor env=franka hardware.dry_run=true   # a real config, its commands sent to the twin

Checks, in order: the robot's SDK; serial ports, network and cameras found; the arm connects; control rate, jitter,
read and command latency through driver + safety at the configured rate (zero actions: the arm holds still);
camera frame ages; the workspace box against the arm's reach; the e-stop path (a device's e-stop ends the episode
and the arm holds); the watchdog path (a stalled actor makes the arm hold within `safety.watchdog_s`). Each check
prints ok / warn / FAIL with what to do; the exit status is 1 when any check fails.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import socket
import time
from pathlib import Path

import numpy as np

from hardware.arm import ArmDriver, HardwareError

log = logging.getLogger(__name__)

RATE_STEPS = 50  # control steps timed for the rate check
WATCHDOG_SLACK_S = 0.1  # the watchdog looks every 20 ms; a loaded machine adds a little


def twin_choices() -> tuple[str, ...]:
    """What `twin=` may name: each env config (launch/conf/env) that drives an arm on metal, a driver `_target_`
    without `twin: true`; a new robot's YAML is a choice as soon as it is there."""
    from omegaconf import DictConfig, OmegaConf

    from robo_rl.config import CONF_DIR

    names = []
    for path in sorted((CONF_DIR / "env").glob("*.yaml")):
        driver = OmegaConf.load(path).get("driver")
        if isinstance(driver, DictConfig) and driver.get("_target_") and not driver.get("twin", False):
            names.append(path.stem)
    return tuple(names)


def driver_class(target: str) -> type[ArmDriver]:
    """The driver class a config's `env.driver._target_` names; its attributes say what the doctor checks."""
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception as e:  # noqa: BLE001 - hydra wraps the import error; its text is the finding
        raise HardwareError(
            f"env.driver._target_={target}: cannot import it ({' '.join(str(e).split())[:300]})"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, ArmDriver)):
        raise HardwareError(f"env.driver._target_={target} is not an arm driver (a hardware.arm.ArmDriver subclass)")
    return cls


@dataclasses.dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


class Doctor:
    def __init__(self, cfg, twin: bool) -> None:
        self.cfg, self.twin = cfg, twin
        self.checks: list[Check] = []
        self.figures: dict = {}

    def add(self, name: str, status: str, detail: str, fix: str = "") -> Check:
        check = Check(name, status, detail, fix)
        self.checks.append(check)
        mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[status]
        print(f"[{mark}] {name}: {detail}" + (f"\n       fix: {fix}" if fix else ""), flush=True)
        return check

    # --- the checks ---------------------------------------------------------------------------
    def run(self) -> int:
        from omegaconf import OmegaConf

        driver_cfg = OmegaConf.to_container(self.cfg.env.get("driver") or OmegaConf.create(), resolve=True)
        target = driver_cfg.get("_target_")
        if target is None:
            self.add(
                "robot",
                "fail",
                f"env {self.cfg.env.get('_target_')} drives no arm",
                "use a robot env: env=so101 | franka | ur5e, or twin=so101",
            )
            return 1
        try:
            driver = driver_class(target)
        except HardwareError as e:
            self.add(
                "driver",
                "fail",
                str(e),
                "env.driver._target_ names the arm's driver class (hardware.so101.SO101Driver)",
            )
            return 1
        dry = self.twin or bool(self.cfg.hardware.dry_run) or bool(driver_cfg.get("twin"))
        self.sdk(driver, dry)
        if not dry:
            self.devices(driver_cfg, driver)
        self.cameras_found()
        env = self.connect()
        if env is None:
            return 1
        try:
            self.rate(env)
            self.workspace(env)
            self.estop(env)
            self.watchdog(env)
        finally:
            env.close()
        failed = [c.name for c in self.checks if c.status == "fail"]
        print(f"\n{len(self.checks)} checks: {len(failed)} failed" + (f" ({', '.join(failed)})" if failed else ""))
        return 1 if failed else 0

    def sdk(self, driver: type[ArmDriver], dry: bool) -> None:
        module, extra = driver.sdk_module, driver.sdk_extra
        if module is None:
            return
        import importlib.util

        if importlib.util.find_spec(module) is not None:
            self.add("sdk", "ok", f"{module} is installed")
        elif dry:
            self.add(
                "sdk",
                "warn",
                f"{module} is not installed: fine for the twin, needed for the arm",
                f"uv sync --extra {extra}",
            )
        else:
            self.add("sdk", "fail", f"{module} is not installed", f"uv sync --extra {extra}")

    def devices(self, driver_cfg: dict, driver: type[ArmDriver]) -> None:
        port = driver_cfg.get("port")
        if port is not None:
            found = sorted(glob.glob("/dev/ttyACM*") + glob.glob("/dev/ttyUSB*"))
            if Path(port).exists():
                self.add("serial port", "ok", f"{port} exists (found: {', '.join(found) or 'none'})")
            else:
                self.add(
                    "serial port",
                    "fail",
                    f"{port} does not exist (found: {', '.join(found) or 'none'})",
                    "plug the arm's bus adapter in, then env.driver.port=<one of the found ports>; "
                    "`sudo usermod -aG dialout $USER` if it exists but cannot be opened",
                )
        host, net_port = driver_cfg.get("host"), driver.network_port
        if host is not None and net_port is not None:
            start = time.monotonic()
            try:
                socket.create_connection((host, net_port), timeout=1.0).close()
                self.add("network", "ok", f"{host}:{net_port} answers in {(time.monotonic() - start) * 1e3:.1f} ms")
            except OSError as e:
                self.add(
                    "network",
                    "fail",
                    f"{host}:{net_port} does not answer ({e})",
                    "check the cable and the workstation's address on the arm's network, and that the arm's "
                    "controller is on with its remote/FCI interface enabled",
                )

    def cameras_found(self) -> None:
        from hardware.cameras import find_cameras

        found = find_cameras()
        wanted = list(self.cfg.env.get("cameras") or [])  # the names: a robot's mapping, a simulator's list
        text = ", ".join(f"{c.get('path', c.get('serial'))} ({c['type']})" for c in found) or "none"
        status = "ok" if found or not wanted or self.twin or self.cfg.hardware.dry_run else "fail"
        self.add(
            "cameras found",
            status,
            f"{text}; the config uses {', '.join(wanted) or 'no cameras'}",
            "" if status == "ok" else "plug the cameras in; env.cameras.<name>.device=<a found path>",
        )

    def connect(self):
        from robo_rl.config import make_env

        start = time.monotonic()
        try:
            env = make_env(self.cfg)
        except Exception as e:  # noqa: BLE001 - whatever stops the connection is the finding
            self.add(
                "connect",
                "fail",
                " ".join(str(e).split())[:400],
                "see the line above; robo-rl doctor twin=<robot> checks the rest of the pipeline without it",
            )
            return None
        self.add(
            "connect",
            "ok",
            f"{env.driver.robot} connected in {time.monotonic() - start:.1f} s"
            + (" (twin)" if getattr(env.driver, "twin", None) is not None else ""),
        )
        return env

    def _safety(self, env, **overrides):
        from omegaconf import OmegaConf

        from hardware.safety import SafetyWrapper

        node = self.cfg.get("safety")
        given = OmegaConf.to_container(node, resolve=True) if node else {}
        settings = {**{k: v for k, v in given.items() if k != "_target_"}, **overrides}
        return SafetyWrapper(env, **settings)

    def rate(self, env) -> None:
        safe = self._safety(env, watchdog_s=None)
        hz = env.control_hz
        safe.reset(seed=0)
        starts, reads, ages = [], [], {}
        hold = np.zeros(env.action_space.shape, np.float32)
        if "gripper" in env.action_names:
            hold[env.action_names.index("gripper")] = -1.0
        for _ in range(RATE_STEPS):
            starts.append(time.monotonic())
            _, _, _, _, info = safe.step(hold)
            t = time.perf_counter()
            env.driver.read()
            reads.append((time.perf_counter() - t) * 1e3)
            for name, age in (info.get("obs_age_ms") or {}).items():
                ages.setdefault(name, []).append(age)
        periods = np.diff(starts) * 1e3
        jitter = np.abs(periods - 1e3 / hz)
        achieved = 1e3 / float(np.mean(periods))
        self.figures["rate"] = {
            "control_hz": hz,
            "achieved_hz": achieved,
            "jitter_ms_p50": float(np.median(jitter)),
            "jitter_ms_p99": float(np.percentile(jitter, 99)),
            "read_ms_p50": float(np.median(reads)),
        }
        detail = (
            f"{achieved:.1f} Hz of {hz:g} Hz, jitter p50 {np.median(jitter):.1f} ms / p99 "
            f"{np.percentile(jitter, 99):.1f} ms, arm read {np.median(reads):.2f} ms p50"
        )
        if getattr(env.driver.clock, "virtual", False):
            self.add(
                "control rate",
                "warn",
                detail + " (a virtual-clock twin: not wall time)",
                "env.twin_clock=real times the loop against the wall clock",
            )
        elif achieved < 0.9 * hz:
            self.add(
                "control rate",
                "fail",
                detail,
                "lower env.control_hz, or free the CPU (each step: IK, the driver's read and command, the cameras)",
            )
        else:
            self.add("control rate", "ok", detail)
        for name, values in ages.items():
            p50, p99 = np.percentile(values, [50, 99])
            self.figures.setdefault("obs_age_ms", {})[name] = {"p50": float(p50), "p99": float(p99)}
            status = "ok" if p99 < 2e3 / hz else "warn"
            self.add(
                f"{'arm reading' if name == 'state' else 'camera ' + name} age",
                status,
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms at observation time",
                ""
                if status == "ok"
                else "a frame older than two control periods: lower the camera's resolution or raise its fps",
            )
        safe.detach()

    def workspace(self, env) -> None:
        box = self.cfg.safety.get("workspace") if self.cfg.get("safety") else None
        home_pos = env.model.fk(env.driver.home_joints)[0]
        if not box:
            self.add(
                "workspace",
                "warn",
                f"no safety.workspace box: the tool may go anywhere it reaches (home is "
                f"at {np.round(home_pos, 3).tolist()} m)",
                "robo-rl calibrate records one; safety=default safety.workspace='{low: [..], high: [..]}'",
            )
            return
        low, high = np.asarray(box["low"], float), np.asarray(box["high"], float)
        corners = [np.where([i & 1, i & 2, i & 4], high, low) for i in range(8)]
        unreachable = [np.round(c, 3).tolist() for c in corners if not env.model.reachable(c)]
        inside = bool(np.all(home_pos >= low) and np.all(home_pos <= high))
        if unreachable:
            self.add(
                "workspace",
                "fail",
                f"{len(unreachable)} of 8 corners of the box are out of the arm's reach: {unreachable}",
                "shrink safety.workspace to what the arm reaches (robo-rl calibrate)",
            )
        elif not inside:
            self.add(
                "workspace",
                "warn",
                f"the home pose {np.round(home_pos, 3).tolist()} m is outside the box "
                f"{low.tolist()}..{high.tolist()}: every episode starts outside it",
                "move the box or the home pose (robo-rl calibrate records both)",
            )
        else:
            self.add(
                "workspace", "ok", f"all 8 corners of {low.tolist()}..{high.tolist()} m are reachable; home is inside"
            )

    def estop(self, env) -> None:
        from robo_rl.teleop.base import FakeDevice
        from robo_rl.teleop.intervention import InterventionWrapper

        button = FakeDevice("doctor")
        safe = self._safety(env, watchdog_s=None)
        human = InterventionWrapper(safe, [button], start_devices=True)
        human.reset(seed=0)
        before = env.driver.read().joints
        button.push(["estop"])
        _, _, _, truncated, info = human.step(np.ones(env.action_space.shape, np.float32) * 0.5)
        env.driver.clock.sleep_until(env.driver.clock.now() + 0.3)
        moved = float(np.max(np.abs(env.driver.read().joints - before)))
        executed = np.asarray(info["action_executed"])[:3]
        if info.get("ended_by") == "estop" and truncated and np.all(np.abs(executed) < 0.05) and moved < 0.01:
            self.add("e-stop", "ok", f"a device's e-stop ended the episode and the arm held (moved {moved:.4f} rad)")
        else:
            self.add(
                "e-stop",
                "fail",
                f"ended_by={info.get('ended_by')}, executed {executed.tolist()}, the arm moved {moved:.3f} rad",
                "this is a bug in the e-stop path: do not run the arm",
            )
        human.estopped = None
        safe.detach()

    def watchdog(self, env) -> None:
        limit = (self.cfg.safety.get("watchdog_s") if self.cfg.get("safety") else None) or 0.5
        if getattr(env.driver.clock, "virtual", False):
            self.add("watchdog", "warn", "not timed on a virtual-clock twin", "env.twin_clock=real")
            return
        safe = self._safety(env, watchdog_s=limit)
        try:
            safe.reset(seed=0)
            zero = np.zeros(env.action_space.shape, np.float32)
            safe.step(zero)
            stalled_at = time.monotonic()
            deadline = stalled_at + 3 * limit
            while safe.counts["watchdog_holds"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            took = time.monotonic() - stalled_at
        finally:
            safe.detach()
        self.figures["watchdog_hold_s"] = took
        if safe.counts["watchdog_holds"] and took <= limit + WATCHDOG_SLACK_S:
            self.add(
                "watchdog",
                "ok",
                f"a stalled actor made the arm hold after {took:.2f} s (watchdog_s {limit:g} s, checked every 20 ms; "
                f"passes within {limit + WATCHDOG_SLACK_S:g} s)",
            )
        else:
            self.add(
                "watchdog",
                "fail",
                f"no hold within {took:.2f} s of a stall (safety.watchdog_s={limit:g})",
                "this is a bug in the watchdog: do not run the arm",
            )


def cmd_doctor(overrides: list[str]) -> int:
    """robo-rl doctor [twin=<robot>] [overrides]: see the module docstring."""
    from robo_rl.config import ConfigError, load_config

    twin = next((o.partition("=")[2] for o in overrides if o.startswith("twin=")), None)
    report = next((o.partition("=")[2] for o in overrides if o.startswith("report=")), None)
    rest = [o for o in overrides if not o.startswith(("twin=", "report="))]
    if twin is not None:
        if twin not in (twins := twin_choices()):
            raise ConfigError(f"twin={twin}: one of {', '.join(twins)}")
        rest = [f"env={twin}", "hardware.dry_run=true", "env.twin_clock=real", *rest]
    if not any(o.startswith("safety=") for o in rest):
        rest.append("safety=default")
    cfg = load_config(rest)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    doctor = Doctor(cfg, twin is not None)
    status = doctor.run()
    if report:
        Path(report).write_text(
            json.dumps({"checks": [dataclasses.asdict(c) for c in doctor.checks], "figures": doctor.figures}, indent=1)
        )
    return status
