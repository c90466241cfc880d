"""Resets the robot does and checks (`env.reset_mode`, robo_rl/envs/resets.py): on the pick sim and on the SO-101 twin
behind its real driver code and the safety layer, each mode puts the scene back (or asks a person), the check refuses
an unreset scene and only then calls a person, the calls are counted, and bad settings are refused in one line."""

import mujoco
import numpy as np
import pytest

from robo_rl.config import ConfigError, load_config, make_env
from robo_rl.envs.base import SafetyStop
from robo_rl.envs.resets import ResetWrapper, load_trajectory
from robo_rl.envs.wrappers import find_wrapper, make_actor_env
from robo_rl.teleop.base import FakeDevice, TeleopDevice
from robo_rl.teleop.reset_teaching import record_reset_trajectory
from sim.pick_cube import PickCubeEnv

PUSH = np.array([0.6, 0.4, -0.6, 1.0], np.float32)  # an episode's worth of motion: away from home, gripper closed


def _pick(**kw) -> ResetWrapper:
    env = PickCubeEnv(**kw)
    return ResetWrapper(env, env.reset_settings)


def _move_cube(env, xy, z=None) -> None:
    """Where an episode left the cube (pushed aside, knocked off the table)."""
    task = env.unwrapped
    q = task._cube_qpos
    task.data.qpos[q : q + 2] = xy
    if z is not None:
        task.data.qpos[q + 2] = z
    mujoco.mj_forward(task.model, task.data)


def _episode(env, steps=6, action=PUSH) -> None:
    for _ in range(steps):
        env.step(action)


def _cube(env) -> np.ndarray:
    return env.unwrapped.data.xpos[env.unwrapped._cube_body].copy()


# --- the pick sim -----------------------------------------------------------------------------------


def test_scripted_reset_carries_the_cube_back_with_the_physics_running_and_the_check_passes():
    env = _pick(reset_mode="scripted")
    env.reset(seed=1)
    for xy in [(0.66, 0.19), (0.34, -0.21)]:
        _move_cube(env, xy)
        _episode(env)
        task = env.unwrapped
        assert "outside its start region" in task.reset_problem(0.03)
        t_before = task.data.time
        obs, info = env.reset()
        assert info["reset"]["problem"] is None and task.reset_problem(0.03) is None
        assert task.data.time > t_before + 1.0  # simulated seconds passed: carried by the arm, not teleported
        cube = _cube(env)
        assert np.all(np.abs(cube[:2] - task.cube_center_xy_m) <= task.cube_xy_range_m + 0.03)
        np.testing.assert_allclose(obs["state"], task.full_state)  # the episode starts from where things are
    assert env.stats() == {"resets": 2, "resets_ok": 2, "resets_failed": 0, "reset_calls": 0}


def test_episodes_that_never_touch_the_cube_still_start_from_a_scene_drawn_afresh():
    # left where it lay, a cube the policy never reached gave the next episode the very same scene, again and again
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=5)
    task, starts = env.unwrapped, [_cube(env)[:2]]
    for _ in range(4):
        _episode(env, 3, np.array([0.0, 0.0, 0.5, -1.0], np.float32))  # rises, open, never near the cube
        obs, info = env.reset()
        assert info["reset"]["problem"] is None
        starts.append(_cube(env)[:2])
    moved = np.linalg.norm(np.diff(starts, axis=0), axis=1)
    assert np.all(moved > 0.005), moved  # a new place each time, drawn in the start region
    assert np.all(np.abs(np.array(starts) - task.cube_center_xy_m) <= task.cube_xy_range_m)
    assert env.stats()["reset_calls"] == 0


def test_the_scripted_reset_turns_the_cube_to_yaws_drawn_as_the_env_draws_them_not_square_every_time():
    # a gripper that cannot turn sets the cube down square to itself: every episode started at yaw 0, an easier task
    # than the env's own placement (uniform within +-45 degrees), until the reset learned to push it round
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=7)
    yaws = []
    for _ in range(12):
        _episode(env, 2, np.zeros(4, np.float32))
        obs, info = env.reset()
        assert info["reset"]["problem"] is None
        yaws.append(_yaw_deg(env))
    yaws = np.array(yaws)
    assert np.mean(np.abs(yaws) > 15) >= 1 / 3 and yaws.min() < -10 and yaws.max() > 10, yaws.round(1)
    assert env.stats()["reset_calls"] == 0


