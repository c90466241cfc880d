"""Corrections collected the way a person gives them (`human.takeover=dagger`): HG-DAgger and RaC-style collection.

HG-DAgger (Kelly et al., "HG-DAgger: Interactive Imitation Learning with Human Experts", ICRA 2019) lets the expert
take control when the learner goes wrong and trains on the expert's segments; RaC ("Robot Learning for Long-Horizon
Tasks by Scaling Recovery and Correction", 2025) collects the same kind of recoveries at scale. A person corrects best
when the robot stops first and the leader arm already matches it, not by fighting a policy mid-motion, so a
correction goes through four phases:

    autonomous  the policy acts.
    paused      the robot holds: the step on which the person presses executes the hold (no end-effector motion,
                the gripper as it was); from then on the env is not stepped and the policy not asked (the wrapper
                reads `paused`, which the actor and `robo-rl record` already honour).
    syncing     a leader arm with motors is driven toward the follower's joints, at most `sync_speed_rad_s`, and
                the phase ends only once every joint is within `sync_tolerance_rad`; then its torque goes off so the
                person can move it. A device without motors (a SpaceMouse, a keyboard, a leader with passive
                joints) skips this phase, with one line saying so.
    correcting  the commanding device drives the robot; each step is flagged `intervention` with the policy's
                proposal kept as `action_policy`, and its record's `extra/dagger_phase` says `correcting`.

Handing back returns control to the policy from where the person left the robot: that step carries
`dagger_handback` so an actor empties a chunked policy's queue (its chunk was planned before the correction).

The person's inputs are any device's buttons, in the one event vocabulary (robo_rl/teleop/base.py): `pause` (pause;
pressed again while paused, resume without correcting; while correcting, hold again) and the takeover claim
`is_intervention` (a toggle like the keyboard's space, or a held button): claimed, take over; released, hand back.
A foot pedal is a keyboard-like device whose keys are bound to `pause` and `intervention_toggle`
(robo_rl/teleop/keys.py); launch/conf/human/dagger_leader.yaml pairs one with a leader arm.

The follower's pose comes from the observation's state: entries `q_<joint>` (rad) and `gripper` (0 open .. 1
closed), as the arm envs give (hardware/env.py). A leader is driven through three methods, duck-typed so the core
does not import `hardware`: `can_drive()`, `drive_toward(pose, max_step_rad) -> error_rad` and `release()`
(hardware/teleop/leader_arm.py).
"""

from __future__ import annotations

import logging
import time

import numpy as np

log = logging.getLogger(__name__)

PHASES = ("autonomous", "paused", "syncing", "correcting")
PHASE_CODES = {name: code for code, name in enumerate(PHASES)}  # `extra/dagger_phase` of each record
RECORD_EXTRAS = {"dagger_phase": ((), np.int8)}
JOINT_PREFIX = "q_"
GRIPPER_STATE = ("gripper_pos", "gripper")  # the state entry of the jaw, 0 open .. 1 closed (the arm envs' first)


def follower_pose(state: np.ndarray, state_names: tuple[str, ...]) -> dict[str, float]:
    """{joint: rad, and "gripper": 0 open .. 1 closed} read from an observation's state by its entries' names."""
    names = list(state_names)
    pose = {name[len(JOINT_PREFIX) :]: float(state[i]) for i, name in enumerate(names) if name.startswith(JOINT_PREFIX)}
    gripper = next((n for n in GRIPPER_STATE if n in names), None)
    if pose and gripper is not None:
        pose["gripper"] = float(state[names.index(gripper)])
    return pose


def drivable(device) -> bool:
    """Whether `device` is a leader whose motors can be driven to the follower's pose."""
    can = getattr(device, "can_drive", None)
    return bool(can()) if callable(can) else False


