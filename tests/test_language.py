"""Language in the data contract: an observation's instruction becomes a code in the run's task table, travels with
its step batch, is mapped into the learner's table (kept across a restart), is refused when malformed, is each
episode's `task` in a LeRobot export, and reaches a LeRobot base that reads language."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from policies.base import ChunkedBase
from policies.lerobot_base import LeRobotBase
from policies.residual import observation_row
from robo_rl.data.datasets import join_episodes, split_episodes
from robo_rl.data.learner_replay import LearnerReplay
from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records
from robo_rl.data.tasks import INSTRUCTIONS, MAX_INSTRUCTION, NO_TASK, TaskTable, pack_instructions
from robo_rl.envs import check_observation
from robo_rl.eval.per_task import per_instruction
from robo_rl.policy_io import stack_obs
from robo_rl.transport.codec import decode, encode
from robo_rl.transport.messages import DATA_KINDS
from sim.point_reach import PointReachEnv

PICK_RED, PICK_BLUE = "pick the red cube", "pick the blue cube"


class TwoInstructionReach(PointReachEnv):
    """PointReach whose instruction alternates between two per episode (a multi-task env in miniature)."""

    INSTRUCTIONS = (PICK_RED, PICK_BLUE)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.instruction: str | None = None
        self.episodes = 0

    def _reset(self, rng, options):
        self.instruction = self.INSTRUCTIONS[self.episodes % 2]
        self.episodes += 1
        return super()._reset(rng, options)

    def _obs(self) -> dict:
        return {**super()._obs(), "instruction": self.instruction}


def record_episodes(env, tasks: TaskTable, episodes: int, first_id: int = 0, steps: int = 3) -> list[dict]:
    """Records of `episodes` short episodes, as the actor records them (one table shared by its recorders)."""
    recorder, records = EpisodeRecorder(env.action_space.shape[0], tasks=tasks), []
    for e in range(episodes):
        obs, _ = env.reset(seed=e)
        check_observation(obs, env.observation_space)  # the contract check takes the extra key
        records.append(recorder.reset(obs, first_id + e))
        for t in range(steps):
            obs, reward, term, trunc, info = env.step(np.zeros(2, np.float32))
            records.append(recorder.record_step(obs, reward, term or t == steps - 1, trunc, info))
    return records


def over_the_wire(batch: dict) -> dict:
    """A step batch encoded and decoded as a `steps` message on the data channel (meta checked)."""
    meta = {"actor": "actor-0", "session": 1, "seq": 1, "token": "t"}
    _, _, arrays = decode([bytes(f) for f in encode("steps", meta, batch)], DATA_KINDS)
    return dict(arrays)


def replay_config(**overrides):
    return OmegaConf.create(
        {
            "storage": "ram",
            "capacity": 1000,
            "persist": True,
            "flush_every_s": 0.0,
            "segment_max_mb": 1,
            "online_fraction": 0.5,
            "interventions_in_prior": True,
            "verify_on_load": True,
            **overrides,
        }
    )


def stored_instructions(replay: LearnerReplay) -> list[str | None]:
    """Each stored episode's instruction, read through the replay's table, in episode-id order."""
    online = replay.online
    ids, codes = online.data["episode_id"][: online.size], online.data["task"][: online.size]
    per_episode = {}
    for e, c in zip(ids.tolist(), codes.tolist(), strict=True):
        assert per_episode.setdefault(e, c) == c, "one instruction per episode"
    return [replay.tasks.name(per_episode[e]) for e in sorted(per_episode)]


def test_instructions_reach_the_replay_as_codes_of_one_run_table_and_survive_a_restart(tmp_path):
    env = TwoInstructionReach(max_episode_steps=20)
    fields = fields_for_env(env)
    replay = LearnerReplay(replay_config(), fields, tmp_path, None)
    # two actors: each its own table, the second meeting the instructions in the other order
    first, second = TaskTable(), TaskTable([PICK_BLUE])
    for actor, table, first_id in (("actor-0", first, 0), ("actor-1", second, 100)):
        batch = stack_records(record_episodes(env, table, 4, first_id), fields)
        wire = over_the_wire(pack_instructions(batch, table.names))
        assert INSTRUCTIONS in wire and set(np.unique(wire["task"]).tolist()) == {1, 2}
        replay.add(actor, wire)
    replay.flush()
    assert replay.tasks.names == [PICK_RED, PICK_BLUE]  # in the order the run met them
    expected = [PICK_RED, PICK_BLUE] * 4  # episodes 0-3 of actor-0, then 100-103 of actor-1 (its codes the other way)
    assert stored_instructions(replay) == expected
    rows = {k: np.array(v[: replay.online.size]) for k, v in replay.online.data.items()}
    state = replay.state()
    replay.close()

    resumed = LearnerReplay(replay_config(), fields, tmp_path, None)  # a restarted learner
    resumed.restore(state)
    assert resumed.tasks.names == [PICK_RED, PICK_BLUE]
    assert stored_instructions(resumed) == expected
    for name, column in rows.items():
        np.testing.assert_array_equal(resumed.online.data[name][: resumed.online.size], column, err_msg=name)
    resumed.close()


def test_an_env_without_instructions_records_no_task_and_sends_no_instructions():
    env = PointReachEnv(max_episode_steps=20)
    batch = stack_records(record_episodes(env, TaskTable(), 2), fields_for_env(env))
    assert (batch["task"] == NO_TASK).all() and INSTRUCTIONS not in pack_instructions(batch, [])


def malformed(batch: dict, kind: str) -> dict:
    """A packed batch with its instructions broken one way."""
    bad = dict(batch)
    if kind == "too long":
        bad[INSTRUCTIONS] = np.frombuffer(("x" * (MAX_INSTRUCTION + 1)).encode(), np.uint8)
    elif kind == "not text":
        bad[INSTRUCTIONS] = np.frombuffer(b"\xff\xfe pick", np.uint8)
    elif kind == "not bytes":
        bad[INSTRUCTIONS] = np.ones(4, np.float32)
    elif kind == "control characters":
        bad[INSTRUCTIONS] = np.frombuffer(b"pick\x07", np.uint8)
    elif kind == "index past the list":
        bad["task"] = np.full_like(batch["task"], 3)
    elif kind == "no instructions":
        del bad[INSTRUCTIONS]
    elif kind == "task of another dtype":
        bad["task"] = batch["task"].astype(np.int64)
    return bad


@pytest.mark.parametrize(
    "kind",
    [
        "too long",
        "not text",
        "not bytes",
        "control characters",
        "index past the list",
        "no instructions",
        "task of another dtype",
    ],
)
def test_a_malformed_instruction_is_refused_whole_and_the_table_untouched(tmp_path, kind):
    env = TwoInstructionReach(max_episode_steps=20)
    fields, table = fields_for_env(env), TaskTable()
    replay = LearnerReplay(replay_config(persist=False), fields, tmp_path, None)
    good = pack_instructions(stack_records(record_episodes(env, table, 2), fields), table.names)
    with pytest.raises(ValueError, match="instruction|task"):
        replay.add("actor-0", over_the_wire(malformed(good, kind)))
    assert replay.online.size == 0 and replay.tasks.names == []
    replay.add("actor-0", over_the_wire(good))  # the next good batch is stored as ever
    assert replay.online.size == len(good["step"]) and replay.tasks.names == [PICK_RED, PICK_BLUE]


def test_episodes_keep_their_instruction_through_a_store_and_a_self_describing_batch(tmp_path):
    from robo_rl.data.datasets.io import load_episodes, save_store, summarize

    env, table = TwoInstructionReach(max_episode_steps=20), TaskTable()
    batch = pack_instructions(stack_records(record_episodes(env, table, 3), fields_for_env(env)), table.names)
    episodes = split_episodes(batch, partition="demos")
    assert [e.instruction for e in episodes] == [PICK_RED, PICK_BLUE, PICK_RED]
    assert [e.instruction for e in split_episodes(join_episodes(episodes))] == [PICK_RED, PICK_BLUE, PICK_RED]
    save_store(episodes, tmp_path / "store", progress=False)
    stored = load_episodes(tmp_path / "store", progress=False)
    assert [e.instruction for e in stored] == [PICK_RED, PICK_BLUE, PICK_RED]
    assert summarize(stored)["demos"]["instructions"] == {PICK_RED: 2, PICK_BLUE: 1}  # robo-rl data inspect's


@pytest.mark.slow
def test_the_lerobot_export_gives_each_episode_its_instruction_as_its_task(tmp_path):
    """From the env's own records, read back by lerobot's own LeRobotDataset: tasks.parquet one row per instruction,
    each frame its episode's. Fast cover (hand-made episodes with instructions, lerobot imported once for the file):
    tests/test_datasets_lerobot.py::test_export_reads_back_through_lerobot and ::test_round_trip_keeps_every_field."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_rl.data.datasets.lerobot_v3 import export_lerobot, import_lerobot

    env, table = TwoInstructionReach(max_episode_steps=20), TaskTable()
    episodes = split_episodes(
        pack_instructions(stack_records(record_episodes(env, table, 3), fields_for_env(env)), table.names)
    )
    root = export_lerobot(episodes, tmp_path / "ds", fps=10, progress=False)
    ds = LeRobotDataset("local/ds", root=root)
    assert sorted(ds.meta.tasks.index) == sorted([PICK_RED, PICK_BLUE])
    frame_tasks = [ds[i]["task"] for i in range(len(ds))]
    assert frame_tasks == [PICK_RED] * 3 + [PICK_BLUE] * 3 + [PICK_RED] * 3
    assert [e.instruction for e in import_lerobot(root, progress=False)] == [PICK_RED, PICK_BLUE, PICK_RED]