def test_a_cube_left_turned_is_squared_before_the_fingers_close_on_it():
    # fingers closing on a turned cube's corners can knock it out of reach (a 200-reset probe called a person once so)
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=2)
    task = env.unwrapped
    q, at_close, hold = task._cube_qpos, [], task._hold

    def spy(gripper, steps):  # the cube's yaw each time the fingers close on it
        if gripper > 0 and not at_close:
            at_close.append(abs(_yaw_deg(env)))
        hold(gripper, steps)

    task._hold = spy
    for yaw in (40, -30):
        at_close.clear()
        task.data.qpos[q : q + 7] = [0.56, -0.02, task._cube_half_m, *_yaw_quat(yaw)]
        mujoco.mj_forward(task.model, task.data)
        obs, info = env.reset()
        assert info["reset"]["problem"] is None, info["reset"]
        assert at_close and at_close[0] < 15, (yaw, at_close)
    assert env.stats()["reset_calls"] == 0


def test_a_cube_the_turn_pushed_out_of_its_region_is_carried_back_in_rather_than_calling_a_person():
    # a 90-minute run with the turned reset called a person 27 times (1.8% of resets), once for a cube 3.6 cm out
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=4)
    task = env.unwrapped
    out_x = task.cube_center_xy_m[0] + task.cube_xy_range_m[0] + 0.035  # past the check's 3 cm tolerance

    def slid_out(target):  # a push that slid a heavy, slippery cube out of its region
        _move_cube(env, (out_x, 0.0))

    task._turn_to = slid_out
    _, info = env.reset()
    assert info["reset"]["problem"] is None and task._outside_region_m() <= 0.01, info["reset"]
    assert env.stats()["reset_calls"] == 0


def _yaw_quat(degrees: float) -> list[float]:
    half = np.radians(degrees) / 2
    return [np.cos(half), 0.0, 0.0, np.sin(half)]


def _yaw_deg(env) -> float:
    """The cube's yaw in degrees as the shorter turn from square (a cube looks the same every quarter turn)."""
    rot = env.unwrapped.data.xmat[env.unwrapped._cube_body]
    return float((np.degrees(np.arctan2(rot[3], rot[0])) + 45) % 90 - 45)


def test_a_cube_pushed_just_past_the_policys_box_is_fetched_but_one_by_the_arms_base_calls_a_person():
    # the policy's workspace box is x 0.3-0.7, y -0.25-0.25; the reset may reach RESET_REACH_MARGIN_M further, so a
    # cube just past its far side or its edge comes back; the arm cannot reach down beside its own base (x < ~0.32)
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=3)
    task = env.unwrapped
    low = task.workspace_low_m.copy()
    for xy in [(0.76, 0.05), (0.5, -0.3)]:
        _move_cube(env, xy)
        _episode(env, 2, np.zeros(4, np.float32))
        obs, info = env.reset()
        assert info["reset"]["problem"] is None, info["reset"]
    assert env.stats()["reset_calls"] == 0
    np.testing.assert_array_equal(task.workspace_low_m, low)  # the policy's box is back as it was
    _move_cube(env, (0.23, 0.02))
    _episode(env, 2, np.zeros(4, np.float32))
    obs, info = env.reset()
    assert "outside its start region" in info["reset"]["problem"] and env.stats()["reset_calls"] == 1


