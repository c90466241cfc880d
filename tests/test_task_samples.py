"""The learner's samples carry the task: each sampled observation (replay and rollout) names its row's instruction,
mapped from the record's code through the run's table (also after a restart, the table read back), and a base the
learner recomputes (residual's b' and its demonstrations, DSRL's aliased chunks and its demonstrations' noises)
receives each row's instruction."""

from __future__ import annotations

import numpy as np
import torch

from policies.dsrl import NoisePolicy
from policies.flow import ChunkGenerator, GenerativeBase
from policies.residual import ResidualPolicy
from robo_rl.algos.dsrl import build_dsrl
from robo_rl.algos.residual import build_residual
from robo_rl.data.learner_replay import LearnerReplay
from robo_rl.data.rollout import Rollout
from robo_rl.data.schema import fields_for_env, stack_records
from robo_rl.data.tasks import TaskTable, pack_instructions, with_row_instructions
from robo_rl.policy_io import batch_to_torch
from sim.point_reach import PointReachEnv
from tests.test_language import (
    PICK_BLUE,
    PICK_RED,
    TwoInstructionReach,
    over_the_wire,
    record_episodes,
    replay_config,
)

SIGN = {PICK_RED: 1.0, PICK_BLUE: -1.0}  # what the language-reading bases below do with each instruction


def two_actors_batches(env, fields, extra: dict | None = None, ones=()) -> tuple[list[tuple[str, dict]], dict]:
    """Two actors' step batches as they arrive (each its own table, the second meeting the instructions in the other
    order, so its codes differ from the run's), and each record's instruction keyed by its state's bytes. `extra`:
    policy extras, zero, except those named in `ones`."""
    out, truth = [], {}
    for actor, table, first_id in (("actor-0", TaskTable(), 0), ("actor-1", TaskTable([PICK_BLUE]), 100)):
        records = record_episodes(env, table, 6, first_id)
        for r in records:
            truth[np.asarray(r["state"], np.float32).tobytes()] = table.name(int(r["task"]))
        batch = stack_records(records, {k: v for k, v in fields.items() if not k.startswith("extra/")})
        batch.update({k: np.zeros((len(batch["step"]), *shape), dtype) for k, (shape, dtype) in (extra or {}).items()})
        for name in ones:
            batch[name][:] = 1
        out.append((actor, over_the_wire(pack_instructions(batch, table.names))))
    return out, truth


def assert_rows_named(obs: dict, truth: dict) -> None:
    texts = obs["instruction"]
    assert isinstance(texts, list) and len(texts) == len(obs["state"])
    expected = [truth[np.asarray(s, np.float32).tobytes()] for s in np.asarray(obs["state"])]
    assert texts == expected
    assert set(texts) == {PICK_RED, PICK_BLUE}


def test_sampled_rows_carry_their_records_instructions_also_after_a_restart(tmp_path):
    env = TwoInstructionReach(max_episode_steps=20)
    fields = fields_for_env(env)
    replay = LearnerReplay(replay_config(), fields, tmp_path, None)
    batches, truth = two_actors_batches(env, fields)
    for actor, batch in batches:
        replay.add(actor, batch)
    sample = batch_to_torch(replay.sample(64, np.random.default_rng(0), 0.99, n_step=2))  # a list stays a list
    for key in ("obs", "next_obs"):
        assert_rows_named(sample[key], truth)
    replay.flush()
    state = replay.state()
    replay.close()

    resumed = LearnerReplay(replay_config(), fields, tmp_path, None)  # the table read back from tasks.json
    resumed.restore(state)
    again = resumed.sample(64, np.random.default_rng(1), 0.99)
    for key in ("obs", "next_obs"):
        assert_rows_named(again[key], truth)
    resumed.close()


