"""What a failed or interrupted run leaves behind: no empty run folders, folders named after what made them, and the
command that resumes an interrupted run (issue 47, "clutter and small surprises")."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robo_rl import cli
from robo_rl.runs import read_metrics
from tests.test_cli import ROOT
from tests.test_cli import isolated as cli_isolated


def isolated(tmp_path) -> list[str]:
    """point_reach with test_cli's run folder, cache and ports kept to the test (the default experiment)."""
    return ["env=point_reach", *cli_isolated(tmp_path, experiment=None)]


def run_folders(tmp_path) -> list[Path]:
    return list((tmp_path / "outputs").glob("*/*"))


@pytest.fixture(autouse=True)
def _default_sigterm():
    yield
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a command turns SIGTERM into an interrupt for its process


def test_a_train_that_fails_before_its_first_checkpoint_leaves_no_run_folder(tmp_path, capsys):
    # the residual default with a base that does not exist: refused after the run folder and env spec were made
    code = cli.main(["train", *isolated(tmp_path), "demos.num_episodes=0", "policy.base.path=/nonexistent/base.pt"])
    assert code == 2 and "/nonexistent/base.pt does not exist" in capsys.readouterr().err
    assert run_folders(tmp_path) == [], "a failed start leaves no run folder"


def test_a_train_with_a_learned_reward_that_is_not_there_is_refused_before_recording_demonstrations(tmp_path, capsys):
    # the README's recipe with the model's training skipped: refused at once, not after 50 s of demonstrations
    missing = tmp_path / "rewards" / "critic"
    start = time.monotonic()
    code = cli.main(["train", *isolated(tmp_path), "reward=model", f"reward.model={missing}"])
    out = capsys.readouterr()
    assert code == 2 and f"reward.model={missing}: no reward model there" in out.err, out.err
    assert "demonstrations" not in out.out + out.err and run_folders(tmp_path) == [] and time.monotonic() - start < 20


def test_a_distill_that_cannot_run_is_refused_before_a_run_folder_is_made(tmp_path, capsys):
    from policies.bc import BCPolicy
    from robo_rl.offline.bc import save_atomic

    junk = tmp_path / "junk.pt"
    junk.write_text("not a policy")
    mlp = save_atomic(BCPolicy(4, 2, hidden=[8]).checkpoint(), tmp_path / "mlp" / "policy.pt")
    for path, why in ((junk, f"{junk} is corrupt or unreadable"), (mlp, "is an MLP policy (one step already)")):
        code = cli.main(["distill", *isolated(tmp_path), f"checkpoint={path}"])
        out = capsys.readouterr()
        assert code == 2 and why in out.err, out.err
        assert run_folders(tmp_path) == [] and "run folder" not in out.out, out.out  # none made, none removed


def test_bc_runs_are_named_after_behaviour_cloning_and_the_task_unless_named(tmp_path, capsys):
    args = [*isolated(tmp_path), "demos.num_episodes=3", "bc.epochs=1", "bc.eval_episodes=0"]
    assert cli.main(["bc", *args]) == 0
    (run,) = run_folders(tmp_path)
    assert run.name.endswith("_bc_point_reach"), run.name  # not the default experiment's residual_pick_cube
    assert (run / "bc" / "policy.pt").exists()
    assert cli.main(["bc", *args, "name=my_base"]) == 0
    assert sorted(r.name.split("_", 1)[1] for r in run_folders(tmp_path)) == ["bc_point_reach", "my_base"]


def interrupt_at(env_steps: int):
    """A stand-in for `train`'s progress loop that presses Ctrl-C once the learner has counted `env_steps`."""

    def follow(cfg, run_dir, procs, bar, *rest):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and procs["learner"].poll() is None:
            steps = [m.get("env_steps", 0) for m in read_metrics(run_dir / "metrics.jsonl") if m["kind"] == "learner"]
            if steps and max(steps) >= env_steps:
                break
            time.sleep(0.2)
        raise KeyboardInterrupt

    return follow


