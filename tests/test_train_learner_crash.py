"""`robo-rl train` restarts a learner that was killed (kill -9) on its run folder while the actor holds: the run
finishes with its evaluation report and every episode the actor completed is stored once, without gaps."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from robo_rl.runs import read_metrics
from tests.test_cli import ROOT, isolated
from tests.test_resume import stored_episodes
from tests.waiting import wait_until


def children(pid: int) -> dict[int, str]:
    """The child processes of `pid`: pid → command line."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found[int(child)] = cmdline
    return found


def role_pid(train_pid: int, role: str) -> int | None:
    return next((pid for pid, cmd in children(train_pid).items() if f"robo_rl.cli {role} " in cmd), None)


def thread_niceness(pid: int) -> set[int]:
    """The niceness of every thread of process `pid` (Linux keeps it per thread: /proc/<pid>/task/<tid>/stat)."""
    return {int(stat.read_text().rsplit(")", 1)[1].split()[16]) for stat in Path(f"/proc/{pid}/task").glob("*/stat")}


def stored_segments(run_dir: Path) -> list[Path]:
    return list(run_dir.glob("replay/online/seg_*.rrs"))


def test_a_learner_killed_under_train_is_restarted_on_its_run_folder_and_nothing_is_lost(tmp_path):
    args = [
        *isolated(tmp_path),
        "env=point_reach",
        "demos.num_episodes=3",
        "train.learning_starts=100",
        "train.total_env_steps=1200",  # a fast learner and actor once ran 400 before the first stored segment was seen
        "train.checkpoint_every_s=3600",  # no timed checkpoint before the kill either, however loaded the machine
        "algo.batch_size=32",
        "replay.flush_every_s=0.3",
        "eval.episodes=3",
        "actor.hello_timeout_s=60",
        "train.learner_nice=7",  # below its actor's CPU priority, a restarted learner too
        "transport.learner_timeout_s=3",  # not the 30 s a niced learner's actor allows: the actor notices the kill
    ]
    train = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", "train", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    try:
        wait_until(
            lambda: list((tmp_path / "outputs").glob("*/*/learner.pid")), 120, "the learner to start", every_s=0.2
        )
        (run_dir,) = (tmp_path / "outputs").glob("*/*")
        # killed once data is stored, before any checkpoint: the common case of a crash in the first minutes
        wait_until(lambda: stored_segments(run_dir), 120, "stored replay", every_s=0.2)
        first_learner = int((run_dir / "learner.pid").read_text())
        actor = role_pid(train.pid, "actor")
        assert thread_niceness(first_learner) == {7}, "every thread of the learner, torch's and ZeroMQ's included"
        assert thread_niceness(actor) == {os.nice(0)}, "the actor keeps the priority it was started with"
        assert actor is not None and not list((run_dir / "checkpoints").glob("step_*.pt"))
        os.kill(first_learner, signal.SIGKILL)

        def restarted() -> bool:
            assert train.poll() is None, "train ended instead of restarting its learner: " + train.stdout.read()[-2000:]
            pid = role_pid(train.pid, "learner")
            return pid not in (None, first_learner) and (run_dir / "learner.pid").exists()

        wait_until(restarted, 60, "a new learner process", every_s=0.2)
        learner = role_pid(train.pid, "learner")  # lowers its priority once its config is read
        wait_until(lambda: thread_niceness(learner) == {7}, 30, "the restarted learner at niceness 7", every_s=0.2)
        assert role_pid(train.pid, "actor") == actor, "the actor process is the same one throughout"
        out, _ = train.communicate(timeout=180)
    finally:
        train.kill()
    assert train.returncode == 0, out[-3000:]
    assert "the learner exited with code -9: restarted on the run folder (1 of 3)" in out
    assert (run_dir / "eval" / "report.json").exists() and "success" in out  # the evaluation report
    learner_log = (run_dir / "learner.log").read_text()
    assert "dropped a message" not in learner_log, "the actor's reconnect is not foreign traffic"
    actor_log = (run_dir / "actor.log").read_text()
    assert "actor-0: done" in actor_log and "lost with this actor" not in actor_log

    steps, ends = stored_episodes(run_dir)
    ids = sorted(ep for _, ep in steps)
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"an episode is missing: {ids}"  # numbered on from a base
    for key, got in steps.items():  # each episode from its reset, once, no gaps
        assert got == list(range(len(got))), f"episode {key} has duplicates or gaps: {got}"
    complete = [key for key in steps if key in ends]
    assert len(complete) >= len(ids) - 1 and all(steps[k][-1] == ends[k] for k in complete)
    episodes = [m for m in read_metrics(run_dir / "metrics.jsonl") if m.get("kind") == "episode"]
    for m in episodes:  # every episode the learners counted is on disk whole
        assert ends.get((m["actor"], m["episode_id"])) == m["length"], m
    end = read_metrics(run_dir / "metrics.jsonl")[-1]
    assert end["kind"] == "end" and end["reason"] == "done"


def test_a_learner_that_crashes_again_and_again_is_restarted_three_times_then_the_run_ends(tmp_path, capsys):
    """A deterministic crash does not loop: three restarts within the window, then the actor is stopped."""
    from robo_rl.commands.train import LEARNER_RESTARTS, _follow_progress
    from robo_rl.progress import TrainingBar
    from tests.test_pipeline import toy_config

    (tmp_path / "metrics.jsonl").touch()

    def crashing_learner() -> subprocess.Popen:
        return subprocess.Popen(["sh", "-c", "exit 3"])

    started = []

    def restart(code: int, n: int) -> subprocess.Popen:
        started.append((code, n))
        return crashing_learner()

    # the stand-in takes SIGINT's default action even when this pytest was started with SIGINT ignored (a
    # non-interactive shell's `&` does that, and an ignored signal is inherited): train's SIGINT must end it
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    procs = {"learner": crashing_learner(), "actor": subprocess.Popen(["sleep", "60"], preexec_fn=default_sigint)}
    bar = TrainingBar(toy_config(tmp_path), None, enabled=False)
    assert _follow_progress(None, tmp_path, procs, bar, restart) == LEARNER_RESTARTS == 3
    assert started == [(3, 1), (3, 2), (3, 3)]
    assert procs["actor"].returncode == -signal.SIGINT, "the actor is stopped once no learner is left"
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if "restarted" in line] == [
        f"the learner exited with code 3: restarted on the run folder ({n} of 3)" for n in (1, 2, 3)
    ]
