"""Resets the robot does and checks itself (`env.reset_mode`), so that one person can supervise hours of learning.

Between two episodes `ResetWrapper` runs the reset protocol:
  1. the reset itself, by mode: `scripted` (the task's own `scripted_reset()`: the arm puts the scene back with the
     physics or the driver running, never a teleport), `taught` (a trajectory recorded once with a teleop device or
     a leader arm, robo_rl/teleop/reset_teaching.py, replayed by the task's `replay_reset(waypoints)`), or `human`
     (only what the robot did before modes existed, the task's `human_reset()` where it has one: a real arm homes);
  2. the check, by `reset_check`: `state`, the task's `reset_problem(tolerance)` says what is not as an episode
     should start (None: ready); `camera`, a classifier on the task's cameras (`reset_classifier`, a model folder
     `robo-rl reset-check train` writes; robo_rl/envs/reset_check.py) calls the scene not ready below its threshold,
     for a robot whose scene only its cameras see; `both`, the two;
  3. only when the check fails is a person asked, and the run waits until the check passes: with
     `reset_person=devices` a line on the terminal and the human's devices (an `acknowledge` press re-checks), with
     `reset_person=sim` a simulated person (the task's `place_scene(rng)`: the sim's own placement, a twin's arm
     moved home by hand). Every call is counted (`stats()`: the actor's heartbeat and the run's metrics carry them)
     and `waiting_for_person` says why the run waits, for the page;
  4. the inner env's reset with `keep_scene=True`: the next episode starts from where things are.
The first reset of a run places the scene the env's own way. The actor has already sent a finished episode's records
before it resets, so a reset that fails (a person who never comes: `reset_wait_s`) ends the run with nothing lost.

A task supports resets by providing those methods (sim/pick_cube_reset.py, hardware/arm_resets.py); a new task adds
its own. `learned` (a reset policy trained alongside the task's) is not built: it is refused by name.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from robo_rl.envs.base import RobotWrapper, SafetyStop

log = logging.getLogger(__name__)

RESET_MODES = ("human", "scripted", "taught", "learned")
RESET_PERSONS = ("devices", "sim")  # who answers a failed check: a person at the devices, or the simulated one
RESET_CHECKS = ("state", "camera", "both")  # the task's own check, the camera classifier's, or the two
TRAJECTORY_VERSION = 1  # the taught file's schema version
WAIT_POLL_S = 0.05  # while a person is asked: how often the devices are read and the scene re-checked
REMIND_EVERY_S = 30.0  # the terminal line is repeated this often while the run waits
SIM_PERSON_TRIES = 3  # a simulated person who cannot make the check pass in this many placements stops the run


@dataclasses.dataclass(frozen=True)
class ResetSettings:
    """An env's `reset_*` settings (their meanings: robo_rl/configs/env.py), checked when the env is built."""

    mode: str | None = None
    trajectory: str | None = None
    tolerance: float = 0.03
    person: str = "devices"
    wait_s: float | None = None
    check: str = "state"
    classifier: str | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in RESET_MODES:
            raise ValueError(f"env.reset_mode={self.mode}: one of {' | '.join(RESET_MODES)} (null: the env's own)")
        if self.mode == "learned":
            raise ValueError(
                "env.reset_mode=learned (a reset policy trained alongside the task's) is not built yet: use scripted "
                "or taught"
            )
        if self.mode == "taught" and not self.trajectory:
            raise ValueError(
                "env.reset_mode=taught needs env.reset_trajectory: a file record_reset_trajectory writes "
                "(robo_rl/teleop/reset_teaching.py)"
            )
        if not self.tolerance > 0:
            raise ValueError(f"the reset check's tolerance must be above 0, got {self.tolerance}")
        if self.person not in RESET_PERSONS:
            raise ValueError(f"env.reset_person={self.person}: one of {' | '.join(RESET_PERSONS)}")
        if self.wait_s is not None and not self.wait_s > 0:
            raise ValueError(f"env.reset_wait_s={self.wait_s}: a positive number of seconds, or null (wait)")
        if self.check not in RESET_CHECKS:
            raise ValueError(f"env.reset_check={self.check}: one of {' | '.join(RESET_CHECKS)}")
        if self.check == "state" and self.classifier:
            raise ValueError("env.reset_classifier is read only with env.reset_check=camera or both (it is state)")
        if self.check != "state" and not self.classifier:
            raise ValueError(
                f"env.reset_check={self.check} needs env.reset_classifier: a model folder robo-rl reset-check train "
                "writes"
            )
        if self.check != "state" and self.mode is None:
            raise ValueError(
                f"env.reset_check={self.check} checks the scene between episodes: it needs an env.reset_mode "
                "(scripted, taught or human)"
            )


