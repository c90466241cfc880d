"""Domain randomisation (`env.randomize`, sim/randomize.py): without it the envs are the nominal ones bit for bit; a
seed fixes what is drawn; every parameter really changes the simulation within its range and is drawn again from
the nominal value each episode; the scripted expert still lifts under mild physical randomisation."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must be set before mujoco is first imported

import numpy as np
import pytest

from robo_rl.config import ConfigError, load_config, make_env
from sim.experts import PickCubeExpert
from sim.pick_cube import PickCubeEnv
from sim.randomize import Randomization

PHYSICAL = {"object_size_scale": [0.9, 1.1], "object_mass_scale": [0.5, 2.0], "friction_scale": [0.7, 1.3]}
VISUAL = {"light_scale": [0.5, 1.5], "camera_pos_noise_m": 0.03, "camera_fovy_deg": [40.0, 60.0]}
OPEN = np.array([0.0, 0.0, 0.0, -1.0], np.float32)  # pick_cube: stay, gripper open
PLUS_X = np.array([1.0, 0.0, 0.0, -1.0], np.float32)


@pytest.fixture(scope="module")
def nominal():
    return PickCubeEnv()


@pytest.fixture(scope="module")
def randomized():
    return PickCubeEnv(randomize={**PHYSICAL, **VISUAL})


def rollout(env, seed, actions):
    obs, info = env.reset(seed=seed)
    frames, infos = [obs], [info]
    for action in actions:
        obs, *_, info = env.step(action)
        frames.append(obs)
        infos.append(info)
    return frames, infos


def pinch_path(env, action, steps, seed=0):
    env.reset(seed=seed)
    path = [env.data.site_xpos[env._pinch].copy()]
    for _ in range(steps):
        env.step(action)
        path.append(env.data.site_xpos[env._pinch].copy())
    return np.array(path)


def test_no_randomization_is_the_nominal_env_bit_for_bit():
    actions = np.random.default_rng(0).uniform(-1, 1, (15, 4)).astype(np.float32)
    runs = [rollout(PickCubeEnv(cameras=["front"], image_size=32, randomize=r), 3, actions) for r in (None, {})]
    (frames_a, infos_a), (frames_b, infos_b) = runs
    for a, b in zip(frames_a, frames_b, strict=True):
        assert np.array_equal(a["state"], b["state"]) and np.array_equal(a["images"]["front"], b["images"]["front"])
    assert all("randomization" not in info for info in infos_a + infos_b)


def test_a_seed_fixes_the_draws_and_the_cube_is_placed_as_in_the_nominal_env(nominal, randomized):
    cube = [nominal.state_names.index(n) for n in ("cube_x", "cube_y", "cube_yaw_sin4")]
    _, infos = rollout(randomized, 5, [OPEN, OPEN])
    again = PickCubeEnv(randomize={**PHYSICAL, **VISUAL}).reset(seed=5)[1]["randomization"]
    assert infos[0]["randomization"] == again == infos[1]["randomization"]  # the first step reports them too
    assert "randomization" not in infos[2]
    assert set(again) >= {
        "object_size_scale",
        "object_mass_scale",
        "friction_scale",
        "light_scale",
        "camera_front_dx_m",
        "camera_wrist_fovy_deg",
    }
    other = randomized.reset(seed=6)[1]["randomization"]
    assert all(other[k] != again[k] for k in again)
    for seed in (5, 6):  # drawn after the env's own draws: the same cube pose as without randomisation
        assert np.allclose(randomized.reset(seed=seed)[0]["state"][cube], nominal.reset(seed=seed)[0]["state"][cube])


def test_each_parameter_is_set_on_the_model_within_its_range_from_the_nominal_value(nominal, randomized):
    m0, m = nominal.model, randomized.model
    cube_geom, cube_body = randomized._cube_geom, randomized._cube_body
    pads = randomized._left_pads + randomized._right_pads
    front = m.camera("front").id
    nominal.reset(seed=0)
    d0 = nominal.data
    forward = -d0.cam_xmat[front].reshape(3, 3)[:, 2]
    aim = d0.cam_xpos[front] - forward * d0.cam_xpos[front][2] / forward[2]  # where the front view meets the table
    drawn = []
    for seed in range(4):  # each episode starts again from the nominal values: no compounding
        obs, info = randomized.reset(seed=seed)
        r = info["randomization"]
        drawn.append(r["object_size_scale"])
        for key, (lo, hi) in {**PHYSICAL, "light_scale": VISUAL["light_scale"]}.items():
            assert lo <= r[key] <= hi
        size = r["object_size_scale"]
        assert np.allclose(m.geom_size[cube_geom], m0.geom_size[cube_geom] * size)
        assert m.geom_rbound[cube_geom] == pytest.approx(m0.geom_rbound[cube_geom] * size)
        assert randomized.data.xpos[cube_body][2] == pytest.approx(nominal.cube_half_size_m * size, abs=1e-6)
        assert obs["state"][randomized.state_names.index("cube_lift")] == pytest.approx(0.0, abs=1e-3)  # resting
        assert m.body_mass[cube_body] == pytest.approx(m0.body_mass[cube_body] * r["object_mass_scale"])
        assert m.body_subtreemass[cube_body] == pytest.approx(m.body_mass[cube_body])
        assert np.allclose(
            m.geom_friction[[cube_geom, *pads], 0], m0.geom_friction[[cube_geom, *pads], 0] * r["friction_scale"]
        )
        assert np.allclose(m.light_diffuse, m0.light_diffuse * r["light_scale"])
        assert np.allclose(m.vis.headlight.ambient, m0.vis.headlight.ambient * r["light_scale"])
        for name in ("front", "wrist"):
            cam = m.camera(name).id
            offset = m.cam_pos[cam] - m0.cam_pos[cam]
            assert np.allclose(offset, [r[f"camera_{name}_d{axis}_m"] for axis in "xyz"])
            assert np.all(np.abs(offset) <= VISUAL["camera_pos_noise_m"]) and np.abs(offset).max() > 0
            assert m.cam_fovy[cam] == r[f"camera_{name}_fovy_deg"] and 40.0 <= m.cam_fovy[cam] <= 60.0
        d = randomized.data
        view = -d.cam_xmat[front].reshape(3, 3)[:, 2]
        assert np.linalg.norm(np.cross(aim - d.cam_xpos[front], view)) < 1e-9  # re-aimed at the same point
    assert len(set(drawn)) == len(drawn)


def test_image_noise_has_the_configured_std():
    std = 8.0
    clean = PickCubeEnv(cameras=["front"], image_size=32).reset(seed=1)[0]["images"]["front"].astype(float)
    noisy = PickCubeEnv(cameras=["front"], image_size=32, randomize={"image_noise_std": std})
    image = noisy.reset(seed=1)[0]["images"]["front"].astype(float)
    unclipped = (clean > 4 * std) & (clean < 255 - 4 * std)
    diff = (image - clean)[unclipped]
    assert diff.size > 1000 and abs(diff.std() - std) < 0.5 and abs(diff.mean()) < 0.5
    assert image.min() >= 0 and image.max() <= 255


def test_action_latency_delays_a_command_by_k_steps(nominal):
    latent = PickCubeEnv(randomize={"action_latency_steps": [3, 3]})
    assert latent.reset(seed=0)[1]["randomization"]["action_latency_steps"] == 3.0
    now, late = pinch_path(nominal, PLUS_X, 10), pinch_path(latent, PLUS_X, 10)
    assert np.abs(late[:4] - late[0]).max() < 1e-4  # the neutral action for the first three steps
    assert np.abs(late[3:] - now[:-3]).max() < 1e-5  # then the same motion, three steps late
    assert now[1, 0] - now[0, 0] > 0.03


def test_action_noise_moves_an_arm_told_to_stay(nominal):
    noisy = PickCubeEnv(randomize={"action_noise_std": 0.5})
    assert np.abs(pinch_path(nominal, OPEN, 5) - pinch_path(nominal, OPEN, 0)[0]).max() < 1e-4
    moves = [path - path[0] for path in (pinch_path(noisy, OPEN, 5, seed) for seed in (0, 1))]
    assert np.abs(moves[0]).max() > 0.01 and not np.allclose(moves[0], moves[1])  # the noise is drawn per seed


def test_control_jitter_varies_the_simulated_time_per_step(nominal):
    jitter = 0.3

    def step_durations(env):
        env.reset(seed=0)
        durations = []
        for _ in range(10):
            start = env.data.time
            env.step(OPEN)
            durations.append(env.data.time - start)
        return np.array(durations)

    period_s = 1.0 / nominal.control_hz
    assert np.allclose(step_durations(nominal), period_s)
    durations = step_durations(PickCubeEnv(randomize={"control_jitter": jitter}))
    physics_dt_s = nominal.model.opt.timestep
    assert np.all(np.abs(durations / period_s - 1.0) <= jitter + physics_dt_s / period_s)
    assert len(np.unique(np.round(durations / physics_dt_s))) >= 3


def expert_wins(env, expert, seeds) -> int:
    """Successes of the task's scripted expert, one episode per seed."""
    wins = 0
    for seed in seeds:
        expert.reset()
        obs, _ = env.reset(seed=seed)
        while True:
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            if terminated or truncated:
                break
        wins += info["success"]
    return wins