def start_long_train(tmp_path, until) -> subprocess.Popen:
    """`robo-rl train` in its own session, for far more steps than a test waits for, once a learner metrics line
    satisfies `until`; small networks: the first updates come sooner and cost little."""
    args = [*isolated(tmp_path), "experiment=rlpd", "demos.num_episodes=3", "train.learning_starts=50"]
    args += ["algo.batch_size=32", "policy.hidden=[32,32]", "algo.critic_hidden=[32,32]", "logger.log_every_s=0.5"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", "train", "train.total_env_steps=100000", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list((tmp_path / "outputs").glob("*/*/metrics.jsonl"))
        if runs and any(m.get("kind") == "learner" and until(m) for m in read_metrics(runs[0])):
            break
        time.sleep(0.3)
    return proc


def test_ctrl_c_leaves_a_usable_checkpoint_prints_the_resume_command_and_a_resume_says_where_it_resumed(
    tmp_path, capsys, monkeypatch
):
    from robo_rl.commands import train

    proc = start_long_train(tmp_path, lambda m: m["updates"] > 50)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    (run,) = run_folders(tmp_path)
    assert f"resume with: robo-rl train resume={run}\n" in out, out[-2000:]
    end = read_metrics(run / "metrics.jsonl")[-1]
    assert end["kind"] == "end" and "interrupted" in end["reason"] and end["env_steps"] >= 50
    assert cli.main(["eval", f"checkpoint={end['checkpoint']}", "eval.episodes=2"]) == 0  # in this process
    assert "success" in capsys.readouterr().out

    logs = {role: (run / f"{role}.log").read_text() for role in ("learner", "actor")}
    assert all(logs.values()), "the first start wrote both logs"
    monkeypatch.setattr(train, "_follow_progress", interrupt_at(0))
    assert cli.main(["train", f"resume={run}", *isolated(tmp_path)[1:]]) == 130
    resumed = re.search(r"^resumed at (\d+) env steps: ", capsys.readouterr().out, re.M)
    assert resumed and int(resumed[1]) >= end["env_steps"]  # plus any stored after the checkpoint
    for role, before in logs.items():  # the resume appends: what the first processes logged is kept
        after = (run / f"{role}.log").read_text()
        assert after.startswith(before) and "--- train: started again at " in after[len(before) :], role


def test_kill_stops_the_learner_and_the_actor_too_and_the_run_can_resume(tmp_path):
    """SIGTERM to `train` alone (`kill <pid>`, a service manager's stop): without its handler the command died and
    left the learner and the actor running on; now it stops them as Ctrl-C does, and the learner checkpoints."""
    import psutil

    proc = start_long_train(tmp_path, lambda m: m["env_steps"] > 0)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 2, "a learner and an actor under train"
    # each in a session (a scheduling group) of its own, not train's: a terminal's Ctrl-C reaches train, which passes
    # it on (the Ctrl-C test above), and other sessions' load does not share the actor's CPU share
    assert all(os.getsid(c.pid) == c.pid != os.getsid(proc.pid) for c in children), [c.cmdline()[3] for c in children]
    proc.send_signal(signal.SIGTERM)  # to train only, not its process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline()[-3:] for p in alive]}"
    (run,) = run_folders(tmp_path)
    end = read_metrics(run / "metrics.jsonl")[-1]
    assert end["kind"] == "end" and "interrupted" in end["reason"]
    assert f"resume with: robo-rl train resume={run}\n" in out, out[-2000:]


def test_a_child_in_its_own_session_is_stopped_cleanly_when_its_starter_is_killed(tmp_path):
    """`train`'s learner, actors and page server (and `launch`'s processes) start in sessions of their own
    (robo_rl.commands.common.own_session). SIGKILL to the starter runs no handler of its: the kernel sends each child
    SIGTERM, which the learner takes as Ctrl-C (it checkpoints), so no orphan trains on with nobody to stop it."""
    import textwrap

    child = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from pathlib import Path
        stopped = Path({str(tmp_path / "stopped")!r})
        signal.signal(signal.SIGTERM, lambda *_: (stopped.write_text("SIGTERM"), sys.exit(0)))
        Path({str(tmp_path / "started")!r}).write_text(f"{{os.getpid()}} {{os.getsid(0)}}")
        time.sleep(60)
        """
    )
    starter = textwrap.dedent(
        f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from robo_rl.commands.common import own_session
        subprocess.Popen([sys.executable, "-c", {child!r}], **own_session())
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", starter])
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # its handler is installed before it says it started
    pid, sid = map(int, (tmp_path / "started").read_text().split())
    assert sid == pid != os.getsid(proc.pid), "the child leads a session of its own"
    proc.kill()
    proc.wait()
    deadline, stopped = time.monotonic() + 10, tmp_path / "stopped"
    # the handler creates the file, then writes it: read until its word is in (an empty read is the gap between)
    while not (stopped.exists() and stopped.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stopped.exists() and stopped.read_text() == "SIGTERM", "the kernel stopped the child when its starter died"
