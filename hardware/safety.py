"""The safety layer: one actor wrapper between every action (the policy's or a human's) and the arm's driver, the
same on the MuJoCo twin and on metal, so what it does is proven in simulation before the arm moves.

Per step, in order:
  - a command that is not finite or not the action's shape is refused: it never reaches the driver, the arm holds
    and the episode ends (`ended_by=safety`); a value outside [-1, 1] is clipped;
  - the end-effector step is limited (`max_step_m`, the speed limit `max_ee_speed_m_s`, `max_rot_step_rad`) and its
    target kept inside the `workspace` box (a tool already outside may only move back in);
  - after the IK, the joint target is kept `joint_margin_rad` inside the joint limits, scaled so that no joint
    moves faster than `max_joint_speed_rad_s`, and held if it would put the tool out of the box (the env calls this
    guard, `ArmEnv.joint_guard`, for every joint target: an IK recovery's too);
  - after the step, an external force or motor load above `effort_limit`, or a fault the arm reports, stops the arm:
    it holds, the episode ends (`ended_by=safety`) and the next reset waits until a human acknowledges (the GUI's
    button or a device's `acknowledge` event) before the arm moves home;
  - a watchdog thread holds the arm when no step comes for `watchdog_s` (a stalled actor, a policy that hangs).

Whatever it clipped or refused is in `info["safety"]` (empty when nothing), counted in `stats()` (the actor's
heartbeat carries them into the learner's metrics) and shown in the GUI.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from robo_rl.configs.wrappers import SafetyConfig
from robo_rl.envs.base import RobotWrapper, SafetyStop

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.05  # while stopped: how often devices and the GUI are read for an acknowledgement
WATCHDOG_POLL_S = 0.02  # the watchdog looks this often: it holds the arm at most this long after `watchdog_s`
AXES = ("x", "y", "z")
SAFETY = SafetyConfig()  # the `safety` block's defaults (robo_rl/configs/wrappers.py), for layers built in Python


class SafetyWrapper(RobotWrapper):
    def __init__(
        self,
        env,
        workspace: dict | None = None,
        max_step_m: float | None = SAFETY.max_step_m,
        max_ee_speed_m_s: float | None = SAFETY.max_ee_speed_m_s,
        max_rot_step_rad: float | None = SAFETY.max_rot_step_rad,
        joint_margin_rad: float = SAFETY.joint_margin_rad,
        max_joint_speed_rad_s: float | None = SAFETY.max_joint_speed_rad_s,
        effort_limit: float | None = SAFETY.effort_limit,
        watchdog_s: float | None = SAFETY.watchdog_s,
        ack_timeout_s: float | None = SAFETY.ack_timeout_s,
    ) -> None:
        super().__init__(env)
        arm = env.unwrapped
        if not all(hasattr(arm, a) for a in ("driver", "model", "max_ee_step_m", "joint_guard")):
            raise ValueError(f"the safety layer guards an arm env (hardware.env.ArmEnv); {type(arm).__name__} is not")
        self.arm = arm
        self.low = self.high = None
        if workspace:
            self.low, self.high = np.asarray(workspace["low"], float), np.asarray(workspace["high"], float)
            if self.low.shape != (3,) or self.high.shape != (3,) or np.any(self.high <= self.low):
                raise ValueError(
                    f"safety.workspace: low {workspace['low']} / high {workspace['high']} must be 3 "
                    "values each (m, the arm's base frame) with low < high"
                )
        step_limits = [
            x
            for x in (max_step_m, None if max_ee_speed_m_s is None else max_ee_speed_m_s / arm.control_hz)
            if x is not None
        ]
        self.max_step_m = min(step_limits) if step_limits else None
        self.max_rot_step_rad = max_rot_step_rad
        self.joint_margin_rad = float(joint_margin_rad)
        self.max_joint_speed = max_joint_speed_rad_s
        self.effort_limit = float(effort_limit if effort_limit is not None else arm.driver.default_effort_limit)
        self.effort_kind = arm.driver.effort_kind
        self.watchdog_s, self.ack_timeout_s = watchdog_s, ack_timeout_s
        self.stopped: str | None = None  # why the arm is stopped, until a human acknowledges
        self.last: dict = {}  # the newest step's report
        self.counts: collections.Counter = collections.Counter()
        self._ack = threading.Event()
        self._acked_by: str | None = None
        self._pollers: list[Callable[[], set]] = []  # read devices while stopped (they call `acknowledge`)
        self.on_wait: list[Callable[[], None]] = []  # run while stopped (the actor ticks its GUI)
        self._obs = None
        self._armed = False  # the watchdog runs between steps only: never during a step or a reset
        self._last_step_end = time.monotonic()
        self._held_at: float | None = None
        self._closing = threading.Event()
        arm.joint_guard = self.guard_joints
        self._watchdog = None
        if watchdog_s:
            self._watchdog = threading.Thread(target=self._watch, name="safety-watchdog", daemon=True)
            self._watchdog.start()

    # --- acknowledgement ----------------------------------------------------------------------
    def acknowledge(self, by: str = "gui") -> bool:
        """A human says the arm may move again; True if it was stopped."""
        if self.stopped is None:
            return False
        self._acked_by = by
        self._ack.set()
        return True

    def add_poller(self, poll: Callable[[], set]) -> None:
        """`poll()` reads a human's devices while the arm is stopped; it returns their events (an `estop` among them
        ends the wait) and calls `acknowledge` on an acknowledgement."""
        self._pollers.append(poll)

    def _wait_for_ack(self) -> None:
        log.error(
            "SAFETY STOP: %s. The arm holds; acknowledge in the GUI (or a device's acknowledge button) to go on",
            self.stopped,
        )
        start = time.monotonic()
        while not self._ack.is_set():
            for poll in self._pollers:
                if "estop" in (poll() or ()):
                    raise SafetyStop(f"e-stop while the arm was stopped by safety ({self.stopped})")
            for hook in self.on_wait:
                hook()
            if self.ack_timeout_s is not None and time.monotonic() - start > self.ack_timeout_s:
                raise SafetyStop(
                    f"the arm was stopped by safety ({self.stopped}) and nobody acknowledged within "
                    f"{self.ack_timeout_s:.0f} s (safety.ack_timeout_s)"
                )
            self._ack.wait(WAIT_POLL_S)
        log.warning("safety stop (%s) acknowledged by %s: recovering and resetting", self.stopped, self._acked_by)
        self.counts["acknowledged"] += 1
        self.arm.driver.recover()
        self.stopped, self._ack = None, threading.Event()

    # --- gymnasium ----------------------------------------------------------------------------
    def reset(self, **kwargs):
        self._armed = False
        if self.stopped is not None:
            self._wait_for_ack()
        obs, info = self.env.reset(**kwargs)
        self._obs, self.last = obs, {}
        return obs, info

    def step(self, action):
        self._armed = False
        report: dict = {}
        if self._held_at is not None:
            report["watchdog_hold_s"] = round(time.monotonic() - self._last_step_end, 3)
            self._held_at = None
        if self.stopped is not None:
            return self._end(report | {"stopped": self.stopped}, action)
        refused = self._refusal(action)
        if refused:
            self.counts["refused_steps"] += 1
            self.arm.driver.hold()
            log.error("safety refused a command (%s): the arm holds and the episode ends", refused)
            return self._end(report | {"refused": refused}, action)
        safe = self._limit(np.asarray(action, np.float32), report)
        obs, reward, terminated, truncated, info = self.env.step(safe)
        report.update(info.get("safety") or {})
        self._obs = obs
        why = self._stop_reason()
        if why is not None:
            self.arm.driver.hold()
            self.stopped = why
            self.counts["stops"] += 1
            report["stop"] = why
            log.error("SAFETY STOP: %s: the arm holds", why)
            if not terminated:
                truncated = True
            info["ended_by"] = "safety"
        self._finish(report)
        info["safety"] = report
        # what was asked of the arm: a human wrapper outside this one puts the policy's own proposal here
        info["action_policy"] = np.asarray(action, np.float32)
        return obs, reward, terminated, truncated, info

    def _end(self, report: dict, action) -> tuple:
        """The step that never reached the driver: the arm holds, the episode ends by safety."""
        hold = np.zeros(self.env.action_space.shape, np.float32)
        proposed = (
            np.nan_to_num(np.asarray(action, np.float32).reshape(-1)[: hold.size], nan=0.0, posinf=1.0, neginf=-1.0)
            if np.asarray(action).size >= hold.size
            else hold
        )
        if "gripper" in self.arm.action_names:  # the gripper keeps what it holds
            hold[self.arm.action_names.index("gripper")] = 2.0 * self.arm.gripper_command - 1.0
        self._finish(report)
        info = {
            "action_executed": hold,
            "action_policy": np.clip(proposed, -1, 1),
            "action_base": None,
            "intervention": False,
            "success": False,
            "ended_by": "safety",
            "safety": report,
        }
        return self._obs, 0.0, False, True, info

    def _finish(self, report: dict) -> None:
        self.last = report
        self.counts["steps"] += 1
        if report:
            self.counts["reported_steps"] += 1
            for key in report:
                self.counts[key] += 1
        self._last_step_end = time.monotonic()
        self._armed = self.stopped is None

    def detach(self) -> None:
        """Stop guarding the env (the watchdog ends, the joint guard goes) without closing it: the doctor wraps one
        env in several safety layers in turn."""
        self._closing.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=2.0)
        if self.arm.joint_guard == self.guard_joints:
            self.arm.joint_guard = None

    def close(self):
        self.detach()
        return self.env.close()

    # --- the checks ---------------------------------------------------------------------------
    def _refusal(self, action) -> str | None:
        a = np.asarray(action)
        if a.shape != self.env.action_space.shape:
            return f"an action of shape {a.shape}, the arm takes {self.env.action_space.shape}"
        if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a)):
            return f"a non-finite action {np.asarray(a).tolist()}"
        return None

    def _limit(self, a: np.ndarray, report: dict) -> np.ndarray:
        if np.any(np.abs(a) > 1.0):
            report["out_of_range"] = np.round(a, 3).tolist()
            a = np.clip(a, -1.0, 1.0)
        state = self.arm.last_state
        step = a[:3].astype(float) * self.arm.max_ee_step_m
        size = float(np.linalg.norm(step))
        if self.max_step_m is not None and size > self.max_step_m:
            report["translation_m"] = round(size, 4)
            step *= self.max_step_m / size
        if self.low is not None:
            target = state.ee_pos + step
            lo, hi = np.minimum(self.low, state.ee_pos), np.maximum(self.high, state.ee_pos)  # outside: only back in
            clipped = np.clip(target, lo, hi)
            hit = [f"{AXES[i]}_{'low' if target[i] < lo[i] else 'high'}" for i in range(3) if clipped[i] != target[i]]
            if hit:
                report["workspace"] = hit
            step = clipped - state.ee_pos
        a = a.copy()
        a[:3] = step / self.arm.max_ee_step_m
        if self.arm.rotation and self.max_rot_step_rad is not None:
            rot = a[3:6].astype(float) * self.arm.max_rot_step_rad
            angle = float(np.linalg.norm(rot))
            if angle > self.max_rot_step_rad:
                report["rotation_rad"] = round(angle, 4)
                a[3:6] = rot * (self.max_rot_step_rad / angle) / self.arm.max_rot_step_rad
        return a.astype(np.float32)

    def guard_joints(self, q: np.ndarray, state, dt: float) -> tuple[np.ndarray, dict]:
        """The joint target kept inside the limits (less the margin) and within the joint speed limit."""
        notes: dict = {}
        model = self.arm.model
        safe = model.clip(q, self.joint_margin_rad)
        beyond = [model.joint_names[i] for i in np.flatnonzero(np.abs(safe - q) > 1e-9)]
        if beyond:
            notes["joint_limits"] = beyond
        if self.max_joint_speed is not None:
            move = safe - state.joints
            scale = float(np.max(np.abs(move))) / (self.max_joint_speed * dt)
            if scale > 1.0:  # scaled as a whole: the tool keeps its direction, only slower
                notes["joint_speed"] = round(scale, 3)
                safe = state.joints + move / scale
        if self.low is not None and not self._in_box(model.fk(safe)[0], state.ee_pos):
            notes["workspace_joint"] = "a joint target (an IK recovery) would take the tool out of the box: held"
            safe = state.joints
        return safe, notes

    def _in_box(self, pos: np.ndarray, now: np.ndarray, tol_m: float = 2e-3) -> bool:
        """Inside the workspace box, or no further out of it than `now` on any axis."""
        lo, hi = np.minimum(self.low, now) - tol_m, np.maximum(self.high, now) + tol_m
        return bool(np.all(pos >= lo) and np.all(pos <= hi))

    def _stop_reason(self) -> str | None:
        state = self.arm.last_state
        if state.fault:
            return f"the arm reports a fault: {state.fault}"
        if state.effort > self.effort_limit:
            unit = "N" if self.effort_kind == "force_n" else "of the motor limit"
            return (
                f"{'external force' if self.effort_kind == 'force_n' else 'motor load'} {state.effort:.2f} {unit} "
                f"above the limit {self.effort_limit:.2f} (safety.effort_limit)"
            )
        return None

    # --- the watchdog -------------------------------------------------------------------------
    def _watch(self) -> None:
        period = min(WATCHDOG_POLL_S, self.watchdog_s / 5)
        while not self._closing.wait(period):
            idle = time.monotonic() - self._last_step_end
            if self._armed and self._held_at is None and idle > self.watchdog_s:
                try:
                    self.arm.driver.hold()
                except Exception as e:  # noqa: BLE001 - the watchdog must outlive a driver error; say it loudly
                    log.error("watchdog: holding the arm failed: %s", e)
                    continue
                self._held_at = time.monotonic()
                self.counts["watchdog_holds"] += 1
                log.warning(
                    "watchdog: no command for %.2f s (safety.watchdog_s=%.2f): the arm holds its position",
                    idle,
                    self.watchdog_s,
                )

    def stats(self) -> dict:
        out = {k: int(v) for k, v in dict(self.counts).items()}  # one atomic copy: the control loop may be counting
        out["stopped"] = int(self.stopped is not None)
        return out
