"""Metrics: strict JSON whatever a heartbeat carries, TensorBoard files its own reader opens, W&B offline runs."""

import json
import logging

import numpy as np
import pytest

from robo_rl.config import ConfigError, load_config
from robo_rl.loggers import metrics_writer
from robo_rl.runs import MetricsWriter


def strict_lines(path):
    """Each line parsed by a parser that refuses NaN and infinities (as jq, JavaScript and most tools do)."""

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


class Unprintable:
    def __repr__(self):
        raise RuntimeError("no repr")


def hostile_records():
    return [
        {
            "kind": "learner",
            "env_steps": 10,
            "critic_loss": float("nan"),
            "alpha": float("inf"),
            "q_mean": np.float32("nan"),
            "updates": np.int64(7),
            "success": np.bool_(True),
        },
        {
            "kind": "learner",
            "env_steps": 20,
            "actor_stats": {
                "actor-0": {
                    "note": b"\xff\xfe raw bytes",
                    "steps_per_s": -float("inf"),
                    "obj": object(),
                    "bad": Unprintable(),
                    1: np.array([1.0, np.nan]),
                    "t": (1, 2),
                }
            },
        },
    ]


def test_metrics_lines_are_strict_json_and_hostile_heartbeat_values_never_raise(tmp_path, caplog):
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    with caplog.at_level(logging.WARNING):
        for record in hostile_records():
            writer.write(record)
        writer.write(hostile_records()[1])  # the same problem again is not warned again
    writer.close()
    first, second, _ = strict_lines(tmp_path / "metrics.jsonl")
    assert first["critic_loss"] is None and first["alpha"] is None and first["q_mean"] is None
    assert first["updates"] == 7 and first["success"] is True
    stats = second["actor_stats"]["actor-0"]
    assert stats["steps_per_s"] is None and stats["1"] == [1.0, None] and stats["t"] == [1, 2]
    assert "raw bytes" in stats["note"] and "object" in stats["obj"] and stats["bad"] is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("actor_stats.actor-0.note holds bytes" in w for w in warnings), warnings
    assert len(warnings) == len(set(warnings)), "each problem is warned once"


def test_a_record_nested_without_end_is_cut_not_a_crash(tmp_path):
    deep: dict = {}
    node = deep
    for _ in range(10_000):  # deeper than Python's recursion limit
        node["x"] = {}
        node = node["x"]
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    writer.write({"kind": "learner", "env_steps": 1, "actor_stats": deep})
    writer.close()
    (line,) = strict_lines(tmp_path / "metrics.jsonl")
    assert line["env_steps"] == 1


def test_tensorboard_event_files_open_with_tensorboards_own_reader(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = load_config(["logger=tensorboard"])
    writer = metrics_writer(cfg, tmp_path)
    for step in (100, 200, 300):
        writer.write(
            {
                "kind": "learner",
                "env_steps": step,
                "updates": step // 2,
                "critic_loss": 1.0 / step,
                "actor_stats": {"actor-0": {"steps_per_s": 50.0}},
                "bad_messages": {},
            }
        )
        writer.write({"kind": "episode", "env_steps": step, "success": step == 300, "return": 0.5, "length": 50})
    writer.write({"kind": "learner", "env_steps": 400, "critic_loss": float("nan")})  # left out, not a crash
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"learner/critic_loss", "learner/actor_stats/actor-0/steps_per_s", "episode/success"} <= set(tags)
    loss = acc.Scalars("learner/critic_loss")
    assert [e.step for e in loss] == [100, 200, 300]
    assert loss[-1].value == pytest.approx(1 / 300)
    assert [e.value for e in acc.Scalars("episode/success")] == [0.0, 0.0, 1.0]
    assert strict_lines(tmp_path / "metrics.jsonl")[-1]["critic_loss"] is None  # the JSONL is still written


def test_wandb_offline_writes_its_run_inside_the_run_folder(tmp_path, monkeypatch):
    for var, sub in (("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"), ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(tmp_path / "home" / sub))  # nothing of the test's outside tmp_path
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    writer = metrics_writer(load_config(["logger=wandb"]), run_dir)
    for step in (100, 200):
        writer.write({"kind": "learner", "env_steps": step, "critic_loss": float("nan"), "updates": step})
    writer.close()
    (run_files,) = (run_dir / "wandb").glob("offline-run-*")
    assert list(run_files.glob("*.wandb")), sorted(p.name for p in run_files.iterdir())
    assert len(strict_lines(run_dir / "metrics.jsonl")) == 2


def test_an_unknown_backend_is_refused_by_name(tmp_path):
    cfg = load_config(["logger.backend=mlflow"])
    with pytest.raises(ConfigError, match="logger.backend must be one of jsonl, tensorboard, wandb, got 'mlflow'"):
        metrics_writer(cfg, tmp_path)


def test_choosing_no_backend_imports_neither_package():
    import subprocess
    import sys

    code = (
        "import sys; from robo_rl.config import load_config; from robo_rl.loggers import metrics_writer; "
        "import tempfile, pathlib; metrics_writer(load_config([]), pathlib.Path(tempfile.mkdtemp())).close(); "
        "print(sorted(m for m in ('tensorboard', 'wandb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
