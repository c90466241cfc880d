"""Human interventions on the actor: teleop devices arbitrated against the policy, one wrapper.

Each step the wrapper reads every device (at once: devices keep their newest reading, `robo_rl/teleop/base.py`)
and decides who acts:
  - a device takes control explicitly (its `is_intervention`: a toggle or a held button) or implicitly (its motion
    above `implicit_threshold`), as `takeover` says; when two claim control, `priority` decides (logged);
  - the human's action replaces the policy's; the step is flagged (`intervention`) with the policy's proposal kept
    as `action_policy` beside `action_executed`; a gripper the device does not command holds its last command;
  - handing control back ramps from the human's last action to the policy's over `handback_steps`, so the
    commanded action does not jump;
  - labels end the episode: success / failure → `terminated` (ended_by human_success / human_failure, a success
    paying `success_reward`), re-record / abort → `truncated` (human_rerecord / human_abort), e-stop →
    `truncated` with ended_by estop, its step commanding no motion (the actor then stops); pause holds the actor
    (`paused`) until pressed again;
  - a device that is missing at start or disappears mid-episode is logged by name and the policy keeps control.

The episode's intervention timeline ([start, end) steps and device) is in the last step's info (`interventions`),
and `stats()` gives counts and the latency from a device's input to the step that executes it.
"""

from __future__ import annotations

import collections
import logging
import time

import gymnasium as gym
import numpy as np

from robo_rl.configs.wrappers import TAKEOVER, InterventionConfig
from robo_rl.envs.base import RobotWrapper
from robo_rl.envs.wrappers import find_safety
from robo_rl.teleop.base import AXES, DeviceUnavailable, TeleopDevice, TeleopReading
from robo_rl.teleop.dagger import PHASE_CODES, DaggerTakeover
from robo_rl.teleop.dagger import RECORD_EXTRAS as DAGGER_EXTRAS
from robo_rl.teleop.devices import make_device

log = logging.getLogger(__name__)
PAUSED_BY_HAND = "a person pressed pause"

HUMAN = InterventionConfig()  # the `human` block's defaults (robo_rl/configs/wrappers.py), for wrappers built in Python