class DaggerTakeover:
    """The phase machine one InterventionWrapper runs when `takeover='dagger'`; `decide` on each step, `poll` while
    the robot holds (paused or syncing)."""

    def __init__(
        self,
        devices: list,
        state_names: tuple[str, ...],
        control_hz: float,
        commander: str | None = None,
        sync_tolerance_rad: float = 0.05,
        sync_speed_rad_s: float = 1.0,
        sync_timeout_s: float = 10.0,
        missing: tuple[str, ...] = (),
    ) -> None:
        names = [d.name for d in devices]
        if commander is not None and commander not in names:
            if commander not in missing:  # a name no device has: a typo, refused
                raise ValueError(f"human.dagger_commander='{commander}' is not one of the devices ({', '.join(names)})")
            log.warning("human: %s is not plugged in: the device that takes over drives the corrections", commander)
            commander = None
        if not sync_tolerance_rad > 0 or not sync_speed_rad_s > 0 or not sync_timeout_s > 0:
            raise ValueError(
                "human.dagger_sync_tolerance_rad, dagger_sync_speed_rad_s and dagger_sync_timeout_s must be above 0 "
                f"(got {sync_tolerance_rad}, {sync_speed_rad_s}, {sync_timeout_s})"
            )
        self.devices = {d.name: d for d in devices}
        self.state_names = tuple(state_names)
        self.commander = commander
        self.tolerance, self.timeout_s = float(sync_tolerance_rad), float(sync_timeout_s)
        self.max_step_rad = float(sync_speed_rad_s) / float(control_hz)  # `poll` runs once per control period
        self.phase = "autonomous"
        self.by: str | None = None  # the device whose claim started this takeover
        self.sync_error_rad: float | None = None
        self._sync_started = 0.0
        self._handback = False
        self.counts = {"pauses": 0, "corrections": 0, "syncs": 0, "sync_skipped": 0, "sync_timeouts": 0}

    # --- what the wrapper asks ----------------------------------------------------------------
    @property
    def holding(self) -> bool:
        """The robot holds and the policy waits: the wrapper reads this as `paused`."""
        return self.phase in ("paused", "syncing")

    def reset(self) -> None:
        """A new episode starts under the policy (a correction does not carry over an episode's end)."""
        self._release()
        self.phase, self.by, self._handback = "autonomous", None, False

    def claimant(self, readings: dict) -> str | None:
        """The first device (in `devices` order) that claims control explicitly, connected."""
        return next((n for n, r in readings.items() if r.connected and r.is_intervention), None)

    def decide(self, readings: dict, events: set[str], obs) -> tuple[str, str | None]:
        """Who executes this step, before it runs: ("policy" | "hold" | "human", the device)."""
        claim = self.claimant(readings)
        if self.phase == "autonomous":
            if claim is not None:
                self._take_over(claim, obs)
                return ("human", self._commander()) if self.phase == "correcting" else ("hold", claim)
            if "pause" in events:
                self._enter("paused", by=_presser(readings, "pause"))
                return "hold", self.by
            return "policy", None
        # correcting (a step is only asked for while not holding)
        if "pause" in events:
            self._enter("paused", by=_presser(readings, "pause"))
            return "hold", self.by
        if claim is None:
            log.info("human: %s hands control back to the policy", self.by)
            self.phase, self._handback = "autonomous", True
            return "policy", None
        return "human", self._commander()

    def poll(self, readings: dict, events: set[str], obs) -> None:
        """One control period while the robot holds: a pause press resumes, a claim takes over, syncing drives."""
        claim = self.claimant(readings)
        if self.phase in ("autonomous", "correcting"):  # polled between steps (a reset or a safety stop waiting)
            if "pause" in events:
                self._enter("paused", by=_presser(readings, "pause"))
        elif self.phase == "paused":
            if claim is not None:
                self._take_over(claim, obs)
            elif "pause" in events:
                log.info("human: resumed (no correction)")
                self.phase = "autonomous"
        elif self.phase == "syncing":
            if claim is None or "pause" in events:
                log.info("human: takeover cancelled while the leader was syncing: the robot holds")
                self._release()
                self.phase = "paused"
            else:
                self._sync_step(obs)

    def handed_back(self) -> bool:
        """True once, on the step that handed control back (the actor then empties a chunked policy's queue)."""
        out, self._handback = self._handback, False
        return out

    # --- the phases ---------------------------------------------------------------------------
    def _enter(self, phase: str, by: str | None) -> None:
        if phase == "paused":
            self.counts["pauses"] += 1
            log.info("human: %s paused the policy: the robot holds", by)
        self.phase, self.by = phase, by

    def _commander(self) -> str | None:
        return self.commander or self.by

    def _leader(self):
        device = self.devices.get(self._commander() or "")
        return device if device is not None and drivable(device) else None

    def _take_over(self, claim: str, obs) -> None:
        self.by = claim
        if self._leader() is None:
            self.counts["sync_skipped"] += 1
            log.info("human: %s has no motors to drive to the robot's pose: correcting starts now", self._commander())
            self._start_correcting()
            return
        if not follower_pose(_state(obs), self.state_names):
            self.counts["sync_skipped"] += 1
            log.warning("human: the env's state names no joints (q_*): the leader is not synced before correcting")
            self._start_correcting()
            return
        self.phase, self._sync_started = "syncing", time.monotonic()
        self.counts["syncs"] += 1
        log.info("human: driving %s to the robot's pose before the correction", self._commander())
        self._sync_step(obs)

    def _sync_step(self, obs) -> None:
        leader = self._leader()
        try:
            self.sync_error_rad = float(
                leader.drive_toward(follower_pose(_state(obs), self.state_names), self.max_step_rad)
            )
        except Exception as e:  # noqa: BLE001 - a leader that cannot be driven: the robot keeps holding
            log.error("human: driving %s failed (%s): the robot holds", leader.name, e)
            self._release()
            self.phase = "paused"
            return
        if self.sync_error_rad <= self.tolerance:
            self._release()
            log.info("human: %s matches the robot (within %.3f rad): correct now", leader.name, self.sync_error_rad)
            self._start_correcting()
        elif time.monotonic() - self._sync_started > self.timeout_s:
            self.counts["sync_timeouts"] += 1
            log.error(
                "human: %s did not reach the robot's pose in %.0f s (%.3f rad off): the robot holds; take over again",
                leader.name,
                self.timeout_s,
                self.sync_error_rad,
            )
            self._release()
            self.phase = "paused"

    def _start_correcting(self) -> None:
        self.phase = "correcting"
        self.counts["corrections"] += 1

    def _release(self) -> None:
        """The leader's torque off (the person moves it), if a sync had turned it on."""
        for device in self.devices.values():
            release = getattr(device, "release", None)
            if callable(release) and drivable(device):
                try:
                    release()
                except Exception as e:  # noqa: BLE001 - the leader went away: the person is told, the robot holds
                    log.error("human: releasing %s failed: %s", device.name, e)


def _presser(readings: dict, event: str) -> str | None:
    return next((n for n, r in readings.items() if event in r.events), None)


def _state(obs) -> np.ndarray:
    return np.zeros(0, np.float32) if obs is None else np.asarray(obs["state"])
