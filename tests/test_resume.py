"""Resume: exact on CPU when fed the same data; nothing completed is lost to a kill -9 of the learner,
in the middle of training or of writing a checkpoint."""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from robo_rl.config import load_config, save_config
from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
from robo_rl.data.storage import SegmentStore
from robo_rl.learner import Learner
from robo_rl.runs import PAUSE_ENV, CheckpointError, read_metrics
from sim.point_reach import PointReachEnv
from tests.test_cli import ROOT, isolated
from tests.test_pipeline import SMALL_NETS, toy_config
from tests.waiting import wait_until


def messages(n_episodes, seed=0, per_message=7):
    """Actor-like step batches from random actions in the toy env, split into messages across episodes."""
    env = PointReachEnv(max_episode_steps=12)
    rng = np.random.default_rng(seed)
    rec, records = EpisodeRecorder(2), []
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=seed * 1000 + ep)
        records.append(rec.reset(obs, ep))
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(rng.uniform(-1, 1, 2).astype(np.float32))
            records.append(rec.record_step(obs, r, term, trunc, info))
            done = term or trunc
    batch = stack_records(records, fields_for_env(env))
    n = len(batch["step"])
    return [{k: v[i : i + per_message] for k, v in batch.items()} for i in range(0, n, per_message)]


def feed(learner, msgs, first_seq):
    for i, msg in enumerate(msgs):
        learner.ingest("actor-0", msg, session=5, seq=first_seq + i)
        learner.acknowledge(learner.replay.poll())
        while learner.updates < learner.schedule.budget(learner):
            learner.update()


def test_a_resumed_run_fed_the_same_data_ends_with_the_same_parameters_bit_for_bit(tmp_path):
    msgs = messages(16)  # 192 env steps: updates start in the first half (50), so the checkpoint holds trained state
    half = len(msgs) // 2
    overrides = ["train.learning_starts=50", "algo.batch_size=32", "replay.flush_every_s=0.05", "train.utd=2"]
    overrides += SMALL_NETS

    def learner_in(name, *extra):
        cfg = toy_config(tmp_path, *overrides, *extra)
        (tmp_path / name).mkdir(exist_ok=True)
        save_config(cfg, tmp_path / name / "config.yaml")
        return Learner(cfg, tmp_path / name, progress=False)

    straight = learner_in("straight")
    feed(straight, msgs[:half], 1)
    straight.checkpoint()
    feed(straight, msgs[half:], half + 1)

    first = learner_in("interrupted")
    feed(first, msgs[:half], 1)
    assert first.updates > 0
    first.checkpoint()
    first.close()
    del first
    resumed = Learner(
        load_config([f"resume={tmp_path / 'interrupted'}", *toy_config_ports(tmp_path)]),
        tmp_path / "interrupted",
        progress=False,
    )
    assert resumed.replay.online.writes == sum(len(m["step"]) for m in msgs[:half])
    feed(resumed, msgs[half:], half + 1)

    assert straight.updates == resumed.updates > 0
    a, b = straight.algo.state_dict(), resumed.algo.state_dict()
    for net in ("policy", "critic", "target_critic"):
        for name, tensor in a[net].items():
            assert torch.equal(tensor, b[net][name]), f"{net}.{name} differs"
    assert torch.equal(a["log_alpha"], b["log_alpha"])
    for i, state in a["critic_optim"]["state"].items():
        assert torch.equal(state["exp_avg_sq"], b["critic_optim"]["state"][i]["exp_avg_sq"])
    straight.close()
    resumed.close()


def test_a_corrupt_newest_checkpoint_is_reported_and_the_one_before_it_used_with_all_stored_data(tmp_path, caplog):
    msgs = messages(20)
    # checkpoints and stored data, not learning: small networks
    cfg = toy_config(tmp_path, "train.learning_starts=50", "algo.batch_size=32", *SMALL_NETS)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(cfg, run_dir / "config.yaml")
    learner = Learner(cfg, run_dir, progress=False)
    feed(learner, msgs[:10], 1)
    learner.checkpoint()
    updates_then = learner.updates
    feed(learner, msgs[10:], 11)
    newest = learner.checkpoint()
    learner.close()
    newest.write_bytes(newest.read_bytes()[:1000])  # torn
    half = newest.with_name("step_000000999.pt.tmp")  # a kill -9 mid-write leaves this: never read, removed
    half.write_bytes(b"half a checkpoint")
    resumed = Learner(load_config([f"resume={run_dir}", *toy_config_ports(tmp_path)]), run_dir, progress=False)
    assert f"checkpoint {newest} is corrupt or unreadable" in caplog.text
    assert not half.exists() and f"removed {half}: a checkpoint a kill left half-written" in caplog.text
    assert resumed.updates == updates_then  # the weights of the older checkpoint ...
    assert resumed.env_steps == learner.env_steps  # ... and every stored record, counted
    assert resumed.replay.online.writes == learner.replay.online.writes
    resumed.close()