def test_a_run_without_instructions_samples_observations_as_before(tmp_path):
    env = PointReachEnv(max_episode_steps=20)
    fields = fields_for_env(env)
    replay = LearnerReplay(replay_config(persist=False), fields, tmp_path, None)
    replay.add("actor-0", stack_records(record_episodes(env, TaskTable(), 3), fields))
    sample = replay.sample(8, np.random.default_rng(0), 0.99)
    assert set(sample["obs"]) == {"state", "images"} and set(sample["next_obs"]) == {"state", "images"}


def test_demonstrations_and_online_rows_sampled_together_both_name_theirs(tmp_path):
    env = TwoInstructionReach(max_episode_steps=20)
    fields = fields_for_env(env)
    table = TaskTable([PICK_BLUE, PICK_RED])
    demo_records = record_episodes(env, table, 4, 500)
    truth = {np.asarray(r["state"], np.float32).tobytes(): table.name(int(r["task"])) for r in demo_records}
    demos = with_row_instructions(pack_instructions(stack_records(demo_records, fields), table.names))
    replay = LearnerReplay(replay_config(persist=False), fields, tmp_path, demos)  # as the learner hands them
    batches, online_truth = two_actors_batches(env, fields)
    replay.add(*batches[0])
    sample = replay.sample(64, np.random.default_rng(0), 0.99)  # half online, half demonstrations
    assert_rows_named(sample["obs"], {**truth, **online_truth})


def test_the_rollout_names_each_decisions_instruction():
    env = TwoInstructionReach(max_episode_steps=20)
    fields = fields_for_env(env)
    replay = LearnerReplay(replay_config(persist=False), fields, None, None)
    roll = Rollout(gamma=0.9, env_steps=1, instructions=replay.tasks.names)
    decision = {"extra/decision": ((1,), np.float32)}
    batches, truth = two_actors_batches(env, fields, decision, ones=("extra/decision", "policy_version"))
    for actor, batch in batches:
        replay.add(actor, batch)  # the codes mapped into the run's table in place, as the learner's ingest does
        roll.add(actor, batch)
    taken = roll.take(())
    for key in ("obs", "next_obs"):
        assert_rows_named(taken[key], truth)


class InstructionBase:
    """A frozen language-reading base: +1 on every action under PICK_RED, −1 under PICK_BLUE (a KeyError without)."""

    action_dim, chunk_size = 2, 1

    def reset(self):
        pass

    def predict_chunk(self, obs):
        return np.full((1, 2), SIGN[obs["instruction"]], np.float32)


def test_a_residual_base_recomputed_on_replayed_rows_and_on_demonstrations_reads_each_rows_instruction(tmp_path):
    env = TwoInstructionReach(max_episode_steps=20)
    space = env.observation_space
    policy = ResidualPolicy(space, 2, InstructionBase(), scale=0.3, hidden=[8], exploration_std=0.0)
    algo = build_residual(policy, space, 2, batch_size=32, precision="float32")
    fields = fields_for_env(env, policy)
    replay = LearnerReplay(replay_config(persist=False), fields, tmp_path, None)
    batches, truth = two_actors_batches(env, fields, {"extra/base_action": ((2,), np.float32)})
    for actor, batch in batches:
        replay.add(actor, batch)
    batch = batch_to_torch(replay.sample(64, np.random.default_rng(0), 0.99, extras=("base_action",)))
    missing = ~batch["next_extras_valid"]
    assert missing.any()  # after an episode's last step: b' was not recorded
    # where the episode was cut by its time limit (the target bootstraps: discount > 0) the learner's copy of the
    # base predicts b', reading the row's instruction; where it ended (discount 0) nothing reads b': not predicted
    cut = {**batch, "discount": torch.full_like(batch["discount"], 0.99)}
    b_next = algo.next_base(cut)[:, 0]
    wanted = torch.tensor([SIGN[t] for t in batch["next_obs"]["instruction"]])
    assert torch.equal(b_next[missing], wanted[missing])
    ended = {**batch, "discount": torch.zeros_like(batch["discount"])}
    assert torch.equal(algo.next_base(ended)[missing], batch["extras"]["base_action"][missing])

    table = TaskTable([PICK_RED, PICK_BLUE])
    records = record_episodes(env, table, 4)
    demos = with_row_instructions(pack_instructions(stack_records(records, fields_for_env(env)), table.names))
    base = algo.relabel_prior(demos)["extra/base_action"][:, 0]
    for i in range(1, len(records)):  # record i's action was decided at obs_{i-1}, of the same episode
        if records[i]["step"] > 0:
            assert base[i] == SIGN[table.name(int(records[i - 1]["task"]))]


