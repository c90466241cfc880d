"""End to end through the `robo-rl` command: real learner and actor processes over ZeroMQ on loopback."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robo_rl.runs import read_metrics
from robo_rl.transport.link import free_ports

ROOT = Path(__file__).resolve().parents[1]


def robo_rl(*args, cwd, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "robo_rl.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )


def isolated(tmp_path, experiment: str | None = "rlpd") -> list[str]:
    """Overrides that keep a test's run folder, cache and ports to itself (and SAC/RLPD unless told otherwise)."""
    p = free_ports(3)
    return [
        *([f"experiment={experiment}"] if experiment else []),
        f"outputs_dir={tmp_path / 'outputs'}",
        f"cache_dir={tmp_path / 'cache'}",
        f"transport.data_port={p[0]}",
        f"transport.weights_port={p[1]}",
        f"transport.ctrl_port={p[2]}",
        "logger.progress=false",
    ]


def only_run_dir(tmp_path) -> Path:
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    return run_dir


def in_this_process(monkeypatch, *argv) -> int:
    """`main(argv)` as the console script runs it, in pytest's process (torch is imported here already: a fresh
    interpreter would pay ~5 s of CPU for it again); conftest puts back the signal handlers a command installs."""
    from robo_rl.cli import main

    monkeypatch.chdir(ROOT)  # where the console script is run from in the README
    monkeypatch.setenv("MUJOCO_GL", "egl")
    return main(list(argv))


def test_train_runs_learner_and_actor_processes_and_the_policy_beats_the_untrained_one(tmp_path):
    args = isolated(tmp_path, "reach_smoke")
    http_port, zmq_port = free_ports(2)  # with the intervention GUI started beside the run
    out = robo_rl("train", *args, "gui=true", f"gui.port={http_port}", f"gui.zmq_port={zmq_port}", cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = only_run_dir(tmp_path)
    for f in ("config.yaml", "metrics.jsonl", "learner.log", "actor.log", "eval/report.md", "eval/learning_curve.png"):
        assert (run_dir / f).exists(), f
    assert f"intervention GUI: http://127.0.0.1:{http_port}/" in (run_dir / "gui.log").read_text()
    assert list((run_dir / "checkpoints").glob("step_*.pt"))
    trained = json.loads((run_dir / "eval/report.json").read_text())
    assert trained["episodes"] == 10 and len(trained["success_ci95"]) == 2
    metrics = read_metrics(run_dir / "metrics.jsonl")
    assert metrics[-1]["kind"] == "end" and metrics[-1]["reason"] == "done" and metrics[-1]["env_steps"] >= 1500
    assert any(m["kind"] == "episode" for m in metrics)
    learner_lines = [m for m in metrics if m["kind"] == "learner"]
    assert any(m["updates"] > 0 for m in learner_lines)
    assert 0.5 < learner_lines[-1]["realised_utd"] < 1.5, "the learner enforces the configured UTD of 1"
    # staleness of the acting weights: published every 50 updates, so a few versions behind at most
    stale = [m for m in learner_lines if "staleness_versions_max" in m]
    assert stale and all(0 <= m["staleness_versions_max"] <= 10 for m in stale)
    assert any(0.0 < m.get("staleness_s_mean", -1) < 5.0 for m in stale)

    # the untrained policy of the same config, on the same evaluation seeds (in-process: no second run needed)
    from robo_rl.config import load_saved_config, make_env, make_policy
    from robo_rl.eval.episodes import evaluate_policy

    cfg = load_saved_config(run_dir / "config.yaml")
    env = make_env(cfg)
    untrained = evaluate_policy(env, make_policy(cfg, env).eval(), trained["episodes"], cfg.eval.seed)
    env.close()
    assert trained["success_rate"] >= untrained["success_rate"] + 0.5, (untrained, trained)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "algo.batch_sise=3"], "unknown config key 'algo.batch_sise'"),
        (["train", "env=nope"], "Could not find 'env/nope'"),
        (["eval", "checkpoint=/nonexistent/run"], "checkpoint /nonexistent/run does not exist"),
        (["eval"], "eval needs checkpoint="),
        (["fly"], "unknown command 'fly'"),
    ],
)
def test_bad_input_gets_one_line_naming_the_problem(tmp_path, args, message):
    out = robo_rl(*args, cwd=tmp_path, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_corrupt_checkpoint_is_refused_by_name(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "step_000000001.pt"
    bad.write_bytes(b"not a checkpoint")
    code = in_this_process(monkeypatch, "eval", f"checkpoint={bad}")  # an eval loads torch: not a fresh one for this
    assert code == 2 and f"checkpoint {bad} is corrupt" in capsys.readouterr().err


def test_an_actor_with_no_learner_and_a_busy_port_get_one_line_errors(tmp_path, capsys, monkeypatch):
    """In this process (`main` is what the console script runs): two more interpreters would only import torch again;
    an exception escaping `main` fails the test as a traceback would."""
    from robo_rl.cli import main

    monkeypatch.chdir(tmp_path)
    args = isolated(tmp_path)
    assert main(["actor", *args, "actor.hello_timeout_s=1"]) == 2
    err = capsys.readouterr().err
    assert "no learner answered" in err and "Traceback" not in err

    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    port = int(next(a for a in args if a.startswith("transport.data_port=")).split("=")[1])
    sock.bind(f"tcp://127.0.0.1:{port}")
    try:
        code = main(["learner", *args])
    finally:
        ctx.destroy(linger=0)
    err = capsys.readouterr().err
    assert code == 2 and f"port {port} on 127.0.0.1 is already in use" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_the_default_experiment_reaches_80_percent_within_15_minutes(tmp_path):
    start = time.monotonic()
    out = robo_rl("train", *isolated(tmp_path, experiment=None), cwd=ROOT, timeout=15 * 60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert time.monotonic() - start < 15 * 60
    report = json.loads((only_run_dir(tmp_path) / "eval/report.json").read_text())
    assert report["episodes"] >= 20 and report["success_rate"] >= 0.8, report


def test_keys_generate_writes_a_learner_and_actor_keypairs_and_authorises_the_actors(tmp_path):
    out = robo_rl("keys", "generate", "k/", "arm-left", "arm-right", cwd=tmp_path, timeout=60)  # as the README types it
    assert out.returncode == 0, out.stderr
    assert "public keys are in k/authorized/;" in out.stdout and "//" not in out.stdout, out.stdout
    names = sorted(p.name for p in (tmp_path / "k").iterdir() if p.is_file())
    assert names == [
        "arm-left.key",
        "arm-left.key_secret",
        "arm-right.key",
        "arm-right.key_secret",
        "learner.key",
        "learner.key_secret",
    ]
    assert sorted(p.name for p in (tmp_path / "k/authorized").iterdir()) == ["arm-left.key", "arm-right.key"]
    assert (tmp_path / "k/learner.key_secret").stat().st_mode & 0o077 == 0
    again = robo_rl("keys", "generate", str(tmp_path / "k"), cwd=tmp_path, timeout=60)
    assert again.returncode == 2 and "exists" in again.stderr