@pytest.mark.parametrize("towards", ["the base", "the far side"])
def test_end_walls_stop_a_cube_squeezed_out_of_the_fingers_where_the_reset_can_fetch_it(towards):
    # a cube squeezed out of half-closed fingers left at 1.1-1.4 m/s and 7 cm high in the stress episodes: without the
    # walls it comes to rest beyond the top-down grasp's reach (x < 0.30 or > 0.80) and the check calls a person
    start, velocity = {"the base": ((0.42, 0.0), -1.5), "the far side": ((0.68, 0.05), 1.5)}[towards]
    rest = {}
    for walls in (False, True):
        env = _pick(reset_mode="scripted", reset_person="sim", end_walls=walls)
        env.reset(seed=3)
        task = env.unwrapped
        _move_cube(env, start, z=0.06)
        task.data.qvel[task.model.jnt_dofadr[task.model.joint("cube").id]] = velocity  # along x
        _episode(env, 15, np.array([0.0, 0.0, 0.0, -1.0], np.float32))
        rest[walls] = float(_cube(env)[0])
        obs, info = env.reset()
        assert (info["reset"]["problem"] is None) == walls, (walls, rest, info["reset"])
        assert env.stats()["reset_calls"] == (0 if walls else 1)
    assert not 0.30 <= rest[False] <= 0.80 and 0.30 <= rest[True] <= 0.80, rest


def test_a_cube_still_held_when_the_episode_ends_is_set_down_in_its_region_not_dropped_from_the_lift():
    # a learned reward can end an episode mid-lift: the cube high in the gripper at the box's edge
    from sim.experts import PickCubeExpert

    env = _pick(reset_mode="scripted", reset_person="sim")
    obs, _ = env.reset(seed=4)
    task, expert = env.unwrapped, PickCubeExpert(env.unwrapped)
    for _ in range(60):
        obs, *_ = env.step(expert.act(obs))
        if task._is_grasped() and _cube(env)[2] > 0.08:
            break
    assert task._is_grasped(), "the expert should have lifted the cube"
    task._move_to([0.69, 0.24, 0.2], 1.0)  # carried, closed, to the box's far corner
    assert task._is_grasped() and _cube(env)[2] > 0.12
    opened_at, step = [], task._step

    def watched(action):  # the cube's height at each control step the reset commands the gripper open
        out = step(action)
        if action[3] < 0:
            opened_at.append(float(_cube(env)[2]))
        return out

    task._step = watched
    obs, info = env.reset()
    assert info["reset"]["problem"] is None and env.stats()["reset_calls"] == 0
    assert opened_at[0] < task._cube_half_m + 0.04, opened_at[:3]  # let go on the table, not from 20 cm up
    assert np.all(np.abs(_cube(env)[:2] - task.cube_center_xy_m) <= task.cube_xy_range_m)


def test_the_check_refuses_a_cube_the_arm_cannot_reach_and_only_then_calls_the_simulated_person():
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=2)
    _episode(env, 2)
    _move_cube(env, (0.9, 0.45), z=-0.7)  # pushed off the table, onto the floor
    obs, info = env.reset()
    assert (
        "the cube fell off the table" in info["reset"]["problem"] and "at x 0.90, y 0.45 m" in info["reset"]["problem"]
    )
    assert env.unwrapped.reset_problem(0.03) is None  # the person put it back
    assert env.stats() == {"resets": 1, "resets_ok": 0, "resets_failed": 1, "reset_calls": 1}
    _episode(env)  # and a scene a scripted reset can handle needs no one
    env.reset()
    assert env.stats()["reset_calls"] == 1 and env.stats()["resets_ok"] == 1