def test_the_expert_still_lifts_under_mild_physical_randomization():
    env = PickCubeEnv(randomize=PHYSICAL)
    assert expert_wins(env, PickCubeExpert(env), range(10)) >= 8  # measured: 10 of 10 (20 of 20)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"object_mass_scal": [0.5, 2.0]}, "unknown randomize key 'object_mass_scal'; the keys are object_size_scale"),
        ({"object_mass_scale": [2.0, 0.5]}, "object_mass_scale must be a range 0 < lo <= hi"),
        ({"friction_scale": 1.2}, "friction_scale must be a list of two numbers"),
        ({"image_noise_std": -1.0}, "image_noise_std must be a number >= 0"),
        ({"action_latency_steps": [0.5, 2]}, "action_latency_steps must be integers"),
        ({"control_jitter": 1.0}, "control_jitter must be below 1"),
        ({"camera_fovy_deg": [40, 50], "camera_fovy_scale": [0.9, 1.1]}, "not both"),
        ([0.5, 2.0], "randomize must be a mapping"),
    ],
)
def test_a_bad_randomize_node_is_refused_naming_the_key(node, message):
    with pytest.raises(ValueError, match=message):
        Randomization.from_config(node)
    with pytest.raises(ValueError, match=message):
        PickCubeEnv(randomize=node)