class TaskReadingPolicy:
    """A stand-in for a lerobot policy that tokenises the task: it acts and nothing else (the code under test is
    LeRobotBase's; importing a real VLA costs ~16 s here)."""

    config = SimpleNamespace(observation_delta_indices=None, n_action_steps=2, type="act")

    def predict_action_chunk(self, batch):
        return torch.zeros(1, 2, 2)

    def reset(self):
        pass


def test_a_lerobot_base_reads_the_env_instruction_else_its_configured_task():
    seen = []

    def preprocessor(batch):
        seen.append(list(batch["task"]))
        return batch

    base = LeRobotBase(TaskReadingPolicy(), preprocessor, lambda a: a, {"observation.state": "state"}, 2, "configured")
    env = TwoInstructionReach(max_episode_steps=20)
    first, _ = env.reset(seed=0)
    ChunkedBase(base).act(first)  # one env, as eval and a chunked base run it
    second, _ = env.reset(seed=1)
    rows = stack_obs([first, second])  # several envs, as the actor batches them
    assert base.batch_of(rows)["task"] == [PICK_RED, PICK_BLUE]
    base.predict_chunk(observation_row(rows, 1))  # a row of a batch, as DSRL and residual hand it to the base
    plain, _ = PointReachEnv(max_episode_steps=20).reset(seed=0)
    base.predict_chunk(plain)
    assert seen == [[PICK_RED], [PICK_BLUE], ["configured"]]
    assert "instruction" not in stack_obs([plain])  # a batch of envs without instructions carries no key