def test_a_simulator_blow_up_is_named_in_the_failed_check_and_one_in_the_episode_the_reset_recovers_from(
    monkeypatch, tmp_path
):
    """MuJoCo resets its whole state when the physics blows up (the arm to its zero pose, far from home): a failed
    check then says so, and when (the episode before, or the reset itself), so a call is not blamed on the scene."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warning to MUJOCO_LOG.TXT in the working directory
    env = _pick(reset_mode="scripted", reset_person="sim")
    env.reset(seed=2)
    task = env.unwrapped

    def blow_up():
        task.data.qfrc_applied[:] = 1e300
        mujoco.mj_step(task.model, task.data)
        task.data.qfrc_applied[:] = 0.0

    _episode(env, 3)
    blow_up()  # in the episode
    assert "the simulation blew up since the last check" in task.reset_problem(0.03)
    _episode(env, 3)
    blow_up()  # again: the scripted reset starts from MuJoCo's reset state and brings the scene back
    obs, info = env.reset()
    assert info["reset"]["problem"] is None and env.stats()["reset_calls"] == 0
    _episode(env, 3)
    monkeypatch.setattr(task, "_go_home", blow_up)  # now during the reset: the arm is left at its zero pose
    obs, info = env.reset()
    assert "the arm is" in info["reset"]["problem"]
    assert "the simulation blew up during the reset and MuJoCo reset its state" in info["reset"]["problem"]
    assert env.stats()["reset_calls"] == 1 and task.reset_problem(0.03) is None  # the simulated person placed it


def test_human_mode_asks_a_person_after_every_episode_that_left_the_scene_unreset():
    env = _pick(reset_mode="human", reset_person="sim")
    env.reset(seed=3)
    for _ in range(2):
        _episode(env)
        obs, info = env.reset()
        assert "the arm is" in info["reset"]["problem"] and "gripper is not open" in info["reset"]["problem"]
    assert env.stats() == {"resets": 2, "resets_ok": 0, "resets_failed": 2, "reset_calls": 2}


def test_a_failed_check_waits_for_the_person_at_the_devices_says_why_and_stops_if_nobody_comes():
    env = _pick(reset_mode="human", reset_wait_s=0.3)
    env.reset(seed=4)
    seen = []
    env.add_poller(lambda: seen.append(env.stats().get("reset_waiting_why")) or set())
    _episode(env)
    with pytest.raises(SafetyStop, match=r"nobody reset the scene within 0.3 s \(env.reset_wait_s\)") as e:
        env.reset()
    assert "\n" not in str(e.value) and "the arm is" in str(e.value)
    assert seen and all("the reset check failed: " in why for why in seen)  # the heartbeat's field while it waits
    assert "reset_waiting_why" not in env.stats() and env.stats()["reset_calls"] == 1


def test_the_wait_ends_when_a_person_has_reset_the_scene():
    env = _pick(reset_mode="human")
    env.reset(seed=5)
    polls = []

    def person():  # a device's reading; on the third look the person has put the scene back
        polls.append(1)
        if len(polls) == 3:
            env.unwrapped.place_scene(np.random.default_rng(0))
        return set()

    env.add_poller(person)
    _episode(env)
    env.reset()
    assert len(polls) == 3 and env.stats()["reset_calls"] == 1 and "reset_waiting_why" not in env.stats()


def test_an_estop_while_waiting_for_a_person_stops_the_run():
    device = FakeDevice()
    device.start()
    env = _pick(reset_mode="human")
    env.add_poller(lambda: set(device.read().events))
    env.reset(seed=6)
    _episode(env)
    device.push(events=["estop"])
    with pytest.raises(SafetyStop, match="e-stop while waiting for a person"):
        env.reset()


class TowardPoint(TeleopDevice):
    """A scripted teacher: end-effector motion toward a point of the pick sim, gripper open."""

    name = "teacher"

    def __init__(self, env, point) -> None:
        super().__init__()
        self.env, self.point = env.unwrapped, np.asarray(point, float)

    def _poll(self) -> None:
        error = self.point - self.env.data.site_xpos[self.env._pinch]
        motion = np.zeros(6, np.float32)
        motion[:3] = np.clip(error / self.env.max_ee_step_m, -1, 1)
        self._update(motion=motion, gripper=-1.0)


def test_taught_reset_replays_a_trajectory_recorded_with_a_device(tmp_path):
    teach = PickCubeEnv()
    teach.reset(seed=7)
    _episode(teach)
    path = record_reset_trajectory(teach, TowardPoint(teach, teach.ee_start_m), tmp_path / "reset.json", steps=20)
    waypoints = load_trajectory(path, "ee", ("x", "y", "z", "gripper"))
    assert len(waypoints) == 21 and np.abs(waypoints[-1][:3] - teach.ee_start_m).max() < 0.01

    env = _pick(reset_mode="taught", reset_trajectory=str(path))
    env.reset(seed=8)
    _episode(env, 4)
    obs, info = env.reset()
    assert info["reset"]["problem"] is None and env.stats()["resets_ok"] == 1

    away = tmp_path / "away.json"  # a trajectory that ends away from home: the check refuses it and calls a person
    record_reset_trajectory(teach, TowardPoint(teach, teach.ee_start_m + [0.1, 0.1, 0.0]), away, steps=20)
    env = _pick(reset_mode="taught", reset_trajectory=str(away), reset_person="sim")
    env.reset(seed=9)
    _episode(env, 4)
    obs, info = env.reset()
    assert "from its home pose" in info["reset"]["problem"] and env.stats()["reset_calls"] == 1


# --- the SO-101 twin, behind lerobot's driver code on a fake bus and the safety layer -------------


def _twin(*overrides):
    cfg = load_config(["env=so101_twin", "safety=default", "experiment=rlpd", *overrides])
    return make_actor_env(cfg)


def test_the_twin_scripted_reset_returns_home_through_the_safety_layers_joint_limits():
    env = _twin("env.reset_mode=scripted", "safety.max_joint_speed_rad_s=0.2")
    try:
        env.reset(seed=0)
        task = env.unwrapped
        _episode(env, 15, np.array([1.0, 0.5, 0.5, 1.0], np.float32))
        assert "from its home pose" in task.reset_problem(0.05)
        sent = len(task.driver_twin.commands)
        obs, info = env.reset()
        assert info["reset"]["problem"] is None and task.reset_problem(0.05) is None
        targets = np.array([q for _, q in task.driver_twin.commands[sent - 1 :]])
        steps = np.abs(np.diff(targets, axis=0)).max(axis=1)
        assert len(targets) > 10 and steps.max() <= 0.2 / task.control_hz + 0.01  # the guard's speed limit held
        assert find_wrapper(env, ResetWrapper).stats() == {
            "resets": 1,
            "resets_ok": 1,
            "resets_failed": 0,
            "reset_calls": 0,
        }
    finally:
        env.close()


def test_where_the_line_home_would_leave_the_workspace_box_the_reset_goes_a_joint_at_a_time_and_arrives():
    # a pose the residual reach can end in: the joint-space line home takes the tool out of the safety layer's box, so
    # the guard holds that step (before, the arm stood there until the timeout and the run called a person)
    cfg = load_config(["experiment=residual_so101_twin_reach", "env.twin_clock=virtual", "env.reset_mode=scripted"])
    env = make_actor_env(cfg)
    try:
        env.reset(seed=0)
        arm = env.unwrapped
        home = arm.driver.home_joints
        arm.driver_twin.move_by_hand(home + np.array([1.1, -0.51, 0.87, -2.77, -0.9]), gripper=0.0)
        sent = len(arm.driver_twin.commands)
        arm.scripted_reset()
        assert arm.reset_problem(0.05) is None  # home
        targets = np.array([q for _, q in arm.driver_twin.commands[sent:]])
        moved = (np.abs(np.diff(targets, axis=0)) > 1e-6).sum(axis=1)
        assert (moved == 1).sum() >= 5, "no stretch went one joint at a time"  # the fallback, not the line, got home
    finally:
        env.close()


@pytest.mark.parametrize("away", [[0.02, 2.05, -2.03, -2.71, 1.46], [-0.31, 2.07, -2.06, -2.84, 0.13]])
def test_an_arm_folded_at_the_boxs_far_face_where_no_joint_alone_may_move_retreats_and_gets_home(away):
    # poses drawn in the box where the guard holds the line home and every joint alone (0.3% of them; a two-hour run
    # called a person 3 times so, its elbow_flex ~2 rad from home): the tool retreats towards its home position first
    cfg = load_config(["experiment=residual_so101_twin_reach", "env.twin_clock=virtual", "env.reset_mode=scripted"])
    env = make_actor_env(cfg)
    try:
        env.reset(seed=0)
        arm = env.unwrapped
        arm.driver_twin.move_by_hand(arm.driver.home_joints + np.array(away), gripper=0.0)
        sent = len(arm.driver_twin.commands)
        arm.scripted_reset()
        assert arm.reset_problem(0.05) is None  # home
        safety = arm.joint_guard.__self__  # the safety layer whose box the guard keeps
        tools = np.array([arm.model.fk(q)[0] for _, q in arm.driver_twin.commands[sent:]])
        assert np.all(tools >= safety.low - 2e-3) and np.all(tools <= safety.high + 2e-3)  # never out of the box
    finally:
        env.close()


def test_the_twin_human_mode_homes_as_before_and_a_taught_reset_away_from_home_calls_the_person(tmp_path):
    env = _twin()  # the default on an arm: human (the arm homes itself, the person resets the scene)
    try:
        env.reset(seed=0)
        _episode(env, 10, np.array([1.0, 0.0, 0.5, 1.0], np.float32))
        env.reset()
        assert find_wrapper(env, ResetWrapper).stats()["resets_ok"] == 1
        task = env.unwrapped
        device = FakeDevice()
        device.start()
        device.push(motion=[0.0, 0.0, 1.0, 0, 0, 0], gripper=-1.0)  # taught: up, and there it ends (not home)
        path = record_reset_trajectory(env, device, tmp_path / "arm.json", steps=8)
        waypoints = load_trajectory(path, "joints", (*task.model.joint_names, "gripper"))
        assert len(waypoints) == 9 and np.abs(waypoints[-1][:-1] - task.driver.home_joints).max() > 0.05
    finally:
        env.close()
    env = _twin("env.reset_mode=taught", f"env.reset_trajectory={path}", "env.reset_person=sim")
    try:
        env.reset(seed=1)
        _episode(env, 5)
        obs, info = env.reset()
        assert "from its home pose" in info["reset"]["problem"]
        assert env.unwrapped.reset_problem(0.05) is None  # the simulated person moved it home by hand
        assert find_wrapper(env, ResetWrapper).stats()["reset_calls"] == 1
    finally:
        env.close()


# --- settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["env.reset_mode=sometimes"], "env.reset_mode=sometimes is not allowed: must be human | scripted | taught"),
        (["env.reset_tolerance_m=0"], "env.reset_tolerance_m=0 is not allowed: must be a number in (0, inf)"),
        (["env=so101_twin", "env.reset_tolerance_rad=-1"], "env.reset_tolerance_rad=-1 is not allowed"),
        (["env.reset_person=robot"], "env.reset_person=robot is not allowed: must be devices | sim"),
    ],
)
def test_a_bad_reset_setting_is_refused_in_one_line(overrides, refusal):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert refusal in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["env.reset_mode=taught"], "env.reset_mode=taught needs env.reset_trajectory"),
        (["env.reset_mode=learned"], "env.reset_mode=learned (a reset policy trained alongside the task's) is not"),
        (["env=pick_color", "env.reset_mode=scripted"], "this task's resets move pick_cube's one cube"),
    ],
)
def test_a_reset_mode_the_env_cannot_do_is_refused_when_it_is_built(overrides, refusal):
    with pytest.raises(ConfigError) as e:
        make_env(load_config(overrides))
    assert refusal in str(e.value) and "\n" not in str(e.value)


def test_a_taught_trajectory_that_is_missing_or_made_for_another_robot_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        make_actor_env(load_config(["env.reset_mode=taught", f"env.reset_trajectory={tmp_path / 'none.json'}"]))
    teach = PickCubeEnv()
    teach.reset(seed=0)
    device = FakeDevice()
    device.start()
    path = record_reset_trajectory(teach, device, tmp_path / "pick.json", steps=2)
    with pytest.raises(
        ConfigError, match=r"holds ee waypoints of \['x', 'y', 'z', 'gripper'\]; this env replays joints"
    ):
        make_actor_env(load_config(["env=so101_twin", "env.reset_mode=taught", f"env.reset_trajectory={path}"]))


def test_the_sims_keep_their_instant_reset_unless_a_mode_is_chosen():
    env = make_actor_env(load_config(["experiment=rlpd"]))
    assert find_wrapper(env, ResetWrapper) is None
    env.close()


@pytest.mark.slow
def test_a_short_train_run_with_scripted_resets_completes_with_its_reset_counts_in_the_metrics(tmp_path):
    from robo_rl.runs import read_metrics
    from tests.test_cli import ROOT, isolated, only_run_dir, robo_rl

    args = [
        "env.reset_mode=scripted",
        "env.reset_person=sim",  # a cube the arm cannot reach is put back by the simulated person, and counted
        "train.total_env_steps=1500",
        "train.learning_starts=200",
        "demos.num_episodes=5",
        "eval.episodes=2",
        "policy.hidden=[32,32]",
        "algo.critic_hidden=[32,32]",
    ]
    out = robo_rl("train", *isolated(tmp_path), *args, cwd=ROOT, timeout=10 * 60)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = read_metrics(only_run_dir(tmp_path) / "metrics.jsonl")
    episodes = [m for m in metrics if m["kind"] == "episode"]
    stats = metrics[-1]["actor_stats"]["actor-0"]
    assert metrics[-1]["kind"] == "end" and len(episodes) >= 20
    assert stats["resets"] >= len(episodes) - 1  # every episode after the first began after a checked reset
    assert stats["resets"] == stats["resets_ok"] + stats["resets_failed"]
    assert stats["reset_calls"] == stats["resets_failed"] and "reset_waiting_why" not in stats


def test_robo_rl_record_mode_reset_writes_a_trajectory_that_a_taught_reset_replays(tmp_path, monkeypatch):
    from tests.test_cli import in_this_process

    path = tmp_path / "reset.json"
    device = "human.devices=[{_target_: robo_rl.teleop.base.FakeDevice}]"  # a person who holds the arm still
    code = in_this_process(monkeypatch, "record", str(path), "mode=reset", "steps=5", device, "actor.realtime=false")
    assert code == 0 and len(load_trajectory(path, "ee", ("x", "y", "z", "gripper"))) == 6
    env = make_actor_env(load_config(["experiment=rlpd", "env.reset_mode=taught", f"env.reset_trajectory={path}"]))
    assert find_wrapper(env, ResetWrapper).waypoints.shape == (6, 4)
    env.close()


def test_a_simulated_person_who_cannot_make_the_check_pass_stops_the_run_instead_of_trying_forever():
    env = _pick(reset_mode="human", reset_person="sim", reset_tolerance_m=0.001)  # its own placement is not that exact
    env.reset(seed=10)
    _episode(env)
    with pytest.raises(SafetyStop, match="the simulated person could not reset the scene in 3 tries: the arm is"):
        env.reset()
    assert env.stats()["reset_calls"] == 1 and "reset_waiting_why" not in env.stats()


def test_a_reset_nobody_answers_stops_the_actor_with_its_finished_episode_in_the_replay_once(tmp_path):
    import signal
    import threading
    import time

    from robo_rl.actor import Actor
    from robo_rl.learner import Learner
    from tests.test_pipeline import SMALL_NETS, toy_config

    cfg = toy_config(
        tmp_path,
        "env=pick_cube",
        "env.reset_mode=human",  # after the first episode the check fails, and no person is there
        "env.reset_wait_s=0.3",
        "env.max_episode_steps=8",
        "demos.num_episodes=0",
        "train.total_env_steps=1000",
        *SMALL_NETS,
    )
    (tmp_path / "run").mkdir()
    learner = Learner(cfg, tmp_path / "run", progress=False)
    thread = threading.Thread(target=learner.run)
    thread.start()
    try:
        actor = Actor(cfg, progress=False)
        reason = actor.run()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the actor's shutdown ignores Ctrl-C; undo
        time.sleep(1.0)  # a record sent twice would reach the learner by now
    finally:
        learner.cfg.train.total_env_steps = 0  # the run ends here: the learner would wait for the actor's return
        thread.join(timeout=60)
    assert reason.startswith("safety: the reset check failed (") and "(env.reset_wait_s)" in reason
    assert learner.episodes == 1 and learner.env_steps == 8  # the finished episode kept, and only once
    stats = actor.loop_stats()
    assert stats["resets_failed"] == 1 and stats["reset_calls"] == 1 and stats["resets_ok"] == 0


def test_grouped_resets_from_one_seeded_state_and_a_reset_mode_are_refused_together():
    with pytest.raises(ConfigError, match="group_resets needs each group's episodes to start from one seeded state"):
        make_actor_env(load_config(["experiment=grpo_pick_cube", "env.reset_mode=scripted"]))