def toy_config_ports(tmp_path):
    """Fresh ports for a resumed learner (the run's saved config holds the first one's)."""
    cfg = toy_config(tmp_path)
    return [f"transport.{k}={cfg.transport[k]}" for k in ("data_port", "weights_port", "ctrl_port")]


def stored_episodes(run_dir):
    """(source, episode id) → the list of steps stored, from the run's replay on disk."""
    store = SegmentStore.open(run_dir / "replay" / "online")
    assert store.problems == []
    steps = collections.defaultdict(list)
    ends = {}
    for _, batch, sources in store.iter_segments():
        for src, ep, step, end in zip(
            sources, batch["episode_id"], batch["step"], batch["terminated"] | batch["truncated"], strict=True
        ):
            steps[(str(src), int(ep))].append(int(step))
            if end:
                ends[(str(src), int(ep))] = int(step)
    return steps, ends


def completed_episodes(run_dir):
    return {
        (m["actor"], m["episode_id"]): m["length"]
        for m in read_metrics(run_dir / "metrics.jsonl")
        if m.get("kind") == "episode"
    }


def test_kill_9_mid_training_and_mid_checkpoint_loses_no_completed_episode(tmp_path):
    args = [
        *isolated(tmp_path),
        "env=point_reach",
        "demos.num_episodes=3",
        "train.learning_starts=50",
        "train.checkpoint_every_env_steps=100",
        "algo.batch_size=32",
        *SMALL_NETS,
        "eval.episodes=1",
        "actor.hello_timeout_s=30",
        "replay.flush_every_s=0.5",
    ]
    run_dir = tmp_path / "run"
    start = [sys.executable, "-m", "robo_rl.cli"]
    quiet = dict(cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    learner = subprocess.Popen(
        [*start, "learner", *args, f"run_dir={run_dir}", "train.total_env_steps=100000"], **quiet
    )
    actor = subprocess.Popen(
        [*start, "actor", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        # 1. kill -9 in the middle of training: updates under way (from step 50) and a checkpoint written
        def mid_training():
            return len(completed_episodes(run_dir)) >= 12 and list(run_dir.glob("checkpoints/step_*.pt"))

        wait_until(mid_training, 120, "12 episodes and a checkpoint", every_s=0.2)
        learner.kill()
        learner.wait()
        done_before_kill = completed_episodes(run_dir)

        # 2. resume, then kill -9 in the middle of writing the next checkpoint (300 env steps on: new episodes first);
        # the first kill may itself have come mid-write: its half-written file is no sign of the new learner's
        left = set((run_dir / "checkpoints").glob("*.tmp"))
        paused = {**os.environ, PAUSE_ENV: "60"}
        again = [*start, "learner", f"resume={run_dir}", f"run_dir={run_dir}", "train.checkpoint_every_env_steps=300"]
        learner = subprocess.Popen(again, env=paused, **quiet)
        wait_until(
            lambda: set((run_dir / "checkpoints").glob("*.tmp")) - left, 120, "a checkpoint being written", every_s=0.2
        )
        assert not left & set((run_dir / "checkpoints").glob("*.tmp"))  # the resumed learner removed the old one
        learner.kill()
        learner.wait()
        done_before_second_kill = completed_episodes(run_dir)
        assert len(done_before_second_kill) > len(done_before_kill)  # the resumed run went on

        # 3. resume again and finish
        steps_now = max(m["env_steps"] for m in read_metrics(run_dir / "metrics.jsonl") if "env_steps" in m)
        learner = subprocess.Popen(
            [*start, "learner", f"resume={run_dir}", f"run_dir={run_dir}", f"train.total_env_steps={steps_now + 100}"],
            **quiet,
        )
        assert learner.wait(timeout=120) == 0
        out, _ = actor.communicate(timeout=60)
        assert actor.returncode == 0, out[-2000:]
        assert "lost the learner" in out and "actor-0: done" in out  # the same actor throughout, told the run ended
    finally:
        learner.kill()
        actor.kill()
    steps, ends = stored_episodes(run_dir)
    for key, length in done_before_second_kill.items():
        assert key in steps, f"episode {key} completed before a kill is missing"
        assert steps[key] == list(range(length + 1)) and ends[key] == length, f"episode {key}: {steps[key]}"
    for key, got in steps.items():  # nothing stored twice, no gaps, whatever the episode
        assert got == list(range(got[0], got[0] + len(got))), f"episode {key} has duplicates or gaps: {got}"
    end = read_metrics(run_dir / "metrics.jsonl")[-1]
    assert end["kind"] == "end" and end["reason"] == "done"


def test_resuming_a_folder_with_no_checkpoint_and_no_stored_replay_is_refused(tmp_path):
    cfg = toy_config(tmp_path)
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    save_config(cfg, run_dir / "config.yaml")
    with pytest.raises(CheckpointError, match="nothing to resume"):
        Learner(load_config([f"resume={run_dir}", *toy_config_ports(tmp_path)]), run_dir, progress=False)