# --- the taught trajectory ----------------------------------------------------------------------


def save_trajectory(path: str | Path, kind: str, names: list[str], waypoints: list) -> Path:
    """Write a reset trajectory: `kind` (`joints` or `ee`), the names of a waypoint's entries, the waypoints."""
    path = Path(path)
    rows = np.asarray(waypoints, float)
    if rows.ndim != 2 or rows.shape[1] != len(names) or len(rows) == 0 or not np.all(np.isfinite(rows)):
        raise ValueError(f"a reset trajectory is one or more finite waypoints of {len(names)} values ({names})")
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"version": TRAJECTORY_VERSION, "kind": kind, "names": list(names), "waypoints": rows.tolist()}
    path.write_text(json.dumps(doc, indent=1))
    return path


def load_trajectory(path: str | Path, kind: str, names: tuple[str, ...]) -> np.ndarray:
    """The waypoints of a reset trajectory file, refused in one line if it is missing or made for another robot."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(
            f"env.reset_trajectory={path}: no such file (robo_rl/teleop/reset_teaching.py records one)"
        ) from None
    except (OSError, ValueError) as e:
        raise ValueError(f"env.reset_trajectory={path} cannot be read: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != TRAJECTORY_VERSION:
        raise ValueError(f"env.reset_trajectory={path}: not a version-{TRAJECTORY_VERSION} reset trajectory file")
    if doc.get("kind") != kind or tuple(doc.get("names", ())) != tuple(names):
        raise ValueError(
            f"env.reset_trajectory={path} holds {doc.get('kind')} waypoints of {doc.get('names')}; this env replays "
            f"{kind} waypoints of {list(names)}"
        )
    rows = np.asarray(doc.get("waypoints"), float)
    if rows.ndim != 2 or rows.shape[1] != len(names) or len(rows) == 0 or not np.all(np.isfinite(rows)):
        raise ValueError(f"env.reset_trajectory={path}: its waypoints are not finite rows of {len(names)} values")
    return rows


# --- the protocol -------------------------------------------------------------------------------


class ResetWrapper(RobotWrapper):
    """The reset protocol above around a task's env that provides the reset methods; innermost in the actor's chain
    (a safety stop's acknowledgement comes before it, the human's devices are added with `add_poller`)."""

    def __init__(self, env, settings: ResetSettings) -> None:
        super().__init__(env)
        if settings.mode is None:
            raise ValueError("ResetWrapper needs an env.reset_mode")
        self.settings = settings
        task = env.unwrapped
        needed = {"scripted": "scripted_reset", "taught": "replay_reset"}.get(settings.mode)
        for method in filter(None, (needed, "reset_problem", "place_scene" if settings.person == "sim" else None)):
            if not callable(getattr(task, method, None)):
                raise ValueError(
                    f"env.reset_mode={settings.mode}: {type(task).__name__} has no {method}() (a task adds its own)"
                )
        self.camera_check = None  # with reset_check camera or both: the classifier on the task's cameras
        if settings.check != "state":
            from robo_rl.envs.reset_check import load_camera_check

            self.camera_check = load_camera_check(settings.classifier, task)
        self.waypoints = None
        if settings.mode == "taught":
            kind, names = task.reset_pose_names()
            self.waypoints = load_trajectory(settings.trajectory, kind, names)
        self.counts: collections.Counter = collections.Counter()
        self.waiting_for_person: str | None = None  # why the run waits for a person now (the page shows it)
        self.last_problem: str | None = None  # what the newest failed check found
        self._pollers: list[Callable[[], set]] = []
        self._started = False

    def add_poller(self, poll: Callable[[], set]) -> None:
        """`poll()` reads a person's devices while the run waits for them; it returns their events."""
        self._pollers.append(poll)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if not self._started:  # the run's first scene is placed the env's own way
            self._started = True
            return self.env.reset(seed=seed, options=options)
        task = self.env.unwrapped
        start = time.monotonic()
        mode = self.settings.mode
        if mode == "scripted":
            task.scripted_reset()
        elif mode == "taught":
            task.replay_reset(self.waypoints)
        elif callable(getattr(task, "human_reset", None)):
            task.human_reset()
        self.counts["resets"] += 1
        problem = self._problem(task)
        if problem is None:
            self.counts["resets_ok"] += 1
        else:
            self.counts["resets_failed"] += 1
            self._ask_a_person(task, problem)
        obs, info = self.env.reset(seed=seed, options={**(options or {}), "keep_scene": True})
        info["reset"] = {"mode": mode, "problem": problem, "seconds": round(time.monotonic() - start, 3)}
        if self.camera_check is not None:  # the classifier's answer for the scene the episode starts from
            info["reset"]["ready_prob"] = self.camera_check.last_prob
        return obs, info

    def _problem(self, task) -> str | None:
        """What the configured check finds wrong with the scene now (None: ready to start an episode)."""
        found = []
        if self.settings.check in ("state", "both"):
            found.append(task.reset_problem(self.settings.tolerance))
        if self.camera_check is not None:
            found.append(self.camera_check.problem(task.camera_frames()))
        return "; ".join(p for p in found if p) or None

    def _ask_a_person(self, task, problem: str) -> None:
        """Wait until a person has reset the scene (the check passes again); SafetyStop after `reset_wait_s`, or when
        the simulated person has tried SIM_PERSON_TRIES times."""
        self.counts["reset_calls"] += 1
        self.last_problem = problem
        self.waiting_for_person = f"the reset check failed: {problem}"
        # every call in the actor's log with its reason, so a run's calls can be told apart afterwards
        log.warning("reset call %d (%s answers): %s", self.counts["reset_calls"], self.settings.person, problem)
        try:
            if self.settings.person == "sim":
                self._simulated_person(task, problem)
            else:
                self._person_at_the_devices(task, problem)
        finally:
            self.waiting_for_person = None

    def _simulated_person(self, task, problem: str) -> None:
        for _ in range(SIM_PERSON_TRIES):  # it puts the scene back, and the check runs again
            task.place_scene(task.np_random)
            problem = self._problem(task)
            if problem is None:
                return
        raise SafetyStop(f"the simulated person could not reset the scene in {SIM_PERSON_TRIES} tries: {problem}")

    def _person_at_the_devices(self, task, problem: str) -> None:
        log.error("RESET NEEDED: %s. Put the scene back; the run goes on when the check passes", problem)
        start = last_said = time.monotonic()
        while problem is not None:
            events = set().union(*(poll() or set() for poll in self._pollers)) if self._pollers else set()
            if "estop" in events:
                raise SafetyStop(f"e-stop while waiting for a person to reset the scene ({problem})")
            waited = time.monotonic() - start
            if self.settings.wait_s is not None and waited > self.settings.wait_s:
                raise SafetyStop(
                    f"the reset check failed ({problem}) and nobody reset the scene within "
                    f"{self.settings.wait_s:g} s (env.reset_wait_s)"
                )
            if "acknowledge" in events or time.monotonic() - last_said > REMIND_EVERY_S:
                last_said = time.monotonic()
                log.error("RESET NEEDED (%.0f s): %s", waited, problem)
            time.sleep(WAIT_POLL_S)
            problem = self._problem(task)

    def stats(self) -> dict:
        """Counts for the heartbeat: `resets` done between episodes, `resets_ok` (the check passed), `resets_failed`
        (it did not) and `reset_calls` (a person was asked), and `reset_waiting_why` while the run waits."""
        out = {k: int(self.counts.get(k, 0)) for k in ("resets", "resets_ok", "resets_failed", "reset_calls")}
        if self.waiting_for_person:
            out["reset_waiting_why"] = self.waiting_for_person[:200]
        return out


def with_resets(env):
    """`env` inside a `ResetWrapper` when its task has an `env.reset_mode` (an env without one is returned as is)."""
    settings = getattr(env.unwrapped, "reset_settings", None)
    if settings is None or settings.mode is None:
        return env
    return ResetWrapper(env, settings)
