"""PickCubeEnv and its scripted expert: the task is solvable, not trivial, reproducible, and keeps the env contract."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must be set before mujoco is first imported

import numpy as np
import pytest

from robo_rl.envs import check_observation
from sim.experts import PickCubeExpert
from sim.pick_cube import PickCubeEnv


def run_episode(env, policy, seed):
    """Roll out one episode; return the list of (obs, reward, terminated, truncated, info) steps."""
    obs, _ = env.reset(seed=seed)
    steps = []
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        steps.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            return steps


def expert_success_rate(env, episodes, noise_std=0.0):
    expert = PickCubeExpert(env, noise_std=noise_std, seed=0)

    def policy(obs):
        return expert.act(obs)

    wins = 0
    for seed in range(episodes):
        expert.reset()
        wins += run_episode(env, policy, seed)[-1][4]["success"]
    return wins / episodes


# Seeds are fixed, so a rate is exact on its seeds (both experts: 100 of 100 here); on 20 seeds a drop to 80% success
# still fails the plain test (19 of 20 needed) with probability 0.93 and the noisy one (18 of 20) with 0.79.
EPISODES = [20, pytest.param(100, marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def lift_env():
    env = PickCubeEnv(reward_type="dense")  # the staged reward's checks below; the expert's success is either reward's
    yield env
    env.close()


@pytest.mark.parametrize("episodes", EPISODES)
def test_expert_lifts_the_cube(lift_env, episodes):
    assert expert_success_rate(lift_env, episodes) >= 0.95


@pytest.mark.parametrize("episodes", EPISODES)
def test_noisy_expert_still_lifts_the_cube(lift_env, episodes):
    assert expert_success_rate(lift_env, episodes, noise_std=0.1) >= 0.9


def test_expert_success_ends_the_episode_early_with_zero_dense_reward(lift_env):
    expert = PickCubeExpert(lift_env)
    steps = run_episode(lift_env, expert.act, seed=3)
    obs, reward, terminated, truncated, info = steps[-1]
    assert terminated and not truncated and info["success"] and info["ended_by"] == "env"
    assert len(steps) < lift_env.max_episode_steps // 2
    assert reward == 0.0  # progress reaches exactly 1 at success
    rewards = [s[1] for s in steps]
    assert all(-1.0 <= r <= 0.0 for r in rewards)
    assert rewards[-1] > rewards[0]
    lift = obs["state"][lift_env.state_names.index("cube_lift")]
    assert lift >= 1.0  # the cube really is lift_height_m above its resting height


def test_sparse_reward_pays_only_on_success():
    env = PickCubeEnv(reward_type="sparse")
    expert = PickCubeExpert(env)
    rewards = [s[1] for s in run_episode(env, expert.act, seed=1)]
    assert rewards[-1] == 1.0 and set(rewards[:-1]) == {0.0}


def test_reach_expert_reaches():
    env = PickCubeEnv(task="reach")
    assert env.max_episode_steps == 30
    assert expert_success_rate(env, 20) == 1.0


@pytest.mark.parametrize("episodes", [5, pytest.param(20, marks=pytest.mark.slow)])
def test_random_policy_almost_never_lifts(lift_env, episodes):
    rng = np.random.default_rng(0)
    wins = sum(
        run_episode(lift_env, lambda _: rng.uniform(-1, 1, 4).astype(np.float32), seed)[-1][4]["success"]
        for seed in range(episodes)
    )
    assert wins <= episodes // 20  # at most one in 20 (none in the fast tier's 5)


def test_pressing_a_closed_gripper_on_the_cube_is_not_a_grasp(lift_env):
    """No reward exploit: closing the gripper and pushing down onto the cube earns no grasp bonus."""
    rel = [lift_env.state_names.index(f"cube_rel_{a}") for a in "xyz"]
    for seed in range(5):
        obs, _ = lift_env.reset(seed=seed)
        for _ in range(20):
            toward_cube = obs["state"][rel] * 0.1 / lift_env.max_ee_step_m
            obs, reward, _, _, _ = lift_env.step(np.append(np.clip(toward_cube, -1, 1), 1.0).astype(np.float32))
            assert reward < -0.75  # below the grasped stage: progress never passes the reach stage


def test_same_seed_and_actions_reproduce_the_episode_bit_for_bit():
    a, b = PickCubeEnv(), PickCubeEnv()
    actions = np.random.default_rng(1).uniform(-1, 1, (40, 4)).astype(np.float32)
    b.reset(seed=99)
    for action in actions[:10]:  # history in `b` must not leak into the next episode
        b.step(action)
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=7)
    assert np.array_equal(obs_a["state"], obs_b["state"])
    for action in actions:
        out_a, out_b = a.step(action), b.step(action)
        assert np.array_equal(out_a[0]["state"], out_b[0]["state"])
        assert out_a[1:4] == out_b[1:4]
        assert out_a[4]["success"] == out_b[4]["success"] and out_a[4]["ended_by"] == out_b[4]["ended_by"]


def test_different_seeds_place_the_cube_differently(lift_env):
    cube = [lift_env.state_names.index(n) for n in ("cube_x", "cube_y", "cube_yaw_sin4")]
    poses = {tuple(lift_env.reset(seed=s)[0]["state"][cube]) for s in range(5)}
    assert len(poses) == 5


def test_reset_options_place_the_cube(lift_env):
    obs, _ = lift_env.reset(seed=0, options={"cube_xy": (0.45, 0.05), "cube_yaw": 0.0})
    state = dict(zip(lift_env.state_names, obs["state"], strict=True))
    lo, hi = lift_env.workspace_low_m, lift_env.workspace_high_m
    x, y = lo[:2] + (np.array([state["cube_x"], state["cube_y"]]) + 1) / 2 * (hi[:2] - lo[:2])
    assert abs(x - 0.45) < 1e-3 and abs(y - 0.05) < 1e-3
    assert abs(state["cube_yaw_sin4"]) < 1e-3 and state["cube_yaw_cos4"] > 0.999


def test_observation_contract(lift_env):
    assert lift_env.action_space.shape == (4,) and lift_env.action_space.dtype == np.float32
    assert lift_env.control_hz == 10.0 and lift_env.task_description
    for seed in range(3):
        obs, _ = lift_env.reset(seed=seed)
        check_observation(obs, lift_env.observation_space)
        assert obs["state"].dtype == np.float32 and obs["state"].shape == (len(lift_env.state_names),)
        assert obs["images"] == {}
        assert np.all(np.abs(obs["state"]) < 3.0)  # features are scaled to roughly unit range
        obs, *_ = lift_env.step(lift_env.action_space.sample())
        check_observation(obs, lift_env.observation_space)


@pytest.mark.parametrize(
    "action", [[np.nan, 0, 0, 0], [0, 0, 1.5, 0], [0, 0, 0], [[0, 0, 0, 0]]], ids=["nan", "out_of_range", "short", "2d"]
)
def test_bad_action_raises(lift_env, action):
    lift_env.reset(seed=0)
    with pytest.raises(ValueError):
        lift_env.step(np.array(action, dtype=np.float32))


def test_bad_constructor_arguments_raise():
    with pytest.raises(ValueError, match="task"):
        PickCubeEnv(task="stack")
    with pytest.raises(ValueError, match="reward_type"):
        PickCubeEnv(reward_type="shaped")
    with pytest.raises(ValueError, match="camera"):
        PickCubeEnv(cameras=["top"])


def test_time_limit_truncates():
    env = PickCubeEnv(max_episode_steps=5)
    env.reset(seed=0)
    hold_still = np.zeros(4, np.float32)
    for _ in range(4):
        _, _, terminated, truncated, info = env.step(hold_still)
        assert not terminated and not truncated and info["ended_by"] is None
    _, _, terminated, truncated, info = env.step(hold_still)
    assert truncated and not terminated and info["ended_by"] == "time_limit" and not info["success"]


def test_workspace_box_keeps_the_gripper_off_the_table(lift_env):
    lift_env.reset(seed=0)
    down = np.array([0, 0, -1, -1], np.float32)
    for _ in range(10):
        obs, *_ = lift_env.step(down)
    ee_z = obs["state"][lift_env.state_names.index("ee_z")]
    assert -1.05 < ee_z < -0.9  # pinned at the bottom of the workspace box, not below it


def test_camera_renders_the_scene():
    env = PickCubeEnv(cameras=["front"], image_size=64)
    try:
        obs, _ = env.reset(seed=0)
        check_observation(obs, env.observation_space)
        image = obs["images"]["front"]
        assert image.dtype == np.uint8 and image.shape == (64, 64, 3)
        assert image.std() > 10  # not a blank frame
    finally:
        env.close()


def test_a_discrete_gripper_keeps_its_last_command_between_the_thresholds():
    env = PickCubeEnv(gripper="discrete")
    env.reset(seed=0)
    opening = list(env.state_names).index("gripper_pos")

    def hold(value, steps=6):
        for _ in range(steps):
            obs, *_ = env.step(np.array([0, 0, 0, value], np.float32))
        return obs["state"][opening]

    assert hold(0.0) < -0.9  # 'stay' from the start: still open
    assert hold(1.0) > 0.3  # close
    closed = hold(0.3)  # 'stay': keeps closing / closed, never opens
    assert closed > 0.3
    assert hold(-1.0) < -0.5  # open
    with pytest.raises(ValueError, match="gripper must be"):
        PickCubeEnv(gripper="sticky")


def test_a_proprio_only_state_hides_the_cube_and_the_expert_still_lifts_it():
    env = PickCubeEnv(state="proprio")
    assert env.observation_space["state"].shape == (7,) and "cube_x" not in env.state_names
    expert = PickCubeExpert(env)
    obs, _ = env.reset(seed=3)
    assert obs["state"].shape == (7,)
    for _ in range(env.max_episode_steps):
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        if terminated or truncated:
            break
    assert info["success"]


@pytest.mark.parametrize("above_m", [0.01, 0.028])  # the expert's grasp; one near the cube's top edge
def test_a_cube_lifted_in_the_pads_is_a_success_even_held_near_its_top(above_m):
    """A trained policy often closes the pads high on the cube, or lifts so fast the cube slides along them, and the
    cube then hangs 2-3 cm off their midpoint. Lifted clear of the table between both pads it is held all the same:
    not counting it left episodes carrying the cube to the top of the box and dropping it from there, out of the
    reset's reach (a two-hour run's reset calls). On the table the same off-centre touch is no grasp."""
    env = PickCubeEnv(terminate_on_success=False)
    env.reset(seed=2)  # a cube square to the fingers (turned ones slip out of a grasp this high)
    cube = env.data.xpos[env._cube_body].copy()
    env._move_to([*cube[:2], cube[2] + 0.06], -1.0)
    env._move_to([*cube[:2], cube[2] + above_m], -1.0)
    env._hold(1.0, 4)
    assert env._is_grasped() == (above_m < 0.02)  # resting on the table: grasped only centred between the pads
    for _ in range(8):  # up at half the largest step: the cube slides ~2 cm along the pads on the way
        *_, info = env.step(np.array([0.0, 0.0, 0.5, 1.0], np.float32))
    assert env.data.xpos[env._cube_body][2] - env._cube_half_m > 0.1, "the cube should have come up with the fingers"
    assert info["success"] and env._is_grasped()


def test_a_step_in_which_the_simulation_blows_up_ends_the_episode_by_name(monkeypatch, tmp_path):
    """MuJoCo resets its whole state when the physics blows up: the step that sees it ends the episode (the scene is
    now MuJoCo's zero state, not where the episode went), says so, and the next episode runs as any other."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warning to MUJOCO_LOG.TXT in the working directory
    env = PickCubeEnv()
    env.reset(seed=2)
    still = np.zeros(4, np.float32)
    for _ in range(3):
        assert not env.step(still)[2]
    env.data.qfrc_applied[:] = 1e300  # a force no physics survives, for this step
    obs, reward, terminated, truncated, info = env.step(still)
    assert terminated and not info["success"] and info["ended_by"] == "sim_fault" and reward == 0.0
    assert "the simulation blew up (bad accelerations) and MuJoCo reset its state" in info["fault"]
    env.data.qfrc_applied[:] = 0.0
    env.reset(seed=3)
    for _ in range(5):  # a fresh episode: nothing left over from the last one's blow-up
        _, _, terminated, _, info = env.step(still)
        assert not terminated and "fault" not in info and info["ended_by"] is None