def test_randomization_comes_from_the_config_and_its_ranges_are_checked():
    cfg = load_config(["env.randomize={object_mass_scale:[0.5,2.0],action_latency_steps:[1,2]}"])
    info = make_env(cfg).reset(seed=0)[1]["randomization"]
    assert 0.5 <= info["object_mass_scale"] <= 2.0 and info["action_latency_steps"] in (1.0, 2.0)
    with pytest.raises(ConfigError, match=r"env.randomize.object_mass_scale=\[0,2.0\] is not allowed"):
        load_config(["env.randomize={object_mass_scale:[0,2.0]}"])
    with pytest.raises(ConfigError, match=r"unknown config key 'env.randomize.mass'"):  # refused as the config loads
        make_env(load_config(["env.randomize={mass:[0.5,2.0]}"]))


# --- robosuite ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lifts():
    pytest.importorskip("robosuite")
    from sim.robosuite_tasks import RobosuiteEnv

    randomize = {**PHYSICAL, "light_scale": [0.5, 1.5], "object_xy_offset_m": [0.02, 0.02], "control_jitter": 0.2}
    envs = RobosuiteEnv("Lift"), RobosuiteEnv("Lift", randomize=randomize)
    yield envs
    for env in envs:
        env.close()


def test_robosuite_lift_randomizes_the_cube_lights_and_step_duration(lifts):
    nominal, randomized = lifts
    m0, m = nominal._model, randomized._model
    cube = m.body("cube_main").id
    cube_geoms = [m.geom(n).id for n in ("cube_g0", "cube_g0_vis")]
    pads = [m.geom(f"gripper0_right_finger{i}_pad_collision").id for i in (1, 2)]
    for seed in range(2):
        nominal.reset(seed=seed)
        _, info = randomized.reset(seed=seed)
        r = info["randomization"]
        assert m.body_mass[cube] == pytest.approx(m0.body_mass[cube] * r["object_mass_scale"])
        assert np.allclose(
            m.geom_friction[cube_geoms + pads, 0], m0.geom_friction[cube_geoms + pads, 0] * r["friction_scale"]
        )
        assert np.allclose(m.light_diffuse, m0.light_diffuse * r["light_scale"])
        assert np.allclose(m.geom_size[cube_geoms], m0.geom_size[cube_geoms] * r["object_size_scale"])
        s0, s = nominal.task_state(), randomized.task_state()
        assert np.allclose(s["object_size"], s0["object_size"] * r["object_size_scale"])
        # robosuite's placement for this seed, shifted by the drawn offset, at the same gap above the table
        assert np.allclose(s["object_pos"][:2] - s0["object_pos"][:2], [r["object_dx_m"], r["object_dy_m"]])
        gap0, gap = (st["object_pos"][2] - st["table_z"] - st["object_size"][2] for st in (s0, s))
        assert gap == pytest.approx(gap0, abs=1e-9)
    durations, eef = [], randomized._env.robots[0].eef_site_id["right"]
    for _ in range(8):
        start = randomized._data.time
        obs, *_ = randomized.step(np.zeros(7, np.float32))
        durations.append(randomized._data.time - start)
        assert np.allclose(obs["state"][:3], randomized._data.site_xpos[eef])  # observed at the step's end
    substep_s, period_s = randomized._env.model_timestep, randomized._env.control_timestep
    assert np.all(np.abs(np.array(durations) / period_s - 1.0) <= 0.2 + substep_s / period_s)
    assert len(np.unique(np.round(np.array(durations) / substep_s))) >= 3


def test_robosuite_lift_expert_lifts_under_mild_physical_randomization(lifts):
    from sim.robosuite_experts import LiftExpert

    env = lifts[1]
    assert expert_wins(env, LiftExpert(env), range(3)) == 3


def test_robosuite_can_refuses_to_scale_its_mesh():
    pytest.importorskip("robosuite")
    from sim.robosuite_tasks import RobosuiteEnv

    with pytest.raises(ValueError, match="object_size_scale scales primitive geoms only"):
        RobosuiteEnv("PickPlaceCan", randomize={"object_size_scale": [0.9, 1.1]})
