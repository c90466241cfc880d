"""robosuite Lift / PickPlaceCan and gym-hil's pick-cube behind `RobotEnv`: the contract holds, resets are
reproducible by seed, and the scripted experts really solve the tasks (success from the simulator)."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must be set before mujoco is first imported

import warnings

import numpy as np
import pytest

pytest.importorskip("robosuite")
pytest.importorskip("gym_hil")

from robo_rl.config import load_config, make_env, make_expert  # noqa: E402
from robo_rl.data.demos import rollout_episode  # noqa: E402
from robo_rl.data.schema import check_step_batch, fields_for_env, stack_records  # noqa: E402
from robo_rl.envs import INFO_KEYS, check_observation  # noqa: E402
from sim.gym_hil_task import GymHilPickCubeEnv, GymHilPickCubeExpert  # noqa: E402
from sim.robosuite_experts import LiftExpert, PickPlaceCanExpert  # noqa: E402
from sim.robosuite_tasks import OBJECT_KEYS, RobosuiteEnv  # noqa: E402


@pytest.fixture(scope="module")
def lift():
    env = RobosuiteEnv("Lift")
    yield env
    env.close()


@pytest.fixture(scope="module")
def can():
    env = RobosuiteEnv("PickPlaceCan")
    yield env
    env.close()


@pytest.fixture(scope="module")
def hil():
    env = GymHilPickCubeEnv()
    yield env
    env.close()


@pytest.fixture
def envs(lift, can, hil):
    return {"lift": lift, "can": can, "hil": hil}


EXPERTS = {"lift": LiftExpert, "can": PickPlaceCanExpert, "hil": GymHilPickCubeExpert}
SLOW = pytest.mark.slow  # robosuite steps at about 20/s here: more seeds of a property run with -m slow


def run_expert(env, expert, seed):
    """One expert episode; returns the list of (obs, reward, terminated, truncated, info)."""
    expert.reset()
    obs, _ = env.reset(seed=seed)
    steps = []
    while True:
        obs, reward, terminated, truncated, info = env.step(expert.act(obs))
        steps.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            return steps


@pytest.mark.parametrize("name", ["lift", "can", "hil"])
def test_spaces_observations_and_info_keys(envs, name):
    env = envs[name]
    assert env.action_space.dtype == np.float32 and env.action_space.shape == ((4,) if name == "hil" else (7,))
    assert env.observation_space["state"].shape == (len(env.state_names),) and env.camera_names == ()
    assert env.task_description and env.control_hz == (10.0 if name == "hil" else 20.0)
    obs, info = env.reset(seed=0)
    check_observation(obs, env.observation_space)
    assert obs["images"] == {} and info["success"] is False
    env.action_space.seed(0)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        check_observation(obs, env.observation_space)
        assert set(INFO_KEYS) <= set(info) and np.isfinite(reward) and np.all(np.isfinite(obs["state"]))
        assert info["ended_by"] is None and not terminated and not truncated


@pytest.mark.parametrize("task", ["Lift", "PickPlaceCan"])
def test_state_is_robosuites_observation_in_the_documented_order(lift, can, task):
    env = lift if task == "Lift" else can
    env.reset(seed=1)
    obs, *_ = env.step(np.zeros(7, np.float32))
    raw = env._raw  # the robosuite observation dict of this step
    expected = np.concatenate(
        [raw["robot0_eef_pos"], raw["robot0_eef_quat"], raw["robot0_gripper_qpos"], raw["object-state"]]
    ).astype(np.float32)
    np.testing.assert_array_equal(obs["state"], expected)
    obj = {n: obs["state"][i] for i, n in enumerate(env.state_names)}
    pos_key = OBJECT_KEYS[task][0 if task == "Lift" else 2][0]
    np.testing.assert_allclose([obj[f"{pos_key}_{a}"] for a in "xyz"], env.task_state()["object_pos"], atol=1e-6)


@pytest.mark.parametrize("name", ["lift", "can", "hil"])
def test_same_seed_same_start_other_seed_other_start(envs, name):
    env = envs[name]
    first, _ = env.reset(seed=7)
    for _ in range(5):  # history must not leak into the next episode
        env.step(env.action_space.sample())
    env.reset(seed=3)
    again, _ = env.reset(seed=7)
    np.testing.assert_array_equal(first["state"], again["state"])
    key = "block_pos" if name == "hil" else "object_pos"
    starts = set()
    for seed in range(4):
        env.reset(seed=seed)
        starts.add(tuple(np.round(env.task_state()[key][:2], 6)))
    assert len(starts) == 4  # the object is placed differently for every seed


def test_reset_leaves_numpys_global_generator_alone(lift, hil):
    np.random.seed(123)
    expected = np.random.rand(3)
    np.random.seed(123)
    lift.reset(seed=5)
    hil.reset(seed=5)
    np.testing.assert_array_equal(np.random.rand(3), expected)


def test_a_fresh_env_reproduces_an_episode_bit_for_bit(lift):
    other = RobosuiteEnv("Lift")
    try:
        actions = np.random.default_rng(1).uniform(-1, 1, (15, 7)).astype(np.float32)
        a, _ = lift.reset(seed=11)
        b, _ = other.reset(seed=11)
        np.testing.assert_array_equal(a["state"], b["state"])
        for action in actions:
            out_a, out_b = lift.step(action), other.step(action)
            np.testing.assert_array_equal(out_a[0]["state"], out_b[0]["state"])
            assert out_a[1:4] == out_b[1:4]
    finally:
        other.close()


@pytest.mark.parametrize("name", ["lift", "hil"])
@pytest.mark.parametrize("bad", ["nan", "out_of_range", "short"])
def test_bad_actions_are_refused(envs, name, bad):
    env = envs[name]
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)
    if bad == "nan":
        action[0] = np.nan
    elif bad == "out_of_range":
        action[2] = 1.5
    else:
        action = action[:-1]
    with pytest.raises(ValueError):
        env.step(action)


def test_bad_constructor_arguments_raise():
    for kwargs, match in [
        ({"task": "Stack"}, "task"),
        ({"observation": "rgb"}, "observation"),
        ({"reward_type": "shaped"}, "reward_type"),
        ({"observation": "image", "cameras": ["top"]}, "camera"),
    ]:
        with pytest.raises(ValueError, match=match):
            RobosuiteEnv(**kwargs)
    with pytest.raises(ValueError, match="state key"):
        RobosuiteEnv("Lift", state_keys=["robot0_eef_pos", "nope"])


def test_expert_refuses_the_wrong_task(lift):
    with pytest.raises(ValueError, match="PickPlaceCan"):
        PickPlaceCanExpert(lift)


def test_time_limit_truncates_robosuite(lift):
    limit = lift.max_episode_steps
    lift.max_episode_steps = 4  # the horizon is ours (robosuite runs with ignore_done): no second env to build
    try:
        lift.reset(seed=0)
        for _ in range(3):
            _, _, terminated, truncated, info = lift.step(np.zeros(7, np.float32))
            assert not terminated and not truncated and info["ended_by"] is None
        _, _, terminated, truncated, info = lift.step(np.zeros(7, np.float32))
        assert truncated and not terminated and info["ended_by"] == "time_limit" and not info["success"]
    finally:
        lift.max_episode_steps = limit


@pytest.mark.parametrize(
    ("noise_std", "seeds"), [(0.1, 1), pytest.param(0.0, 4, marks=SLOW), pytest.param(0.1, 4, marks=SLOW)]
)
def test_lift_expert_lifts_the_cube(lift, noise_std, seeds):
    expert = LiftExpert(lift, noise_std=noise_std, seed=0)
    for seed in range(seeds):
        steps = run_expert(lift, expert, seed)
        obs, reward, terminated, truncated, info = steps[-1]
        assert info["success"] and terminated and not truncated and info["ended_by"] == "env"
        s = lift.task_state()
        assert s["object_pos"][2] > s["table_z"] + 0.04  # robosuite's own success height, checked again here
        assert len(steps) < 60 and reward == 1.0  # robosuite's normalised reward is 1 on success


def test_lift_pays_only_on_success_by_default(lift):
    assert lift.reward_type == "sparse"
    rewards = [s[1] for s in run_expert(lift, LiftExpert(lift), seed=2)]
    assert rewards[-1] == 1.0 and set(rewards[:-1]) == {0.0}


def test_dense_shaping_that_ends_on_success_is_warned_about():
    """Shaping pays for holding the cube; ending the episode at success then pays less than hovering."""
    with pytest.warns(UserWarning, match="dense reward shaping with terminate_on_success"):
        RobosuiteEnv("Lift", reward_type="dense").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RobosuiteEnv("Lift", reward_type="dense", terminate_on_success=False).close()


def discounted(rewards, gamma):
    return float(sum(gamma**t * r for t, r in enumerate(rewards)))


def test_potential_shaping_keeps_the_sparse_return_and_pays_each_step():
    """reward_type=potential: every episode's discounted return is its sparse return minus scale·Φ(s0) (so success
    ranks policies as before), while the steps between pay for coming closer and taking hold of the cube."""
    gamma, scale = 0.999, 0.8
    env = RobosuiteEnv("Lift", reward_type="potential", shaping_gamma=gamma, shaping_scale=scale)
    try:
        env.reset(seed=3)
        phi0 = env.progress()
        assert 0.0 < phi0 < 0.2  # the gripper starts well away from the cube
        rewards = [s[1] for s in run_expert(env, LiftExpert(env), seed=3)]
        sparse = gamma ** (len(rewards) - 1)  # the success reward, discounted to the start
        assert discounted(rewards, gamma) == pytest.approx(sparse - scale * phi0, abs=1e-9)
        assert sum(r > 0 for r in rewards[:-1]) > len(rewards) // 2  # the approach pays, step by step
        assert max(rewards[:-1]) > 0.15 * scale  # taking hold of the cube: grasping is a quarter of Φ's 1.25
        env.shaping_scale, env.max_episode_steps = 1.0, 6  # the same env, cut short: no second one to build
        env.reset(seed=3)
        phi0 = env.progress()
        expert = LiftExpert(env)
        steps = run_expert(env, expert, seed=3)  # cut by the time limit before success: the sparse return is 0
        assert steps[-1][3] and not steps[-1][4]["success"]
        assert discounted([s[1] for s in steps], gamma) == pytest.approx(-phi0, abs=1e-9)  # scale 1
    finally:
        env.close()


def test_potential_shaping_from_the_config_uses_the_learners_discount():
    # 15 steps: the expert's approach raises Φ from the first step (14 of 15 rewards positive), far from success
    cfg = load_config(["env=robosuite_can", "env.reward_type=potential", "algo.gamma=0.98", "env.max_episode_steps=15"])
    env = make_env(cfg)
    try:
        assert env.shaping_gamma == 0.98 and env.shaping_scale == 1.0
        expert = make_expert(cfg, env)  # robosuite_can's config builds its expert too (the hydra test's can case)
        assert isinstance(env, RobosuiteEnv) and isinstance(expert, PickPlaceCanExpert)
        env.reset(seed=0)
        phi0 = env.progress()
        steps = run_expert(env, expert, seed=0)
        assert discounted([s[1] for s in steps], 0.98) == pytest.approx(-phi0, abs=1e-9)
        assert max(s[1] for s in steps) > 0  # the can's expert reaches towards the can: Φ rises
    finally:
        env.close()
    for kwargs, match in [({"shaping_scale": 1.5}, "shaping_scale"), ({"shaping_gamma": 0.0}, "shaping_gamma")]:
        with pytest.raises(ValueError, match=match):
            RobosuiteEnv("Lift", reward_type="potential", **kwargs)


@pytest.mark.parametrize("seeds", [1, pytest.param(2, marks=SLOW)])
def test_random_actions_do_not_lift_the_cube(lift, seeds):
    rng = np.random.default_rng(0)
    for seed in range(seeds):
        lift.reset(seed=seed)
        for _ in range(40):
            *_, info = lift.step(rng.uniform(-1, 1, 7).astype(np.float32))
            assert not info["success"]


@pytest.mark.parametrize("seeds", [1, pytest.param(2, marks=SLOW)])
def test_can_expert_puts_the_can_in_its_compartment(can, seeds):
    expert = PickPlaceCanExpert(can, noise_std=0.1, seed=0)
    for seed in range(seeds):
        steps = run_expert(can, expert, seed)
        _, _, terminated, truncated, info = steps[-1]
        assert info["success"] and terminated and not truncated and info["ended_by"] == "env"
        s = can.task_state()
        assert np.all(np.abs(s["object_pos"][:2] - s["target_pos"][:2]) < [0.0975, 0.1225])  # inside its quarter
        assert s["object_pos"][2] < s["table_z"] + 0.1  # resting in the bin, not held above it


@pytest.mark.parametrize("seeds", [1, pytest.param(3, marks=SLOW)])
def test_gym_hil_expert_lifts_and_success_is_gym_hils(hil, seeds):
    expert = GymHilPickCubeExpert(hil, noise_std=0.1, seed=0)
    for seed in range(seeds):
        steps = run_expert(hil, expert, seed)
        _, reward, terminated, truncated, info = steps[-1]
        assert info["success"] and terminated and not truncated and info["ended_by"] == "env"
        assert reward == 1.0 and all(s[1] == 0.0 for s in steps[:-1])  # gym-hil's sparse reward
        assert hil._env._is_success()


def test_gym_hil_discrete_gripper_opens_closes_and_stays():
    env = GymHilPickCubeEnv(gripper="discrete")
    env.reset(seed=0)
    cmd = env.state_names.index("gripper_cmd")

    def hold(value, steps=3):
        for _ in range(steps):
            obs, *_ = env.step(np.array([0, 0, 0, value], np.float32))
        return obs["state"][cmd]

    try:
        assert hold(0.3) == pytest.approx(-1.0)  # 'stay' from the start: still open
        assert hold(0.9) == pytest.approx(1.0)  # close: the full command, not 0.9's
        assert hold(-0.4) == pytest.approx(1.0)  # 'stay' keeps it closed
        assert hold(-0.6) == pytest.approx(-1.0)  # open
    finally:
        env.close()
    with pytest.raises(ValueError, match="gripper must be"):
        GymHilPickCubeEnv(gripper="sticky")


def test_gym_hil_can_go_on_past_a_success(hil):
    expert = GymHilPickCubeExpert(hil, noise_std=0.0, seed=0)
    hil.terminate_on_success = False
    try:
        records, success = rollout_episode(hil, expert.act, seed=1, episode_id=0, hold_success=5)
    finally:
        hil.terminate_on_success = True
    flags = [r["success"] for r in records]
    first = flags.index(True)
    assert success and flags[first:] == [True] * 6 and not any(flags[:first])  # held 5 steps past its first
    assert records[-1]["terminated"] and not any(r["terminated"] for r in records[:-1])


def test_gym_hil_time_limit_is_a_truncation(hil):
    limit = hil.max_episode_steps
    hil.max_episode_steps = 3
    try:
        hil.reset(seed=0)
        results = [hil.step(np.array([0, 0, 0, -1], np.float32)) for _ in range(3)]
        assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
        assert results[-1][4]["ended_by"] == "time_limit"
    finally:
        hil.max_episode_steps = limit


# the can's expert episode is 6 times the others' length; its success is asserted fast by the can test above
@pytest.mark.parametrize("name", ["lift", pytest.param("can", marks=SLOW), "hil"])
def test_expert_rollouts_make_valid_step_records(envs, name):
    env = envs[name]
    fields = fields_for_env(env)
    assert fields["state"][0] == (len(env.state_names),) and fields["action_executed"][0] == env.action_space.shape
    expert = EXPERTS[name](env, noise_std=0.0, seed=0)
    expert.reset()
    records, success = rollout_episode(env, expert.act, seed=4, episode_id=0)
    assert success
    batch = stack_records(records, fields)
    assert check_step_batch(batch, fields) == len(records)
    assert batch["terminated"][-1] and batch["success"][-1]


@pytest.mark.parametrize(
    ("option", "env_type", "expert_type"),
    [
        ("robosuite_lift", RobosuiteEnv, LiftExpert),
        pytest.param("robosuite_can", RobosuiteEnv, PickPlaceCanExpert, marks=SLOW),  # fast: the potential test
        ("gym_hil_pick", GymHilPickCubeEnv, GymHilPickCubeExpert),
    ],
)
def test_hydra_env_configs_build_env_and_expert(option, env_type, expert_type):
    cfg = load_config([f"env={option}"])
    env = make_env(cfg)
    try:
        assert isinstance(env, env_type)
        expert = make_expert(cfg, env, noise_std=0.1, seed=3)
        assert isinstance(expert, expert_type)
        obs, _ = env.reset(seed=0)
        assert env.action_space.contains(expert.act(obs))
    finally:
        env.close()


@pytest.mark.slow
def test_image_observations_are_upright_and_match_robosuites_renderer():
    import robosuite

    from robo_rl.seeding import global_numpy_seed
    from sim.robosuite_tasks import controller_config

    env = RobosuiteEnv("Lift", observation="image", image_size=64)
    try:
        assert env.state_names[-1] == "robot0_gripper_qpos_right"  # image mode: no object pose in the state
        obs, _ = env.reset(seed=0)
        check_observation(obs, env.observation_space)
        assert set(obs["images"]) == {"agentview", "robot0_eye_in_hand"}
        with global_numpy_seed(0):
            ref = robosuite.make(
                "Lift",
                robots="Panda",
                controller_configs=controller_config(),
                hard_reset=False,
                camera_names=["agentview", "robot0_eye_in_hand"],
                camera_heights=64,
                camera_widths=64,
                ignore_done=True,
            )
        with global_numpy_seed(5):
            raw = ref.reset()
        with global_numpy_seed(5):
            ours = env._observation(env._env.reset())["images"]
        for cam in env.camera_names:
            theirs = raw[f"{cam}_image"][::-1]  # robosuite renders bottom-up (OpenGL convention)
            assert np.abs(theirs.astype(int) - ours[cam]).mean() < 5  # same view; only shadows/anti-aliasing differ
            assert np.abs(theirs[::-1].astype(int) - ours[cam]).mean() > 20  # and not upside down
        ref.close()
        expert = LiftExpert(env)
        assert run_expert(env, expert, seed=1)[-1][4]["success"]  # the expert works without an object state
    finally:
        env.close()


@pytest.mark.slow
def test_gym_hil_image_variant():
    env = GymHilPickCubeEnv(image_obs=True, image_size=64)
    try:
        obs, _ = env.reset(seed=0)
        check_observation(obs, env.observation_space)
        assert env.camera_names == ("front", "wrist") and len(env.state_names) == 18
        assert all(img.std() > 5 for img in obs["images"].values())
    finally:
        env.close()
