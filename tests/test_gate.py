"""RL-100's gate: fitted Q evaluation finds a planted policy's known return from another policy's episodes; the gate
accepts a better candidate and refuses a worse one (or one better by less than the margin); every call is one JSON
line; in sim the call is checked against both policies' real success; bad settings are refused in one line."""

import json

import numpy as np
import pytest
import torch

from policies.acting import ActingPolicy
from robo_rl.config import ConfigError
from robo_rl.data.datasets import Episode
from robo_rl.offline.fqe import fitted_q_evaluation
from robo_rl.offline.gate import gate, gate_config

H, GAMMA = 4, 0.9
FAST = {"fqe_steps": 400, "fqe_hidden": [64, 64], "fqe_lr": 3e-3, "fqe_tau": 0.1, "gamma": GAMMA}


def synthetic_episodes(n=150, seed=0):
    """H steps, state [t/H, c] with c ~ U(-1, 1) fixed per episode, one action, reward 1 − |a − c| at each step, the
    last step terminates; the behaviour acts uniformly at random (every action is covered)."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n):
        c = rng.uniform(-1, 1)
        actions = np.concatenate([[0.0], rng.uniform(-1, 1, H)]).astype(np.float32)[:, None]
        reward = np.concatenate([[0.0], 1 - np.abs(actions[1:, 0] - c)]).astype(np.float32)
        records = {
            "step": np.arange(H + 1, dtype=np.int32),
            "state": np.stack([np.arange(H + 1) / H, np.full(H + 1, c)], axis=1).astype(np.float32),
            "action_executed": actions,
            "reward": reward,
            "terminated": np.arange(H + 1) == H,
            "episode_id": np.full(H + 1, len(episodes), np.int64),
            "task": np.zeros(H + 1, np.int32),
        }
        episodes.append(Episode(records))
    return episodes


class OffsetPolicy(ActingPolicy):
    """a = clip(c + offset): its true return is known. With `execute_steps` > 1 it acts in open-loop chunks."""

    def __init__(self, offset: float, execute_steps: int = 1) -> None:
        self.offset, self.execute_steps, self.queue = offset, execute_steps, []

    def reset(self, slot=None) -> None:
        self.queue = []

    def act(self, obs, deterministic=False):
        if not self.queue:
            self.queue = [(obs["state"][:, 1:2] + self.offset).clamp(-1, 1)] * self.execute_steps
        return self.queue.pop(0)


def true_return(policy: OffsetPolicy, episodes) -> float:
    c = np.array([ep.records["state"][0, 1] for ep in episodes])
    per_step = 1 - np.abs(np.clip(c + policy.offset, -1, 1) - c)
    return float(np.mean(per_step * sum(GAMMA**t for t in range(H))))


def test_fqe_finds_the_known_return_of_a_policy_that_did_not_collect_the_data():
    episodes = synthetic_episodes()
    cfg = gate_config(FAST)
    for policy in (OffsetPolicy(0.0), OffsetPolicy(0.6), OffsetPolicy(0.1, execute_steps=2)):
        fit = fitted_q_evaluation(policy, episodes, policy.execute_steps, cfg)
        truth = true_return(policy, episodes)
        assert abs(fit["estimate"] - truth) < 0.3, (
            f"offset {policy.offset}: FQE {fit['estimate']:.2f}, true {truth:.2f}"
        )
    assert fit["decisions"] == 150 * H // 2  # chunks of 2: two decisions per episode
    random_return = (1 - 2 / 3) * sum(GAMMA**t for t in range(H))  # a, c ~ U(-1, 1): E|a - c| = 2/3
    assert abs(fit["behaviour_return"] - random_return) < 0.1


def test_the_gate_accepts_a_better_candidate_refuses_a_worse_one_and_logs_each_call(tmp_path):
    episodes, log = synthetic_episodes(), tmp_path / "run" / "gate.jsonl"
    cfg = gate_config({**FAST, "margin": 0.3})
    good, bad, slightly = OffsetPolicy(0.0, execute_steps=2), OffsetPolicy(0.7), OffsetPolicy(0.65)
    assert 0 < true_return(slightly, episodes) - true_return(bad, episodes) < 0.15  # better, by less than the margin
    up = gate(bad, good, episodes, cfg, log, names=("bad.pt", "good.pt"))
    down = gate(good, bad, episodes, cfg, log)
    close = gate(bad, slightly, episodes, cfg, log)
    assert up["accepted"] and not down["accepted"] and not close["accepted"]
    assert up["gain"] > 0.3 > close["gain"] > 0 > down["gain"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [x["decision"] for x in lines] == ["accept", "reject", "reject"]
    first = lines[0]
    assert (first["current"], first["candidate"], first["margin"], first["estimator"]) == (
        "bad.pt",
        "good.pt",
        0.3,
        "fqe",
    )
    assert first["candidate_estimate"] - first["current_estimate"] == pytest.approx(first["gain"])
    assert first["held_out_episodes"] == 150 and first["fqe"]["candidate"]["execute_steps"] == 2
    assert "real" not in first  # no env given: no check against real success


def test_only_the_held_out_share_is_used_and_bad_settings_are_refused_in_one_line():
    episodes = synthetic_episodes(n=20)
    line = gate(OffsetPolicy(0.0), OffsetPolicy(0.5), episodes, gate_config({**FAST, "fqe_steps": 5, "held_out": 0.25}))
    assert line["held_out_episodes"] == 5 and line["fqe"]["current"]["decisions"] == 5 * H
    with pytest.raises(ConfigError, match="gate.margin=-1"):
        gate_config({"margin": -1})
    with pytest.raises(ConfigError, match="gate.held_out=0"):
        gate_config({"held_out": 0})
    with pytest.raises(ConfigError, match="unknown"):
        gate_config({"marginn": 0.1})
    with pytest.raises(ValueError, match="no episode with a transition"):
        gate(
            OffsetPolicy(0.0),
            OffsetPolicy(0.5),
            [Episode({k: v[:1] for k, v in episodes[0].records.items()})],
            line and gate_config(FAST),
        )
    with pytest.raises(ValueError, match="the policy acts in 2 dimensions, the data's actions have 1"):

        class TwoDims(OffsetPolicy):
            def act(self, obs, deterministic=False):
                return torch.zeros(1, 2)

        fitted_q_evaluation(TwoDims(0.0), episodes, 1, gate_config(FAST))


class Toward(ActingPolicy):
    """PointReach: a step towards the goal (scale 1) or away from it (scale -1)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def act(self, obs, deterministic=False):
        s = obs["state"]
        return (self.scale * (s[:, 2:] - s[:, :2]) / 0.2).clamp(-1, 1)