def test_eval_results_are_given_per_instruction_where_a_run_has_several():
    results = [
        {"instruction": PICK_RED, "success": True, "return": 1.0},
        {"instruction": PICK_RED, "success": False, "return": 0.0},
        {"instruction": PICK_BLUE, "success": True, "return": 2.0},
    ]
    summary = per_instruction(results)
    assert summary[PICK_RED]["episodes"] == 2 and summary[PICK_RED]["success_rate"] == 0.5
    assert summary[PICK_BLUE]["successes"] == 1 and summary[PICK_BLUE]["mean_return"] == 2.0
    assert 0.0 < summary[PICK_RED]["success_ci95"][0] < 0.5 < summary[PICK_RED]["success_ci95"][1] < 1.0
    assert per_instruction(results[:2]) is None  # one instruction: the overall figures are the task's


def test_an_actor_and_a_learner_carry_each_episode_instruction_into_the_replay_and_the_metrics(tmp_path):
    """The real loops, in one process, over ZeroMQ on loopback (about 4 s here)."""
    from robo_rl.runs import read_metrics
    from tests.test_pipeline import SMALL_NETS, run_pair, toy_config

    cfg = toy_config(
        tmp_path,
        "env._target_=tests.test_language.TwoInstructionReach",
        "demos.num_episodes=0",
        "train.total_env_steps=200",
        "train.utd=0.1",
        *SMALL_NETS,
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and not learner.link.bad_messages
    assert sorted(learner.replay.tasks.names) == sorted([PICK_RED, PICK_BLUE])
    stored = stored_instructions(learner.replay)
    assert len(stored) >= 4 and all(a != b for a, b in zip(stored, stored[1:], strict=False)), "they alternate"
    ended = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["kind"] == "episode"]
    assert ended and {m["instruction"] for m in ended} == {PICK_RED, PICK_BLUE}
    assert (tmp_path / "run" / "replay" / "online" / "tasks.json").is_file()


def test_demonstrations_keep_their_instructions_in_the_cache_and_in_the_learner_replay(tmp_path):
    from robo_rl.data.demos import load_or_make_demos
    from tests.test_pipeline import toy_config

    cfg = toy_config(tmp_path, "env._target_=tests.test_language.TwoInstructionReach", "demos.num_episodes=4")
    made, path, cached = load_or_make_demos(cfg, progress=False)
    again, _, from_cache = load_or_make_demos(cfg, progress=False)
    assert not cached and from_cache and path.is_file()
    for demos in (made, again):
        assert [e.instruction for e in split_episodes(demos)] == [PICK_RED, PICK_BLUE] * 2
    fields = fields_for_env(TwoInstructionReach())
    replay = LearnerReplay(replay_config(), fields, tmp_path / "run", again)  # as the learner hands it its demos
    assert replay.tasks.names == [PICK_RED, PICK_BLUE]
    assert (tmp_path / "run" / "replay" / "online" / "tasks.json").is_file()
    demo_rows = {k: v[: replay.demos.size] for k, v in replay.demos.data.items()}
    first_codes = demo_rows["task"][demo_rows["step"] == 0].tolist()  # one per episode
    assert [replay.tasks.name(c) for c in first_codes] == [PICK_RED, PICK_BLUE] * 2
    replay.close()
