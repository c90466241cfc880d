"""Run folders that do not surprise, and a training bar whose ETA holds."""

import signal
import subprocess
import sys
from pathlib import Path

from robo_rl import cli
from robo_rl.commands.common import STARTED_BY_ENV, UsageError
from robo_rl.config import load_config, make_env, make_policy, save_config
from robo_rl.progress import EtaEstimator, TrainingBar
from robo_rl.runs import save_checkpoint
from robo_rl.transport.link import free_ports

ROOT = Path(__file__).resolve().parents[1]


def toy_args(tmp_path) -> list[str]:
    p = free_ports(3)
    return [
        "env=point_reach",
        "experiment=rlpd",
        f"outputs_dir={tmp_path / 'outputs'}",
        f"cache_dir={tmp_path / 'cache'}",
        f"transport.data_port={p[0]}",
        f"transport.weights_port={p[1]}",
        f"transport.ctrl_port={p[2]}",
        "logger.progress=false",
        "demos.num_episodes=3",
        "algo.batch_size=32",
    ]


def test_eval_writes_beside_the_training_report_and_skips_a_corrupt_newest_checkpoint(tmp_path, capsys):
    cfg = load_config(["env=point_reach", "experiment=rlpd", "experiment=rlpd"])
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    policy = make_policy(cfg, make_env(cfg)).state_dict()
    save_checkpoint(run, 100, {"algo": {"policy": policy}, "counters": {"env_steps": 100}})
    save_checkpoint(run, 200, {"algo": {"policy": policy}, "counters": {"env_steps": 200}})
    (run / "checkpoints" / "step_000000200.pt").write_bytes(b"half a checkpoint")  # killed while writing
    (run / "eval" / "report.md").write_text("the training run's report")
    code = cli.main(
        [
            "eval",
            f"checkpoint={run}",
            "eval.episodes=3",
            "eval.video=true",
            "eval.video_episodes=1",
            "logger.progress=false",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "step_000000200.pt is corrupt" in err and "evaluating the checkpoint before it" in err
    assert (run / "eval" / "report.md").read_text() == "the training run's report"
    report = (run / "eval" / "step_000000100" / "report.md").read_text()
    assert "after 100 env steps" in report and "](videos/episode_000_" in report
    assert (run / "eval" / "step_000000100" / "learning_curve.png").exists()


def test_a_learner_that_cannot_bind_its_port_leaves_no_run_folder(tmp_path, capsys):
    import zmq

    args = toy_args(tmp_path)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.bind(f"tcp://127.0.0.1:{next(a for a in args if a.startswith('transport.data_port=')).split('=')[1]}")
    try:
        code = cli.main(["learner", *args])
    finally:
        ctx.destroy(linger=0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert code == 2 and "already in use" in capsys.readouterr().err
    assert not list((tmp_path / "outputs").glob("*/*")), "no run folder left behind"


def test_a_slow_learner_start_is_waited_for_and_a_timeout_names_its_last_log_line(tmp_path):
    """Several runs starting at once on a loaded machine: a learner still importing after 60 s is waited for;
    past the limit (or dead) the error carries its last log line, since a fresh run's folder is then removed."""
    import pytest

    from robo_rl.commands.train import LEARNER_START_TIMEOUT_S, _wait_for_learner

    assert LEARNER_START_TIMEOUT_S >= 300
    (tmp_path / "learner.log").write_text("starting\nreplay: opening the store\n")
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(UsageError, match=r"did not start within 1 s \(its last log line: replay: opening"):
            _wait_for_learner(slow, tmp_path, timeout_s=1.0)
        (tmp_path / "learner.pid").write_text(str(slow.pid))  # it got there: no error
        _wait_for_learner(slow, tmp_path, timeout_s=1.0)
    finally:
        slow.kill()
        slow.wait()
    (tmp_path / "learner.pid").unlink()
    (tmp_path / "learner.log").write_text("Traceback ...\nValueError: policy.scale must be positive\n")
    with pytest.raises(UsageError, match="failed to start: ValueError: policy.scale must be positive"):
        _wait_for_learner(slow, tmp_path, timeout_s=10.0)


def test_a_learner_alone_writes_its_log_evaluates_and_removes_its_pid_file(tmp_path, monkeypatch, capsys):
    """The learner is a process of its own, not started by `train`; its actor runs `robo-rl actor`'s code in this
    process (torch is imported here already: a second fresh interpreter would pay ~5 s of CPU for it)."""
    run = tmp_path / "run"
    args = [
        *toy_args(tmp_path),
        f"run_dir={run}",
        "train.total_env_steps=150",  # the learner's files, not learning: a few episodes and updates
        "train.learning_starts=50",
        "eval.episodes=2",
        "actor.hello_timeout_s=60",
        "policy.hidden=[32,32]",  # the learner's files, not learning: small networks
        "algo.critic_hidden=[32,32]",
    ]
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.delenv(STARTED_BY_ENV, raising=False)
    learner_err = tmp_path / "learner.stderr"  # a file, not a pipe: nobody reads it while the actor runs here
    with open(learner_err, "w") as err_file:
        learner = subprocess.Popen(
            [sys.executable, "-m", "robo_rl.cli", "learner", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
        )
    try:
        actor_code = cli.main(["actor", *args])  # until the learner says the run is done
        learner.wait(timeout=180)
    finally:
        learner.kill()
    err, out = learner_err.read_text(), capsys.readouterr()
    assert learner.returncode == 0, (err[-2000:], actor_code, out.out[-2000:], out.err[-2000:])
    log = (run / "learner.log").read_text()
    assert "learner: run folder" in log and "learner: done" in log and "success" in log, log
    assert not (run / "learner.pid").exists()
    assert (run / "eval" / "report.json").exists() and (run / "eval" / "learning_curve.png").exists()


def test_the_eta_follows_the_rate_of_training_proper_not_the_fast_start():
    eta = EtaEstimator(total=10_000, steady_from=1_000, window_s=120.0)
    t = 0.0
    for steps in range(0, 1_001, 100):  # learning_starts: 1000 steps in 10 s, no updates
        eta.update(steps, now=t)
        t += 1.0
    assert eta.seconds_left() is None, "no ETA from the update-free start"
    steps = 1_000
    for _ in range(300):  # training proper: 20 steps/s
        t += 1.0
        steps += 20
        eta.update(steps, now=t)
    assert abs(eta.seconds_left() - (10_000 - steps) / 20) < 1.0


def test_the_training_bar_shows_its_total_from_the_start_and_continues_a_resumed_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save_config(load_config(["env=point_reach", "experiment=rlpd", "train.total_env_steps=5000"]), run / "config.yaml")
    lines = [
        '{"kind": "episode", "env_steps": 1150}',
        '{"kind": "learner", "env_steps": 1200}',
        '{"kind": "end", "env_steps": 1234, "reason": "interrupted"}',
        '{"kind": "lear',
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines))
    bar = TrainingBar(load_config([f"resume={run}"]), run, enabled=False)
    assert (bar.env_steps, bar.total) == (1234, 5000)
    bar.learner_line({"kind": "learner", "env_steps": 1300, "episodes": 30, "success_rate": 0.5})
    assert bar.env_steps == 1300 and "success=0.50" in bar.postfix
    fresh_cfg = load_config(["env=point_reach", "experiment=rlpd", "train.total_env_steps=5000"])
    fresh = TrainingBar(fresh_cfg, None, enabled=False)
    assert (fresh.env_steps, fresh.total) == (0, 5000)


def test_a_config_error_in_eval_answers_before_torch_is_imported(tmp_path):
    from robo_rl.config import load_config, save_config

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_config(load_config(["env=point_reach", "experiment=rlpd", "experiment=rlpd"]), run / "config.yaml")
    code = (
        "import sys, contextlib, io\nfrom robo_rl.cli import main\nerr = io.StringIO()\n"
        "with contextlib.redirect_stderr(err):\n"
        f"    rc = main(['eval', 'checkpoint={run}', 'algo.batch_sise=3'])\n"
        "print(rc, 'torch' in sys.modules, err.getvalue().strip())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    rc, torch_loaded, message = out.stdout.strip().split(" ", 2)
    assert rc == "2" and torch_loaded == "False", out.stdout + out.stderr
    assert "did you mean 'algo.batch_size'" in message


def test_an_actor_closing_says_what_became_of_unacknowledged_messages(caplog):
    import numpy as np

    from robo_rl.transport.actor_link import ActorLink
    from robo_rl.transport.link import free_ports

    cases = [
        (True, "INFO", "sent after the learner finished were not stored"),
        (False, "WARNING", "never confirmed stored by the learner and are lost"),
    ]
    for finished, level, words in cases:
        link = ActorLink("127.0.0.1", *free_ports(3), "actor-0")
        link.send_steps({}, {"x": np.zeros(3)}, env_steps=3)
        caplog.clear()
        with caplog.at_level("INFO", logger="robo_rl.transport.actor_link"):
            link.close(0, run_finished=finished)
        (record,) = [r for r in caplog.records if "messages (3 env steps)" in r.getMessage()]
        assert record.levelname == level and words in record.getMessage()


def test_the_resume_log_line_adds_up(tmp_path, caplog):
    from robo_rl.config import save_config
    from robo_rl.learner import Learner
    from tests.test_pipeline import toy_config
    from tests.test_resume import messages, toy_config_ports

    cfg = toy_config(tmp_path, "replay.flush_every_s=0.01")
    run = tmp_path / "run"
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    learner = Learner(cfg, run, progress=False)
    msgs = messages(6)
    for i, msg in enumerate(msgs):
        learner.ingest("actor-0", msg, session=5, seq=i + 1)
        if i == 2:
            learner.checkpoint()
    learner.acknowledge(learner.replay.flush())
    total, records = learner.env_steps, learner.replay.online.writes
    learner.close()
    with caplog.at_level("INFO", logger="robo_rl.learner"):
        again = Learner(load_config([f"resume={run}", *toy_config_ports(tmp_path)]), run, progress=False)
    again.close()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed at")]
    at_ckpt = sum(int((m["step"] > 0).sum()) for m in msgs[:3])
    assert line.startswith(f"resumed at {total} env steps: {at_ckpt} from the checkpoint + {total - at_ckpt} stored")
    assert f"the replay holds {records} records" in line
