"""Meta-World behind `RobotEnv` (sim/metaworld_tasks.py): the contract with the instruction, success from Meta-World's
own check, seeding and randomised goals, the group that samples a task per episode, the refusal of an unknown task,
and Meta-World's scripted experts solving the tasks used here."""

import importlib.util
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must be set before mujoco is first imported

import numpy as np
import pytest

# found, not imported: every worker imports each test module to collect it, and `import metaworld` takes ~0.6 s
if importlib.util.find_spec("metaworld") is None:
    pytest.skip("Meta-World is an optional extra: uv sync --extra metaworld", allow_module_level=True)

from robo_rl.config import ConfigError, load_config, make_env, make_expert  # noqa: E402
from robo_rl.envs import INFO_KEYS, check_observation  # noqa: E402
from robo_rl.errors import UserError  # noqa: E402
from sim.metaworld_experts import MetaWorldExpert  # noqa: E402
from sim.metaworld_tasks import MetaWorldEnv, resolve_tasks  # noqa: E402


def lerobots_descriptions() -> dict[str, str]:
    """The instructions as lerobot ships them, read here on their own (not through the env's reader)."""
    root = Path(next(iter(importlib.util.find_spec("lerobot").submodule_search_locations)))
    return json.loads((root / "envs" / "metaworld_config.json").read_text())["TASK_DESCRIPTIONS"]


@pytest.fixture(scope="module")
def reach():
    env = MetaWorldEnv("reach-v3")
    yield env
    env.close()


def run_expert(env, seed: int, expert=None, task: str | None = None) -> list[tuple]:
    """One episode of the scripted expert: (obs, reward, terminated, truncated, info) per step."""
    expert = expert or MetaWorldExpert(env)
    obs, _ = env.reset(seed=seed, options={"task": task} if task else None)
    expert.reset()
    steps = []
    while not steps or not (steps[-1][2] or steps[-1][3]):
        steps.append(env.step(expert.act(obs)))
        obs = steps[-1][0]
    return steps


def test_the_observation_holds_the_39d_state_with_the_goal_the_camera_and_the_tasks_instruction():
    reach = MetaWorldEnv("reach-v3", cameras=("corner2",), image_size=32)
    try:
        check_contract(reach)
    finally:
        reach.close()


def check_contract(reach):
    assert reach.action_space.shape == (4,) and (reach.action_space.low == -1).all() and reach.action_space.high[0] == 1
    assert reach.observation_space["state"].shape == (39,) == (len(reach.state_names),)
    assert reach.observation_space["images"]["corner2"].shape == (32, 32, 3)
    obs, info = reach.reset(seed=0)
    check_observation(obs, reach.observation_space)
    instruction = lerobots_descriptions()["reach-v3"]
    assert obs["instruction"] == reach.instruction == instruction and type(obs["instruction"]) is str
    assert info["task"] == reach.task_name == "reach-v3"
    goal = reach._envs["reach-v3"]._target_pos  # Meta-World's own goal for this episode
    np.testing.assert_allclose(obs["state"][-3:], goal, atol=1e-6)
    first = obs["images"]["corner2"]
    for _ in range(8):
        obs, reward, terminated, truncated, info = reach.step(np.array([1.0, -1.0, 1.0, 1.0], np.float32))
    check_observation(obs, reach.observation_space)
    assert set(INFO_KEYS) <= set(info) and obs["instruction"] == instruction
    assert np.abs(obs["images"]["corner2"].astype(int) - first).sum() > 0, "the camera sees the arm move"


def test_the_same_seed_replays_the_episode_and_other_seeds_draw_other_goals(reach):
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)

    def episode(seed):
        states = [reach.reset(seed=seed)[0]["state"]]
        return states + [reach.step(a)[0]["state"] for a in actions]

    np.testing.assert_array_equal(np.stack(episode(3)), np.stack(episode(3)))
    goals = {tuple(np.round(reach.reset(seed=s)[0]["state"][-3:], 5)) for s in range(5)}
    assert len(goals) == 5, "each seed draws its own goal"


def test_success_is_meta_worlds_own_and_ends_the_episode_with_the_sparse_reward(reach):
    steps = run_expert(reach, seed=1)
    *before, last = steps
    assert last[4]["success"] and last[2] and last[1] == 1.0 and last[4]["ended_by"] == "env"
    assert not any(s[4]["success"] for s in before) and all(s[1] == 0.0 for s in before)
    hand_to_goal = np.linalg.norm(reach.benchmark_observation[:3] - reach.benchmark_observation[-3:])
    assert hand_to_goal < 0.05, "Meta-World's reach succeeds within 5 cm of the goal"
    reach.reset(seed=1)
    for _ in range(20):  # holding still is no success
        _, reward, terminated, _, info = reach.step(np.zeros(4, np.float32))
    assert not info["success"] and not terminated and reward == 0.0


def test_a_hidden_goal_is_zeros_in_the_state_and_the_expert_still_reads_it_from_meta_world():
    env = MetaWorldEnv("button-press-v3", goal_observable=False, max_episode_steps=150)
    try:
        assert [run_expert(env, seed)[-1][4]["success"] for seed in range(2)] == [True, True]
        assert (env.reset(seed=0)[0]["state"][-3:] == 0).all() and (env.benchmark_observation[-3:] != 0).any()
        env.reset(seed=0)
        for _ in range(3):
            *_, truncated, info = env.step(np.zeros(4, np.float32))
        assert env._elapsed_steps == 3 and not truncated
    finally:
        env.close()


def test_a_group_samples_a_task_per_episode_by_seed_and_the_instruction_follows_it():
    descriptions = lerobots_descriptions()
    assert len(resolve_tasks("mt10")) == 10 and len(resolve_tasks("mt50")) == 50
    groups = [resolve_tasks(g) for g in ("easy", "medium", "hard", "very_hard")]
    assert sorted(t for g in groups for t in g) == sorted(resolve_tasks("mt50")), "the difficulty groups cover MT50"
    assert resolve_tasks("reach,push-v3") == ("reach-v3", "push-v3")
    cfg = load_config(["env=metaworld", "env.task=mt10", "env.max_episode_steps=300"])
    env = make_env(cfg)
    try:
        drawn = []
        for seed in range(6):
            obs, info = env.reset(seed=seed)
            drawn.append(info["task"])
            assert obs["instruction"] == env.instruction == descriptions[info["task"]]
        assert len(set(drawn)) >= 3 and set(drawn) <= set(resolve_tasks("mt10"))
        assert env.reset(seed=4)[1]["task"] == drawn[4], "the seed picks the task"
        expert = make_expert(cfg, env)  # the expert follows the episode's task
        steps = run_expert(env, 0, expert, task="drawer-open-v3")
        assert steps[-1][4]["success"] and steps[-1][0]["instruction"] == descriptions["drawer-open-v3"]
    finally:
        env.close()


def test_an_unknown_task_is_refused_with_the_closest_names():
    with pytest.raises(UserError, match=r"unknown Meta-World task 'pick-plce'; did you mean 'pick-place-v3'") as e:
        MetaWorldEnv("pick-plce")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"did you mean 'mt10'"):
        make_env(load_config(["env=metaworld", "env.task=mt1O"]))
    with pytest.raises(UserError, match=r"unknown cameras \['front'\]; Meta-World's are \[.*'corner2'"):
        MetaWorldEnv("reach-v3", cameras=("front",))
