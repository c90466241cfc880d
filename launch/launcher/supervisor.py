"""The supervisor: starts the slots in order, restarts a crashed actor, ends the launch with the learner, stops
everything on Ctrl-C. It starts a process through the function it is handed, so every placement (local, SSH, Ray)
shares it."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections.abc import Callable

from launch.launcher.board import StatusBoard
from launch.launcher.slots import Slot
from launch.layout import Layout

EXIT_STOPPED = 130  # a process that stopped on purpose (Ctrl-C, an e-stop, the safety layer): never restarted
MAX_BACKOFF_S = 30.0  # restart delays double from restart_backoff_s up to this
TERM_GRACE_S = 5.0  # after SIGTERM, this long before SIGKILL
END_GRACE_S = 10.0  # after the learner's run is done, actors get this long to end by themselves
POLL_S = 0.2  # how often processes are checked


class Supervisor:
    """Starts the slots (servers, the learner, then, once its ports accept, the actors), restarts a crashed one
    (non-zero exit it did not cause, except EXIT_STOPPED) up to `max_restarts` with doubling delays, ends the launch
    when the learner ends (exit 0: done; otherwise: a failure) or no actor is left, and stops everything on Ctrl-C
    or SIGTERM: SIGINT to each process group, SIGTERM after `stop_timeout_s`, SIGKILL after TERM_GRACE_S."""

    def __init__(
        self,
        layout: Layout,
        slots: list[Slot],
        start: Callable[[Slot], object],
        learner_up: Callable[[], bool],
        board: StatusBoard,
    ) -> None:
        self.layout, self.slots, self.start_fn, self.learner_up, self.board = layout, slots, start, learner_up, board
        self.learner = next(s for s in slots if s.proc.role == "learner")
        self.actors = [s for s in slots if s.proc.role == "actor"]
        self.learner_ready = False
        self.ended_at: float | None = None  # when the learner finished its run

    def run(self) -> int:
        previous = _signals_interrupt()
        try:
            try:
                for role in ("critic", "gui", "learner"):
                    for s in self.slots:
                        if s.proc.role == role:
                            self._start(s)
                code = self._watch()
            except KeyboardInterrupt:
                self.board.say("interrupted: stopping every process (the learner writes a checkpoint) ...")
                code = EXIT_STOPPED
            self._stop_all()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.board.finish()
        return code

    def _watch(self) -> int:
        while True:
            now = time.monotonic()
            for s in self.slots:
                self._check(s, now)
            if not self.learner_ready and self.learner.alive and self.learner_up():
                self.learner_ready = True
                for s in self.actors:
                    self._start(s)
            code = self._outcome(now)
            if code is not None:
                return code
            self.board.draw()
            time.sleep(POLL_S)

    def _start(self, s: Slot) -> None:
        if s.handle is not None:  # a restart: mark it in the log the new process appends to
            try:
                with open(s.log, "a") as f:
                    f.write(f"\n--- launch: restart {s.restarts} at {dt.datetime.now():%H:%M:%S} (exit {s.code}) ---\n")
            except OSError:  # a log on another Ray node
                pass
        s.handle, s.code, s.state, s.stopping = self.start_fn(s), None, "running", False
        s.pids.append(s.handle.pid)

    def _check(self, s: Slot, now: float) -> None:
        if s.state == "restarting" and now >= s.restart_at and self.ended_at is None:
            s.restarts += 1
            self._start(s)
            return
        if not s.alive or (code := s.handle.poll()) is None:
            return
        s.code = code
        s.handle.signal(signal.SIGKILL)  # whatever it started in its group goes with it (its pid is not reused yet)
        if s.stopping or code in (0, EXIT_STOPPED) or s.proc.role == "learner":
            s.state = "exited" if s.stopping or code in (0, EXIT_STOPPED) else "crashed"
            if s.proc.role == "learner" and code == 0:
                self.ended_at = now
            return
        if s.proc.restart == "on-failure" and s.restarts < self.layout.max_restarts and self.ended_at is None:
            delay = min(MAX_BACKOFF_S, self.layout.restart_backoff_s * 2**s.restarts)
            s.state, s.restart_at = "restarting", now + delay
            self.board.say(f"{s.proc.name} exited with code {code}: restarting in {delay:.0f} s ({s.log})")
        else:
            s.state = "crashed"
            self.board.say(f"{s.proc.name} exited with code {code}: {s.handle.last_line()} ({s.log})")

    def _outcome(self, now: float) -> int | None:
        learner = self.learner
        if learner.code is not None and learner.code != 0:
            self.board.say(
                f"the learner exited with code {learner.code}: {learner.handle.last_line()} "
                f"({learner.log}); stopping the others"
            )
            return EXIT_STOPPED if learner.code == EXIT_STOPPED else 1
        if self.ended_at is not None:  # the run is done: actors end by themselves, the rest is stopped
            if all(not s.alive for s in self.actors) or now - self.ended_at > END_GRACE_S:
                return 0
            return None
        active = [s for s in self.actors if s.alive or s.state in ("waiting", "restarting")]
        failed = [s for s in self.actors if s.code not in (None, 0)]
        if self.actors and not active and failed:  # all data sources gone: the learner would wait forever
            self.board.say(
                f"no actor is left running ({failed[-1].proc.name}: exit {failed[-1].code}): stopping "
                "the learner (it writes a checkpoint)"
            )
            return 1
        return None

    def _stop_all(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to whatever still runs; a second Ctrl-C skips to SIGKILL."""
        for s in self.slots:
            if s.state in ("waiting", "restarting"):
                s.state = "exited" if s.code is not None else "not started"
        try:
            for sig, wait_s in ((signal.SIGINT, self.layout.stop_timeout_s), (signal.SIGTERM, TERM_GRACE_S)):
                live = [s for s in self.slots if s.alive]
                if not live:
                    break
                for s in live:
                    s.stopping, s.state = True, "stopping"
                    s.handle.signal(sig)
                deadline = time.monotonic() + wait_s
                while any(s.alive for s in live) and time.monotonic() < deadline:
                    for s in live:
                        self._check(s, time.monotonic())
                    self.board.draw()
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.board.say("interrupted again: killing every process")
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):  # the kills below are quick and must all happen
                signal.signal(sig, signal.SIG_IGN)
            for s in self.slots:
                if s.alive:
                    s.stopping = True
                    s.handle.signal(signal.SIGKILL)
                    while s.handle.poll() is None:
                        time.sleep(POLL_S / 4)
                    self._check(s, time.monotonic())


def _signals_interrupt() -> dict:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the launcher (the children have their own process groups, so a
    terminal's Ctrl-C reaches only us and we stop them in order)."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for s in previous:
        signal.signal(s, interrupt)
    return previous