class RecordingGenerator(ChunkGenerator):
    """A flow model that notes the instructions of each batch of observations it is run on."""

    def features(self, obs):
        self.seen.append(list(obs.get("instruction") or [None] * len(obs["state"])))
        return super().features(obs)


def test_dsrl_runs_its_base_on_each_rows_instruction(tmp_path):
    env = TwoInstructionReach(max_episode_steps=20)
    space = env.observation_space
    torch.manual_seed(0)
    model = RecordingGenerator(4, 2, chunk_size=1, kind="flow", steps=2, hidden=[8])
    model.seen = []
    policy = NoisePolicy(space, 2, GenerativeBase(model), hidden=[8], execute_steps=1)
    algo = build_dsrl(policy, space, 2, batch_size=16, form="aliased", alias_samples=2, precision="float32")
    learner_model = algo.base_model  # the learner's copy, run in batches
    learner_model.seen = []
    fields = fields_for_env(env, policy)
    replay = LearnerReplay(replay_config(persist=False), fields, tmp_path, None)
    extras = {k: v for k, v in fields.items() if k.startswith("extra/")}
    batches, truth = two_actors_batches(env, fields, extras, ones=("extra/decision",))
    for actor, batch in batches:
        replay.add(actor, batch)
    spec = algo.batch_spec
    batch = batch_to_torch(
        replay.sample(16, np.random.default_rng(0), spec.gamma, spec.n_step, spec.chunk, spec.extras)
    )
    algo.update([batch])
    next_rows, obs_rows = batch["next_obs"]["instruction"], batch["obs"]["instruction"]
    assert learner_model.seen[0] == next_rows  # the TD target's a' = π_base(s', w')
    assert [r for r in obs_rows for _ in range(2)] in learner_model.seen  # the noise critic's targets, repeated

    table = TaskTable([PICK_RED, PICK_BLUE])
    records = record_episodes(env, table, 2)
    demos = with_row_instructions(pack_instructions(stack_records(records, fields_for_env(env)), table.names))
    model.seen = []
    algo.relabel_prior(demos)  # the base run backwards from the demonstrated actions, at each decision's obs
    decided = [table.name(int(records[i - 1]["task"])) for i in range(1, len(records)) if records[i]["step"] > 0]
    assert model.seen == [decided]


def test_minibatches_and_the_chain_critics_store_keep_each_rows_instruction():
    from policies.base import obs_rows
    from robo_rl.algos.chain_critic import concat, take

    obs = {"state": torch.arange(4.0).view(4, 1), "images": {}, "instruction": [PICK_RED, PICK_BLUE, None, PICK_BLUE]}
    assert obs_rows(obs, torch.tensor([3, 0]))["instruction"] == [PICK_BLUE, PICK_RED]  # a PPO minibatch
    assert obs_rows(obs, slice(1, 3))["instruction"] == [PICK_BLUE, None]
    assert obs_rows(obs, 1)["instruction"] == PICK_BLUE and "instruction" not in obs_rows(obs, 2)  # one row
    stored = concat({"obs": obs}, {"obs": obs})  # ReinFlow's critic keeps several iterations' decisions
    picked = take(stored, torch.tensor([5, 0]))["obs"]
    assert picked["instruction"] == [PICK_BLUE, PICK_RED] and picked["state"][:, 0].tolist() == [1.0, 0.0]