class InterventionWrapper(RobotWrapper):
    def __init__(
        self,
        env: gym.Env,
        devices: list,
        takeover: str = HUMAN.takeover,
        implicit_threshold: float = HUMAN.implicit_threshold,
        priority: list[str] | None = HUMAN.priority,
        handback_steps: int = HUMAN.handback_steps,
        success_reward: float | None = HUMAN.success_reward,
        start_devices: bool = True,
        dagger_commander: str | None = HUMAN.dagger_commander,
        dagger_sync_tolerance_rad: float = HUMAN.dagger_sync_tolerance_rad,
        dagger_sync_speed_rad_s: float = HUMAN.dagger_sync_speed_rad_s,
        dagger_sync_timeout_s: float = HUMAN.dagger_sync_timeout_s,
    ) -> None:
        super().__init__(env)
        if takeover not in TAKEOVER:
            raise ValueError(f"human.takeover='{takeover}': must be one of {', '.join(TAKEOVER)}")
        self.takeover, self.threshold = takeover, float(implicit_threshold)
        self.handback_steps, self.success_reward = int(handback_steps), success_reward
        self.devices: list[TeleopDevice] = []
        self.unavailable: list[str] = []  # the names of configured devices that could not be opened
        for spec in devices:
            device = spec if isinstance(spec, TeleopDevice) else make_device(dict(spec), env=env.unwrapped)
            if start_devices:
                try:
                    device.start()
                except DeviceUnavailable as e:  # the run goes on under the policy: say which device is missing
                    log.error("teleop device unavailable: %s; the policy keeps control", e)
                    self.unavailable.append(device.name)
                    continue
            self.devices.append(device)
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise ValueError(f"two teleop devices share a name ({names}): give each a `name`")
        self.priority = list(priority or names)
        unknown = [p for p in self.priority if p not in names]
        if unknown and self.devices:
            log.warning("human.priority names devices that are not running: %s", unknown)
        self.action_names = tuple(getattr(env.unwrapped, "action_names", ()))
        self._obs = None
        self.paused = False
        self.pause_reason: str | None = None  # why it is paused, for the terminal (the actor's heartbeat)
        self.estopped: str | None = None  # the device that pressed e-stop
        self._controller: str | None = None
        self._last_claim: tuple[str, ...] = ()
        self._last_executed = self._neutral()
        self._handback_from: np.ndarray | None = None
        self._handback_left = 0
        self._seen_at: dict[str, float] = {}
        self._connected = {d.name: True for d in self.devices}
        self._timeline: list[list] = []
        self._step = 0
        self.counts = collections.Counter()
        self.latency_ms: collections.deque = collections.deque(maxlen=2000)
        self._safety = find_safety(env)  # a safety layer inside: its stops wait for this human's acknowledgement
        if self._safety is not None:
            self._safety.add_poller(self.poll)
        self._dagger_who = self._dagger_was = "policy"
        self.dagger: DaggerTakeover | None = None  # takeover=dagger: pause, sync the leader, correct, hand back
        if takeover == "dagger":
            self.dagger = DaggerTakeover(
                self.devices,
                tuple(getattr(env.unwrapped, "state_names", ())),
                float(getattr(env.unwrapped, "control_hz", 10.0)),
                dagger_commander,
                dagger_sync_tolerance_rad,
                dagger_sync_speed_rad_s,
                dagger_sync_timeout_s,
                missing=tuple(self.unavailable),
            )

    @classmethod
    def record_extras_from_config(cls, takeover: str = HUMAN.takeover, **_) -> dict:
        """Under takeover=dagger each record says its phase (`extra/dagger_phase`, robo_rl/teleop/dagger.py)."""
        return dict(DAGGER_EXTRAS) if takeover == "dagger" else {}

    @property
    def record_extras(self) -> dict:
        return {**(getattr(self.env, "record_extras", None) or {}), **(DAGGER_EXTRAS if self.dagger else {})}

    @property
    def timeline(self) -> list[list]:
        """This episode's interventions so far: [start, end or None while ongoing, device]."""
        return [list(t) for t in self._timeline]

    def add_device(self, device: TeleopDevice) -> None:
        """One more (started) device, last in priority (the GUI's page joins a configured device this way)."""
        if any(d.name == device.name for d in self.devices):
            raise ValueError(f"a teleop device named {device.name} is already running: give the new one a `name`")
        self.devices.append(device)
        self._connected[device.name] = True
        if device.name not in self.priority:
            self.priority.append(device.name)

    # --- gymnasium ----------------------------------------------------------------------------
    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._obs, self._step, self._timeline = obs, 0, []
        self._controller, self._handback_left = None, 0
        self._last_executed = self._neutral()
        for device in self.devices:
            device.episode_start()
        if self.dagger is not None:
            self.dagger.reset()
            self.paused, self._dagger_was = False, "policy"
        return obs, info

    def step(self, action):
        policy_action = np.asarray(action, np.float32)
        readings = self._read(policy_action)
        events = set().union(*(r.events for r in readings.values())) if readings else set()
        if self.dagger is not None:
            human, executed = self._dagger_decide(readings, events, policy_action)
        else:
            human = self._arbitrate(readings)
            if human is not None:
                executed = self._human_action(readings[human], policy_action)
                self._note_latency(readings[human])
            else:
                executed = self._handback(policy_action)
        if "estop" in events:  # no new motion from here: the e-stopped step holds still, and the episode ends
            executed = self._hold()
        obs, reward, terminated, truncated, info = self.env.step(executed)
        self._step += 1
        self._last_executed, self._obs = np.asarray(info.get("action_executed", executed), np.float32), obs
        info.update(action_policy=policy_action, intervention=human is not None)
        if human is not None:
            info["intervention_device"] = human
            self.counts["intervention_steps"] += 1
        if self.dagger is not None:
            self._dagger_info(info, events)
            events = events - {"pause"}  # the phases answered it
        self.counts["steps"] += 1
        estop_by = next((n for n, r in readings.items() if "estop" in r.events), None)
        self._acknowledge(readings)
        reward, terminated, truncated = self._labels(events, info, reward, terminated, truncated, estop_by)
        if terminated or truncated:
            if self._controller is not None:
                self._timeline[-1][1] = self._step
            info["interventions"] = [tuple(t) for t in self._timeline]
        return obs, reward, terminated, truncated, info

    def close(self):
        for device in self.devices:
            try:
                device.close()
            except Exception as e:  # noqa: BLE001 - closing one device must not keep the others open
                log.warning("closing %s: %s", device.name, e)
        return self.env.close()

    # --- arbitration --------------------------------------------------------------------------
    def _neutral(self) -> np.ndarray:
        """The command before any step: no motion, the gripper open (what a device that does not command the
        gripper holds when it takes over at once)."""
        action = np.zeros(self.env.action_space.shape, np.float32)
        action[[i for i, n in enumerate(self.action_names) if n == "gripper"]] = -1.0
        return action

    def _hold(self) -> np.ndarray:
        """The command that stops the robot where it is: no end-effector motion, the gripper as it was (an e-stop
        must not drop what it holds); without named action dimensions, zeros."""
        if not self.action_names:
            return np.zeros(self.env.action_space.shape, np.float32)
        hold = self._last_executed.copy()
        hold[[i for i, n in enumerate(self.action_names) if n in AXES]] = 0.0
        return hold

    def poll(self) -> set[str]:
        """Read the devices without stepping (while paused): returns the events seen; a pause press unpauses."""
        readings = self._read(self._last_executed)
        events = set().union(*(r.events for r in readings.values())) if readings else set()
        if self.dagger is not None:  # its phases decide what a press means; a sync drives the leader
            self.dagger.poll(readings, events, self._obs)
            self.paused = self.dagger.holding
            self.pause_reason = f"dagger: {self.dagger.phase}" if self.paused else None
        elif "pause" in events:
            self.paused = not self.paused
            self.pause_reason = PAUSED_BY_HAND if self.paused else None
            log.info("human: %s", "paused" if self.paused else "resumed")
        if "estop" in events:
            self.estopped = next(n for n, r in readings.items() if "estop" in r.events)
        self._acknowledge(readings)
        return events

    def _acknowledge(self, readings: dict[str, TeleopReading]) -> None:
        by = next((n for n, r in readings.items() if "acknowledge" in r.events), None)
        if by is not None and self._safety is not None and self._safety.acknowledge(by):
            log.info("human: %s acknowledged the safety stop", by)

    def _read(self, policy_action: np.ndarray) -> dict[str, TeleopReading]:
        readings = {}
        for device in self.devices:
            try:
                device.observe(self._obs, policy_action)
                reading = device.read()
            except Exception as e:  # noqa: BLE001 - a failing device drops out; the policy keeps control
                reading = TeleopReading(device.name, connected=False)
                if self._connected.get(device.name, True):
                    log.error("teleop device %s failed (%s): the policy has control", device.name, e)
            if self._connected.get(device.name, True) and not reading.connected:
                self.counts["device_dropouts"] += 1
                log.warning(
                    "teleop device %s disconnected%s",
                    device.name,
                    ": the policy takes over" if self._controller == device.name else "",
                )
            self._connected[device.name] = reading.connected
            readings[device.name] = reading
        return readings

    def _claims(self, reading: TeleopReading) -> bool:
        if not reading.connected:
            return False
        explicit = reading.is_intervention and self.takeover in ("explicit", "both")
        implicit = self.takeover in ("implicit", "both") and reading.magnitude() > self.threshold
        return explicit or implicit

    def _arbitrate(self, readings: dict[str, TeleopReading]) -> str | None:
        claims = tuple(sorted((n for n, r in readings.items() if self._claims(r)), key=self._rank))
        if len(claims) > 1 and claims != self._last_claim:
            self.counts["contested_steps"] += 1
            log.warning(
                "teleop devices %s claim control at once: %s has priority (human.priority)",
                ", ".join(claims),
                claims[0],
            )
        self._last_claim = claims
        human = claims[0] if claims else None
        if human != self._controller:
            if self._controller is not None:
                self._timeline[-1][1] = self._step
                if human is None:  # back to the policy: ramp from the human's last command
                    self._handback_from, self._handback_left = self._last_executed.copy(), self.handback_steps
            if human is not None:
                self._timeline.append([self._step, None, human])
                self.counts["takeovers"] += 1
            self._controller = human
        return human

    def _rank(self, name: str) -> int:
        return self.priority.index(name) if name in self.priority else len(self.priority)

    def _human_action(self, reading: TeleopReading, policy_action: np.ndarray) -> np.ndarray:
        if reading.action is not None:
            if reading.action.shape != policy_action.shape:
                raise ValueError(
                    f"teleop device {reading.device} gave a {reading.action.shape[0]}-d action; this env "
                    f"takes {policy_action.shape[0]}"
                )
            return reading.action.astype(np.float32)
        if not self.action_names:
            raise ValueError(
                f"teleop device {reading.device} commands end-effector motion, but this env names no "
                "action dimensions (env.action_names): use a device that gives whole actions"
            )
        out = np.zeros_like(policy_action)
        for i, name in enumerate(self.action_names):
            if name in AXES and reading.motion is not None:
                out[i] = reading.motion[AXES.index(name)]
            elif name == "gripper":
                out[i] = self._last_executed[i] if reading.gripper is None else reading.gripper
        return out

    def _handback(self, policy_action: np.ndarray) -> np.ndarray:
        if self._handback_left <= 0 or self._handback_from is None:
            return policy_action
        frac = 1.0 - self._handback_left / (self.handback_steps + 1)
        self._handback_left -= 1
        return (self._handback_from + frac * (policy_action - self._handback_from)).astype(np.float32)

    def _note_latency(self, reading: TeleopReading) -> None:
        """Latency from a device's newest input to the step that executes it (each input counted once)."""
        if reading.changed_at and reading.changed_at != self._seen_at.get(reading.device):
            self._seen_at[reading.device] = reading.changed_at
            self.latency_ms.append((time.monotonic() - reading.changed_at) * 1e3)

    def _labels(self, events: set[str], info: dict, reward, terminated: bool, truncated: bool, estop_by=None):
        if "pause" in events:
            self.paused = not self.paused
            self.pause_reason = PAUSED_BY_HAND if self.paused else None
        if "estop" in events:
            self.estopped = estop_by
            info["ended_by"], terminated, truncated = "estop", False, True
        elif "success" in events:
            info.update(ended_by="human_success", success=True)
            terminated, truncated = True, False
            reward = reward if self.success_reward is None else max(float(reward), float(self.success_reward))
        elif "failure" in events:
            info["ended_by"], terminated, truncated = "human_failure", True, False
        elif "rerecord_episode" in events:
            info["ended_by"], terminated, truncated = "human_rerecord", False, True
        elif "terminate_episode" in events:
            info["ended_by"], terminated, truncated = "human_abort", False, True
        return reward, terminated, truncated

    # --- takeover=dagger (robo_rl/teleop/dagger.py) ------------------------------------------
    def _dagger_decide(self, readings: dict, events: set[str], policy_action: np.ndarray):
        """(the device acting or None, the action to execute) as the DAgger phases say."""
        who, device = self.dagger.decide(readings, events, self._obs)
        self.paused = self.dagger.holding
        self.pause_reason = f"dagger: {self.dagger.phase}" if self.paused else None
        reading = readings.get(device) if device is not None else None
        if who == "human" and (reading is None or not reading.connected):
            log.warning("teleop device %s cannot command the correction: the robot holds", device)
            who = "hold"
        self._dagger_who = who
        if who == "policy":
            if self._controller is not None or self._dagger_was != "policy":  # back to the policy: ramp to it
                self._handback_from, self._handback_left = self._last_executed.copy(), self.handback_steps
            self._set_controller(None)
            self._dagger_was = who
            return None, self._handback(policy_action)
        self._dagger_was = who
        if who == "hold":
            self._set_controller(None)
            return device or "human", self._hold()
        self._set_controller(device)
        self._note_latency(reading)
        return device, self._human_action(reading, policy_action)

    def _set_controller(self, name: str | None) -> None:
        """The intervention timeline follows who commands a correction."""
        if name == self._controller:
            return
        if self._controller is not None:
            self._timeline[-1][1] = self._step
        if name is not None:
            self._timeline.append([self._step, None, name])
            self.counts["takeovers"] += 1
        self._controller = name

    def _dagger_info(self, info: dict, events: set[str]) -> None:
        phase = {"policy": "autonomous", "hold": "paused", "human": "correcting"}[self._dagger_who]
        info["dagger_phase"] = phase
        info["dagger_handback"] = self.dagger.handed_back()
        info["record_extras"] = {**info.get("record_extras", {}), "dagger_phase": PHASE_CODES[phase]}
        self.counts[f"dagger_{phase}_steps"] += 1

    def stats(self) -> dict:
        out = {k: int(v) for k, v in self.counts.items()}
        if self.dagger is not None:
            out.update({f"dagger_{k}": int(v) for k, v in self.dagger.counts.items()})
        out["intervention_rate"] = out.get("intervention_steps", 0) / max(1, out.get("steps", 0))
        latency = np.array(self.latency_ms)  # read from the actor's transport thread while the loop appends
        if len(latency):
            p50, p99 = np.percentile(latency, [50, 99])
            out.update(device_latency_ms_p50=float(p50), device_latency_ms_p99=float(p99))
        return out