def test_in_sim_the_gates_call_is_checked_against_both_policies_real_success(tmp_path):
    from robo_rl.data.datasets import split_episodes
    from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
    from sim.point_reach import PointReachEnv, PointReachExpert

    env = PointReachEnv(max_episode_steps=10)
    behaviour, rec, records = PointReachExpert(env, noise_std=1.0, seed=0), EpisodeRecorder(2), []
    for ep in range(120):
        obs, _ = env.reset(seed=ep)
        records.append(rec.reset(obs, ep))
        done = False
        while not done:
            action = behaviour.act(obs)
            obs, r, term, trunc, info = env.step(action)
            records.append(rec.record_step(obs, r, term, trunc, info))
            done = term or trunc
    episodes = split_episodes(stack_records(records, fields_for_env(env)))
    cfg = gate_config({**FAST, "eval_episodes": 10})
    line = gate(Toward(-1.0), Toward(1.0), episodes, cfg, tmp_path / "gate.jsonl", env=env)
    real = line["real"]
    assert real["candidate"]["success_rate"] > 0.8 > 0.2 > real["current"]["success_rate"]
    assert line["accepted"] and real["candidate_better"] and real["agreed"]
    assert len(real["candidate"]["success_ci95"]) == 2 and real["candidate"]["episodes"] == 10
    logged = json.loads((tmp_path / "gate.jsonl").read_text())
    assert logged["real"]["agreed"] is True


def bc_checkpoint(path, shift: float):
    """A `robo-rl bc` MLP whose action is tanh(c + shift) on the synthetic task (no hidden layer: planted weights)."""
    from policies.bc import BCPolicy
    from robo_rl.offline.bc import save_atomic

    policy = BCPolicy(2, 1, chunk_size=1, hidden=[])
    with torch.no_grad():
        linear = policy.head[-1]
        linear.weight.copy_(torch.tensor([[0.0, 1.0]]))
        linear.bias.fill_(shift)
    return save_atomic(policy.checkpoint(), path)


def test_robo_rl_gate_decides_on_two_bc_checkpoints_and_a_dataset_with_its_exit_status(tmp_path, capsys):
    from robo_rl.cli import main
    from robo_rl.data.datasets import join_episodes
    from robo_rl.data.datasets.io import save_step_batch

    data = tmp_path / "data.npz"
    save_step_batch(data, join_episodes(synthetic_episodes(n=100)))
    good, bad = bc_checkpoint(tmp_path / "good" / "policy.pt", 0.0), bc_checkpoint(tmp_path / "bad" / "policy.pt", 1.5)
    fast = [f"{k}={json.dumps(v)}" for k, v in FAST.items()]
    assert main(["gate", str(bad), str(good), f"data={data}", "margin=0.5", *fast]) == 0
    assert "accept" in capsys.readouterr().out
    assert main(["gate", str(good), str(bad), f"data={data}", "margin=0.5", *fast]) == 1
    lines = [json.loads(x) for x in (tmp_path / "gate.jsonl").read_text().splitlines()]
    assert [x["decision"] for x in lines] == ["accept", "reject"] and lines[0]["candidate"] == str(good)
    assert main(["gate", str(bad), str(good), f"data={data}", "margin=-1"]) == 2
    assert "gate.margin=-1 is not allowed" in capsys.readouterr().err
    assert main(["gate", str(bad), str(good)]) == 2
    assert "gate needs two checkpoints and data=" in capsys.readouterr().err
