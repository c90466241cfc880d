"""`robo-rl learner` and `robo-rl actor`: one process of a run each (`robo-rl train` starts both)."""

from __future__ import annotations

import os

from robo_rl.commands.common import (
    STARTED_BY_ENV,
    at_least_nice,
    close_log_copy,
    copy_stdout_to,
    run_dir_for,
    setup_logging,
    sigterm_as_interrupt,
)
from robo_rl.commands.eval import cmd_eval


def cmd_learner(overrides: list[str]) -> int:
    from robo_rl.allocator import keep_freed_memory
    from robo_rl.config import load_config
    from robo_rl.configs.run import learner_niceness
    from robo_rl.learner import Learner

    keep_freed_memory()  # each update's activations reuse the last one's pages (robo_rl/allocator.py)
    cfg = load_config(overrides)
    nice = at_least_nice(learner_niceness(cfg))  # before the learner's torch and ZeroMQ threads, which inherit it
    fresh = not cfg.run_dir and not cfg.resume  # this command makes the run folder, so a failed start removes it
    run_dir = run_dir_for(cfg)
    alone = os.environ.get(STARTED_BY_ENV) != "train"  # `train` already sends this process's output to learner.log
    logged = os.environ.get(STARTED_BY_ENV) in ("train", "launch")  # and `launch` to logs/learner.log
    log_copy = copy_stdout_to(run_dir / "learner.log") if not logged else None
    setup_logging(cfg, run_dir / "learner.log" if not logged else None)
    print(f"learner: run folder {run_dir}", flush=True)
    if nice:
        print(f"learner: CPU niceness {nice} (train.learner_nice; the actors' control loops come first)", flush=True)
    sigterm_as_interrupt()
    try:
        learner = Learner(cfg, run_dir, progress=cfg.logger.progress)
    except BaseException:
        if fresh:
            import shutil

            close_log_copy(log_copy)
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        reason = learner.run()
    finally:
        pid_file = run_dir / "learner.pid"
        if pid_file.exists() and pid_file.read_text() == str(os.getpid()):
            pid_file.unlink()  # a pid file left behind would name a process that is gone
    print(f"learner: {reason}; checkpoints in {run_dir / 'checkpoints'}", flush=True)
    try:
        if reason == "done" and alone:  # `train` evaluates after stopping its actor; a learner alone does it here
            cmd_eval([f"checkpoint={run_dir}", *[o for o in overrides if o.startswith("eval.")]], training_report=True)
    finally:
        close_log_copy(log_copy)
    return 0 if reason == "done" else 130


def cmd_actor(overrides: list[str]) -> int:
    from robo_rl.actor import Actor
    from robo_rl.config import load_config

    cfg = load_config(overrides)
    setup_logging(cfg)
    sigterm_as_interrupt()
    reason = Actor(cfg, progress=cfg.logger.progress).run()
    print(f"{cfg.actor.id}: {reason}", flush=True)
    return 0 if reason == "done" else 130
