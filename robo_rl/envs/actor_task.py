"""Which of a multi-task env's tasks an actor runs: `actor.task` (one task every episode, reset with
`options={"task": name}`), or `train.actor_tasks=split` (actor i runs task i mod the number of tasks). An env names
the tasks it can draw in `tasks` (Meta-World's task names, pick_color's colours), in a fixed order; one that lists
none has no task to choose. The learner's task vocabulary stays the env's whole `instructions` either way."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from robo_rl.errors import UserError


class ActorTaskError(UserError, ValueError):
    """An actor's task the env cannot draw, or a split over fewer than two tasks."""


def env_tasks(env) -> tuple[str, ...]:
    """The task names an env (inside any wrappers) can draw, in its fixed order; empty when it lists none."""
    return tuple(getattr(getattr(env, "unwrapped", env), "tasks", None) or ())


def reset_options(task: str | None) -> dict | None:
    """What the actor's every reset passes: the task it runs, or nothing (the env draws one)."""
    return None if task is None else {"task": task}


def check_actor_task(task: str | None, tasks: Sequence[str]) -> None:
    """ActorTaskError unless `task` (actor.task) is None or one of `tasks`, naming the close ones."""
    if task is None:
        return
    if not tasks:
        raise ActorTaskError(
            f"actor.task={task}: this env has no tasks to choose from (it lists none): unset actor.task"
        )
    if task not in tasks:
        close = difflib.get_close_matches(str(task), list(tasks), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ActorTaskError(
            f"actor.task={task!r} is not one of this env's tasks{hint} (its tasks: {', '.join(tasks)})"
        )


def split_tasks(tasks: Sequence[str], actors: int) -> list[str]:
    """Actor i's task under train.actor_tasks=split: the env's task i mod the number of tasks."""
    if len(tasks) < 2:
        has = f"one task ({tasks[0]})" if tasks else "no tasks"
        raise ActorTaskError(
            f"train.actor_tasks=split gives each actor its own task, but this env has {has}: use "
            "train.actor_tasks=episode"
        )
    return [tasks[i % len(tasks)] for i in range(actors)]
