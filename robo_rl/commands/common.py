"""What every `robo-rl` command shares: the usage error, the run folder, logging, Ctrl-C/`kill` as one interrupt, and
the paced loop of a person's recording session."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from robo_rl.errors import UserError

STARTED_BY_ENV = "ROBO_RL_STARTED_BY"  # set to "train" for the learner and actor processes `train` starts
MISSED_BARS = 3  # exit status of a command that ran and reported, and a figure missed its stated bar (2: usage)


class UsageError(UserError, ValueError):
    """A command line that asks for something the command cannot do."""


def own_session() -> dict:
    """`subprocess.Popen` arguments for a process of a run (`train`'s learner, actors and page server; each process
    `launch` starts): a session of its own, signals unblocked (a Ray worker's thread blocks SIGINT, and a child would
    inherit that), and on Linux SIGTERM (a clean stop: the learner checkpoints) if the process that started it dies.

    A session of its own is a scheduling group of its own: under the kernel's autogroups (on by default on desktop
    distributions) the CPU is shared between sessions first and only then between the processes of one. In its
    starter's session a real-time actor shared one group's share with its learner, its page server and any other run
    started there, against each other session (a browser showing the page, a test run in another terminal) with a
    full share apiece; a niced process in another session still took its group's whole share from the actors. In a
    session of its own the actor's share is its own, and a learner that lowers its niceness lowers its group's
    (`at_least_nice`). A terminal's Ctrl-C then reaches the starter only, which passes it on.

    The kernel sends that SIGTERM when the *thread* that started the child ends, not only its process: start children
    from a thread that lives as long as they should (a command's main thread)."""
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: the hook only calls it
    except (OSError, AttributeError):
        prctl = None
    pr_set_pdeathsig = 1

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        if prctl is not None:
            prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return {"start_new_session": True, "preexec_fn": setup}


def at_least_nice(nice: int) -> int:
    """Lower this process's CPU priority to niceness `nice` (never raise it: that needs privileges), every thread it
    has (Linux keeps a niceness per thread; threads started later inherit it); the niceness it runs at.

    Under the kernel's autogroups (on by default on desktop distributions), niceness weighs only among the processes
    of one session, and each session shares the CPU as a group. A process that leads its own session (`robo-rl
    launch` starts each so) is its group: its group's niceness is lowered too, or it would keep a full group's share
    against the actors' sessions. A process in its caller's session (under `robo-rl train`) leaves that group alone."""
    import os

    target = max(nice, os.getpriority(os.PRIO_PROCESS, 0))
    tasks = Path("/proc/self/task")
    for tid in [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < target:
                os.setpriority(os.PRIO_PROCESS, tid, target)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    if os.getsid(0) == os.getpid() and (autogroup_nice() or 0) < target:
        try:
            Path("/proc/self/autogroup").write_text(str(target))
        except OSError:  # no autogroups in this kernel, or not allowed: the threads' niceness is what there is
            pass
    return target


def autogroup_nice(pid: int | str = "self") -> int | None:
    """The niceness of a process's autogroup (its session's share of the CPU against other sessions'), or None
    where the kernel has no autogroups or the process is in the root group (the first session's: a container's init
    and the processes that never started a session of their own), which the kernel shows as an empty file."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().rsplit("nice", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def shows_progress(cfg) -> bool:
    """Whether a long loop draws its bar: `logger.progress`, or always under `launch`, which turns the bars off for
    its processes but shows each log's last redraw (a learner's final evaluation on a robot's twin is 15 minutes)."""
    import os

    return bool(cfg.logger.progress) or os.environ.get(STARTED_BY_ENV) == "launch"


def setup_logging(cfg, log_file: Path | None = None) -> None:
    from robo_rl.quiet import quiet_library_noise

    quiet_library_noise()  # before any library logs: their import-time lines are not the user's to fix
    handlers = [logging.StreamHandler()]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file))
    logging.basicConfig(
        level=cfg.logger.level, format="%(asctime)s %(name)s %(levelname)s: %(message)s", handlers=handlers, force=True
    )


def run_dir_for(cfg) -> Path:
    from robo_rl.config import save_config
    from robo_rl.runs import new_run_dir

    if cfg.run_dir:
        run_dir = Path(cfg.run_dir)
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    elif cfg.resume:
        run_dir = Path(cfg.resume)
    else:
        run_dir = new_run_dir(cfg.outputs_dir, cfg.name)
    if not (run_dir / "config.yaml").exists():
        save_config(cfg, run_dir / "config.yaml")
    return run_dir


def serve_until_interrupted(server) -> int:
    """A service's loop (`robo-rl critic serve`, `robo-rl policy serve`) until Ctrl-C, then its sockets closed."""
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def sigterm_as_interrupt() -> None:
    """`kill` (SIGTERM) shuts a process down like Ctrl-C: the learner still writes its checkpoint; only the first
    of several signals interrupts."""
    from robo_rl.shutdown import interrupt_once

    interrupt_once()


class Tee:
    """A text stream that writes to a terminal stream and a log file (what a learner started alone prints)."""

    def __init__(self, stream, file) -> None:
        self.stream, self.file = stream, file

    def write(self, text: str) -> int:
        if not self.file.closed:
            self.file.write(text)
            self.file.flush()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def copy_stdout_to(path: Path) -> Tee:
    sys.stdout = Tee(sys.stdout, open(path, "a"))
    return sys.stdout


def close_log_copy(tee: Tee | None) -> None:
    if tee is not None:
        if sys.stdout is tee:
            sys.stdout = tee.stream
        tee.file.close()


def paced_episode(env, obs, act, after_step, period: float, realtime: bool) -> dict:
    """One episode of a person's session from `obs`: `act(obs)` each step, `after_step(obs, reward, terminated,
    truncated, info)` after it; while the person has paused the robot only the devices are read (an e-stop ends
    it); with `realtime`, paced at `period` without catching up after a pause. Returns the last step's info."""
    next_tick, info = time.monotonic(), {}
    while True:
        if env.paused:
            env.poll()
            if env.estopped:
                break
            time.sleep(period)
            next_tick = time.monotonic()
            continue
        obs, reward, terminated, truncated, info = env.step(act(obs))
        after_step(obs, reward, terminated, truncated, info)
        if terminated or truncated or env.estopped:
            break
        if realtime:
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
    return info
