"""Why an evaluation episode failed: each task names its failure modes, in order, as predicates over an episode
record; the first that holds names the failure. A task without its own list gets the generic ones.

An episode record (robo_rl/eval/episodes.py run_episode) carries what the predicates read: `success`, `ended_by`,
`length`, and the signals an env reports where it has them (None where it does not): `grasped_ever` /
`grasped_at_end` from `info["grasped"]`, `progress_max` / `progress_end` from `info["progress"]` (or the env's own
`progress()` method, robosuite's staged progress), and `faulted` (a driver's `info["fault"]`, or a simulator's that
blew up).

The task a record belongs to is `task_key(env)`: the env's `failure_task` attribute where it names one, else its class
(a robot's driver class) in snake case and its `task`, as a run folder is named: pick_cube_lift, robosuite_lift,
robosuite_pick_place_can, gym_hil_pick_cube, so101_reach. The core never imports `sim` or `hardware`: the lists are
keyed by that name here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

SAFETY_ENDINGS = ("safety", "estop")  # ended_by values that mean the robot was stopped


@dataclass(frozen=True)
class FailureMode:
    name: str
    meaning: str  # one line, printed under the report's table
    holds: Callable[[dict], bool]  # over a failed episode's record


def _stopped(r: dict) -> bool:
    return r.get("ended_by") in SAFETY_ENDINGS


def _held_then_lost(grasped_ever: bool | None, grasped_at_end: bool | None) -> bool:
    return bool(grasped_ever) and grasped_at_end is False


SAFETY_STOP = FailureMode("safety_stop", "the safety layer or an e-stop stopped the robot", _stopped)
HUMAN_FAILURE = FailureMode(
    "human_failure", "a person ended it as a failure", lambda r: r.get("ended_by") == "human_failure"
)
TIMED_OUT = FailureMode("timed_out", "the time limit ended it", lambda r: r.get("ended_by") == "time_limit")
OTHER = FailureMode("other", "the env ended it without success (none of the above)", lambda r: True)

# a pick that reports `info["grasped"]` (pick_cube lift)
NEVER_GRASPED = FailureMode(
    "never_grasped", "the gripper never held the object (info['grasped'])", lambda r: r.get("grasped_ever") is False
)
DROPPED = FailureMode(
    "dropped",
    "held the object, then lost it (info['grasped'])",
    lambda r: _held_then_lost(r.get("grasped_ever"), r.get("grasped_at_end")),
)


def _progress_modes(grasp_at: float, lifted_at: float | None = None) -> tuple[FailureMode, ...]:
    """Modes read off a staged progress in [0, 1] whose value reaches `grasp_at` only while the object is held (and
    `lifted_at` only over the goal): robosuite's staged rewards (sim/robosuite_tasks.py progress())."""

    def peak(r: dict) -> float | None:
        return r.get("progress_max")

    modes = [
        FailureMode(
            "never_grasped",
            f"never held the object (staged progress below {grasp_at:.2f}, its grasp stage)",
            lambda r: peak(r) is not None and peak(r) < grasp_at,
        ),
        FailureMode(
            "dropped",
            f"held the object, then lost it (progress reached {grasp_at:.2f}, ended below it)",
            lambda r: peak(r) is not None and r.get("progress_end") is not None and r["progress_end"] < grasp_at,
        ),
    ]
    if lifted_at is not None:
        modes.append(
            FailureMode(
                "not_placed",
                f"carried the object over the goal but did not place it (progress ended at {lifted_at:.2f} or more)",
                lambda r: r.get("progress_end") is not None and r["progress_end"] >= lifted_at,
            )
        )
    return tuple(modes)


FAULT = FailureMode(
    "fault", "the robot's driver or the simulator reported a fault (info['fault'])", lambda r: bool(r.get("faulted"))
)


def with_generic(*own: FailureMode) -> tuple[FailureMode, ...]:
    """A task's list: a stop and a person's verdict first (they say what ended it), the task's own, then the rest."""
    return (SAFETY_STOP, HUMAN_FAILURE, *own, TIMED_OUT, OTHER)


GENERIC = with_generic()
ARM_REACH = with_generic(FAULT)
TASK_MODES: dict[str, tuple[FailureMode, ...]] = {
    "pick_cube_lift": with_generic(NEVER_GRASPED, DROPPED),
    # Lift: (1 - tanh(10 d) + 0.25 grasp) / 1.25, so above 0.8 only while grasping
    "robosuite_lift": with_generic(*_progress_modes(0.8)),
    # PickPlaceCan: max(reach, grasp 0.35, lift .35-.5, hover .5-.7) / 0.7: grasp 0.5, hovering over the bin 5/7
    "robosuite_pick_place_can": with_generic(*_progress_modes(0.5, lifted_at=5 / 7)),
    # gym-hil reports only its success: the generic modes, named here so the choice is visible
    "gym_hil_pick_cube": GENERIC,
    # the arms' reach task (and their MuJoCo twins): a driver fault besides the generic modes
    "so101_reach": ARM_REACH,
    "franka_reach": ARM_REACH,
    "ur_reach": ARM_REACH,
}


def modes_for(task: str | None) -> tuple[FailureMode, ...]:
    return TASK_MODES.get(task or "", GENERIC)


def classify(record: dict, task: str | None = None) -> str | None:
    """The failure mode of an episode record (None: it succeeded), by its task's first predicate that holds."""
    if record.get("success"):
        return None
    return next(m.name for m in modes_for(task if task is not None else record.get("task")) if m.holds(record))


def _snake(word: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", word).lower()


def task_key(env) -> str:
    """The name a task's failure modes are listed under (module docstring)."""
    u = getattr(env, "unwrapped", env)
    named = getattr(u, "failure_task", None)
    if isinstance(named, str):
        return named
    driver = getattr(u, "driver", None)
    cls = type(driver if driver is not None else u).__name__
    words = [re.sub(r"(Env|Driver)$", "", cls) or cls]
    task = getattr(u, "task", None)
    if isinstance(task, str):
        words.append(task)
    elif task is not None:  # a robot's task object (hardware/env.py ReachTask)
        words.append(re.sub(r"Task$", "", type(task).__name__))
    return "_".join(_snake(w) for w in words)


def mode_names(tasks: list[str | None]) -> list[str]:
    """The failure modes of some tasks' lists, in list order, each once (a report's columns)."""
    return list(dict.fromkeys(m.name for t in (tasks or [None]) for m in modes_for(t)))


def meanings(tasks: list[str | None]) -> dict[str, str]:
    return {m.name: m.meaning for t in (tasks or [None]) for m in reversed(modes_for(t))}
