"""PickColorEnv and its expert: the instruction names the cube, only that cube's lift succeeds, the places do not tell
which cube is named (a colour-blind expert succeeds about half the time, the expert reading the instruction always)."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must be set before mujoco is first imported

import numpy as np
import pytest

from robo_rl.envs import check_observation
from robo_rl.errors import UserError
from sim.pick_color import COLOURS, PickColorEnv
from sim.pick_color_expert import PickColorExpert, named_colour
from sim.pick_cube import PickCubeEnv

SEEDS = range(12)  # the target drawn per episode: 4 red and 8 blue here


@pytest.fixture(scope="module")
def env():
    return PickColorEnv()


def run_episode(env, expert, seed, options=None):
    """Roll out one episode; return its observations and (reward, terminated, truncated, info) steps."""
    obs, _ = env.reset(seed=seed, options=options)
    expert.reset()
    observations, steps = [obs], []
    while True:
        obs, reward, terminated, truncated, info = env.step(expert.act(obs))
        observations.append(obs)
        steps.append((reward, terminated, truncated, info))
        if terminated or truncated:
            return observations, steps


@pytest.fixture(scope="module")
def outcomes(env):
    """Per seed of SEEDS: the named colour, and whether the expert and the colour-blind one lifted the named cube."""
    # a colour-blind wrong lift holds the other cube to the time limit; 15 steps are enough for a right one (<= 11)
    blind_env = PickColorEnv(max_episode_steps=15)
    found = {"colour": [], "expert": [], "colour_blind": []}
    for seed in SEEDS:
        _, steps = run_episode(env, PickColorExpert(env), seed)
        found["expert"].append(steps[-1][3]["success"])
        found["colour"].append(env.colour)
        _, steps = run_episode(blind_env, PickColorExpert(blind_env, colour_blind=True), seed)
        found["colour_blind"].append(steps[-1][3]["success"])
    return found


def test_the_observation_carries_the_episodes_instruction_and_keeps_the_contract(env):
    seen = set()
    for seed in range(4):  # 0 blue, 1 red
        observations, _ = run_episode(env, PickColorExpert(env), seed)
        assert env.instruction == f"pick up the {env.colour} cube" and env.instruction in env.instructions
        for obs in observations:  # reset's and every step's
            check_observation(obs, env.observation_space)
            assert type(obs["instruction"]) is str and obs["instruction"] == env.instruction
            assert obs["state"].shape == (25,) and obs["images"] == {}
        seen.add(env.instruction)
    assert seen == {"pick up the red cube", "pick up the blue cube"}, "either draws both colours"
    spec = PickColorEnv.spec_from_config()
    assert spec.state_dim == 25 and spec.state_names == env.state_names and spec.instructions == env.instructions
    assert env.state_names[7:10] == ("red_x", "red_y", "red_z") and env.state_names[16:19] == (
        "blue_x",
        "blue_y",
        "blue_z",
    )


def test_a_fixed_target_names_its_colour_before_the_first_reset():
    env = PickColorEnv(target="blue")
    assert env.instruction == env.task_description == "pick up the blue cube" and env.instructions == (env.instruction,)
    obs, _ = env.reset(seed=0)
    assert obs["instruction"] == "pick up the blue cube" and env.colour == "blue"


def test_a_seed_reproduces_the_episode_and_the_state_at_reset_does_not_tell_the_target(env):
    first, _ = env.reset(seed=7)
    colour = env.colour
    again, _ = env.reset(seed=7)
    assert env.colour == colour and np.array_equal(first["state"], again["state"])
    other, _ = env.reset(seed=8)
    assert not np.array_equal(first["state"][7:], other["state"][7:]), "another seed places the cubes elsewhere"
    red, _ = env.reset(seed=7, options={"target": "red"})
    blue, _ = env.reset(seed=7, options={"target": "blue"})
    assert np.array_equal(red["state"], blue["state"]), "a seed places each colour's cube alike whichever is named"
    assert red["instruction"] != blue["instruction"]
    red_xy = np.array([0.45, 0.07])
    env.reset(seed=7, options={"red_xy": red_xy, "blue_xy": [0.55, -0.07]})
    assert np.allclose(env.data.xpos[env._cube_ids["red"][0]][:2], red_xy)


def test_each_cubes_state_block_is_pick_cubes_state_of_that_cube(env):
    for colour, block in (("red", slice(7, 16)), ("blue", slice(16, 25))):
        obs, _ = env.reset(seed=3, options={"target": colour})
        obs, *_ = env.step(np.array([0.5, -0.3, -0.2, 0.0], np.float32))
        one_cube = PickCubeEnv._observation(env)["state"]  # pick_cube's own state, of the named cube
        assert np.allclose(obs["state"][block], one_cube[7:16], atol=1e-6) and np.array_equal(
            obs["state"][:7], one_cube[:7]
        )


def test_the_expert_lifts_the_named_cube_of_either_colour(outcomes):
    assert set(outcomes["colour"]) == set(COLOURS)
    assert all(outcomes["expert"]), "the expert reading the instruction lifts the named cube on every seed"


def test_a_colour_blind_expert_succeeds_about_half_the_time(outcomes):
    """The state holds both cubes, placed alike whichever is named: without the instruction a policy guesses."""
    wins = sum(outcomes["colour_blind"])
    assert 0.25 * len(SEEDS) <= wins <= 0.75 * len(SEEDS), wins
    for colour in COLOURS:  # it wins and loses on each colour: the places do not tell
        won = [w for c, w in zip(outcomes["colour"], outcomes["colour_blind"], strict=True) if c == colour]
        assert 0 < sum(won) < len(won), colour


@pytest.mark.parametrize("reward_type", ["sparse", "dense"])
def test_lifting_the_other_cube_is_not_success_and_pays_no_more_than_reaching(reward_type):
    env = PickColorEnv(target="red", reward_type=reward_type, max_episode_steps=15)
    expert = PickColorExpert(env)
    obs, _ = env.reset(seed=1)
    lifted_other = False
    for _ in range(15):  # the expert told the other colour lifts the blue cube
        obs, reward, terminated, truncated, info = env.step(expert.act({**obs, "instruction": "pick up the blue cube"}))
        lifted_other |= info["other_lifted"]
        assert not info["success"] and not terminated and not info["grasped"]
        assert reward == 0.0 if reward_type == "sparse" else -1.0 <= reward <= 0.25 - 1.0
    assert lifted_other and obs["state"][24] >= 1.0 and truncated, "the blue cube is up, the episode ran to its limit"


def test_a_proprio_state_hides_the_cubes_and_the_expert_reads_the_env(env):
    proprio = PickColorEnv(state="proprio")
    assert PickColorEnv.spec_from_config(state="proprio").state_dim == 7
    _, steps = run_episode(proprio, PickColorExpert(proprio), seed=2)
    obs, _ = proprio.reset(seed=2)
    assert obs["state"].shape == (7,) and steps[-1][3]["success"]


def test_the_front_camera_shows_a_red_and_a_blue_cube():
    env = PickColorEnv(cameras=("front",))
    obs, _ = env.reset(seed=0)
    image = obs["images"]["front"].astype(int)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    assert obs["images"]["front"].dtype == np.uint8 and image.shape == (128, 128, 3)
    assert PickColorEnv.spec_from_config(cameras=("front",)).cameras == {"front": (128, 128)}
    assert ((r > b + 60) & (r > g + 60)).sum() > 20 and ((b > r + 60) & (b > g + 40)).sum() > 20


@pytest.mark.parametrize(
    ("kwargs", "refusal"),
    [
        ({"target": "green"}, "target must be one of red | blue | either, got 'green'"),
        ({"randomize": {"light_scale": [0.5, 1.0]}}, "pick_color has no domain randomisation"),
        ({"cube_xy_range_m": (0.05, 0.05)}, "leaves too little room for two cubes 0.1 m apart"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, refusal):
    with pytest.raises(UserError, match=refusal):
        PickColorEnv(**kwargs)


def test_a_bad_reset_target_or_an_instruction_without_one_colour_is_refused(env):
    with pytest.raises(UserError, match="reset option target must be red or blue, got 'green'"):
        env.reset(seed=0, options={"target": "green"})
    with pytest.raises(UserError, match="names no single colour"):
        named_colour("pick up the red or the blue cube")
    assert named_colour("pick up the blue cube") == "blue"


@pytest.mark.slow
def test_the_experts_success_on_50_seeds_per_colour():
    """Fast cover: test_the_expert_lifts_the_named_cube_of_either_colour and the colour-blind test (12 seeds).
    bench/pick_color_experts.py measures the same with intervals."""
    env = PickColorEnv()  # the task's own 50-step limit
    rates = {}
    for colour_blind in (False, True):
        expert = PickColorExpert(env, colour_blind=colour_blind)
        for colour in COLOURS:
            wins = [run_episode(env, expert, s, {"target": colour})[1][-1][3]["success"] for s in range(50)]
            rates[colour_blind, colour] = np.mean(wins)
    assert rates[False, "red"] == rates[False, "blue"] == 1.0, rates
    assert 0.3 <= (rates[True, "red"] + rates[True, "blue"]) / 2 <= 0.7, rates
