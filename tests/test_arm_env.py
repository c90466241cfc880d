"""`ArmEnv` on each arm's twin through its real driver code: end-effector control, the spec the learner reads without
opening the arm, cameras aligned and aged, IK failure and recovery, a dry run of a real config, and a whole
actor/learner run on the SO-101 twin with the safety layer."""

from __future__ import annotations

import numpy as np
import pytest

from hardware.arm import VirtualClock
from hardware.cameras import CameraError
from hardware.env import ArmEnv
from robo_rl.config import load_config, make_env
from robo_rl.envs import check_observation
from robo_rl.envs.spec import spec_of, static_spec


def driver_for(robot: str):
    clock = VirtualClock()
    if robot == "so101":
        from hardware.so101 import SO101Driver

        return SO101Driver(twin=True, clock=clock)
    if robot == "franka":
        from hardware.franka import FrankaDriver

        return FrankaDriver(twin=True, clock=clock)
    from hardware.ur import URDriver

    return URDriver(twin=True, clock=clock)


@pytest.mark.parametrize("robot", ["so101", "franka", "ur5e"])
def test_end_effector_steps_move_each_arm_through_its_driver_and_the_gripper_follows(robot):
    env = ArmEnv(driver_for(robot), max_ee_step_m=0.01)
    try:
        obs, info = env.reset(seed=0)
        check_observation(obs, env.observation_space)
        start = env.last_state.ee_pos.copy()
        for _ in range(8):
            obs, _, _, _, info = env.step(np.array([1.0, 0.0, -0.5, 1.0], np.float32))
        moved = env.last_state.ee_pos - start
        assert moved[0] == pytest.approx(0.08, abs=0.01) and moved[2] == pytest.approx(-0.04, abs=0.01), moved
        assert abs(moved[1]) < 0.005
        assert env.last_state.gripper > 0.9 and obs["state"][7] == pytest.approx(env.last_state.gripper)
        assert info["action_executed"][0] == pytest.approx(1.0, abs=0.1)
        assert "ik_failed" not in info and info["obs_age_ms"]["state"] >= 0.0
    finally:
        env.close()


@pytest.mark.parametrize("option", ["so101_twin", "franka", "ur5e"])
def test_the_learner_reads_the_spec_from_the_config_without_opening_the_arm(option):
    cfg = load_config(
        [
            f"env={option}",
            "hardware.dry_run=true",
            "env.twin_clock=virtual",
            "env.cameras={wrist: {_target_: hardware.cameras.OpenCVCamera, device: /dev/video9, "
            "width: 40, height: 30}}",  # a real camera: the dry run must see the twin instead
        ]
    )
    from omegaconf import OmegaConf

    told = static_spec(OmegaConf.to_container(cfg.env, resolve=True))
    env = make_env(cfg)
    try:
        assert env.driver.twin is not None  # the dry run drives the twin
        assert type(env.cameras["wrist"]).__name__ == "TwinCamera"  # and sees the twin's scene, not /dev/video9
        assert told.differences(spec_of(env)) == []
        assert told.cameras == {"wrist": (30, 40)}
    finally:
        env.close()


def test_cameras_are_aligned_to_the_arm_reading_and_say_how_old_they_are():
    env = ArmEnv(
        driver_for("so101"),
        cameras={
            "front": {"_target_": "hardware.twin_camera.TwinCamera", "width": 48, "height": 32, "fps": 30},
            "wrist": {"_target_": "hardware.cameras.FakeCamera", "width": 24, "height": 24, "fps": 60},
        },
    )
    try:
        obs, info = env.reset(seed=0)
        assert obs["images"]["front"].shape == (32, 48, 3) and obs["images"]["wrist"].shape == (24, 24, 3)
        assert obs["images"]["front"].std() > 5  # the twin's scene, rendered
        ages = info["obs_age_ms"]
        assert set(ages) == {"front", "wrist", "state"} and 0 <= ages["wrist"] < 200 and 0 <= ages["front"] < 300
        env.cameras["wrist"].mode = "frozen"  # the driver keeps handing out the same frame
        seq = -1
        with pytest.raises(CameraError, match="wrist.*frozen"):
            for _ in range(200):
                env.step(np.zeros(4, np.float32))
                seq = env.cameras["wrist"].wait_frame(after_seq=seq, timeout_s=0.5).seq
    finally:
        env.close()


def test_an_unreachable_target_holds_the_arm_then_recovers_toward_home_in_joint_space():
    env = ArmEnv(driver_for("so101"), max_ee_step_m=0.05, ik_recovery_after=3)
    try:
        env.reset(seed=0)
        infos = []
        for _ in range(12):  # straight out, far past the arm's reach
            _, _, _, _, info = env.step(np.array([1.0, 0.0, 1.0, -1.0], np.float32))
            infos.append(info)
        failed = [i for i in infos if "ik_failed" in i]
        assert failed and "off by" in failed[0]["ik_failed"]
        assert any("recovery" in i for i in infos) and env.counts["recoveries"] > 0
        home = env.model.fk(env.driver.home_joints)[0]
        assert np.linalg.norm(env.last_state.ee_pos - home) < 0.25  # held, and stepped back toward home
    finally:
        env.close()


def test_the_reach_task_rewards_getting_closer_and_ends_on_success():
    env = ArmEnv(driver_for("so101"), reach={"low": [0.2, -0.05, 0.12], "high": [0.22, 0.05, 0.14]})
    try:
        obs, _ = env.reset(seed=3)
        rewards, terminated = [], False
        for _ in range(40):
            delta = obs["state"][-3:]  # the target minus the tool, m
            obs, reward, terminated, _, info = env.step(np.array([*np.clip(delta / 0.02, -1, 1), -1], np.float32))
            rewards.append(reward)
            if terminated:
                break
        assert terminated and info["success"] and info["ended_by"] == "env"
        assert len(rewards) >= 3 and rewards[-1] > rewards[1] > rewards[0]
    finally:
        env.close()


def test_a_discrete_gripper_opens_closes_and_keeps_its_command_between_the_thresholds():
    env = ArmEnv(driver_for("so101"), gripper="discrete")
    try:
        env.reset(seed=0)
        commands = []
        for value in (0.3, 0.9, -0.4, -0.6, 0.2):
            env.step(np.array([0.0, 0.0, 0.0, value], np.float32))
            commands.append(env.gripper_command)
        assert commands == [0.0, 1.0, 1.0, 0.0, 0.0]  # stay (open), close, stay (closed), open, stay (open)
    finally:
        env.close()


def test_a_driver_given_built_cannot_be_dry_run_and_a_bad_gripper_mode_is_refused():
    driver = driver_for("franka")
    with pytest.raises(ValueError, match="gripper"):
        ArmEnv(driver, gripper="sometimes")
    from hardware.franka import FrankaDriver

    with pytest.raises(ValueError, match="dry_run"):
        ArmEnv(FrankaDriver(franky_module=object()), dry_run=True)


def test_a_whole_actor_learner_run_on_a_dry_run_of_the_so101_config_with_the_safety_layer(tmp_path):
    from robo_rl.runs import read_metrics
    from tests.test_pipeline import SMALL_NETS, run_pair, toy_config

    cfg = toy_config(
        tmp_path,
        "env=so101",
        "hardware.dry_run=true",
        "env.twin_clock=virtual",  # the real config
        "env.reach={low: [0.16, -0.08, 0.08], high: [0.24, 0.08, 0.16]}",
        "env.max_episode_steps=50",
        "safety=default",
        "demos.num_episodes=0",
        "safety.workspace={low: [0.12, -0.06, 0.06], high: [0.24, 0.06, 0.16]}",
        "env.max_ee_step_m=0.03",
        "train.total_env_steps=300",
        "train.learning_starts=100",
        "actor.throttle_to_learner=false",
        "train.utd=0.25",  # the learner's updates are not what this checks: unthrottled, they would spin all run
        *SMALL_NETS,
    )
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done" and learner.env_steps >= 300 and learner.updates > 0
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    episodes = [m for m in metrics if m["kind"] == "episode"]
    assert len(episodes) >= 5 and all(e["length"] <= 50 for e in episodes)
    assert not any("instruction" in e for e in episodes)  # a task without instructions names none
    stats = [m["actor_stats"]["actor-0"] for m in metrics if m.get("actor_stats", {}).get("actor-0")]
    # the end carries the final figures: a heartbeat follows each episode's steps, however fast the run goes
    assert metrics[-1]["kind"] == "end" and stats[-1] is metrics[-1]["actor_stats"]["actor-0"]
    assert stats[-1]["safety_steps"] > 100  # the safety layer's counts reach the learner's metrics
    assert stats[-1]["safety_workspace"] > 0  # a random policy hits the box


def test_every_heartbeat_carries_the_safety_counts_even_when_the_timing_copy_races_the_control_loop():
    import collections
    from types import SimpleNamespace

    from hardware.safety import SafetyWrapper
    from robo_rl.actor import Actor
    from robo_rl.loop_timing import LoopClock

    class Racing(collections.deque):  # what np.array sees when the control loop appends during the copy
        def __iter__(self):
            raise RuntimeError("deque mutated during iteration")

    safety = SafetyWrapper.__new__(SafetyWrapper)
    safety.counts, safety.stopped = collections.Counter(steps=120, workspace=7), None
    clock = LoopClock(10)
    clock.rows, clock.decide_ms = Racing([(0.1,) + (0.0,) * 5] * 2), Racing([1.0, 2.0])
    actor = SimpleNamespace(
        policy_version=3,
        refused_steps=0,
        clock=clock,
        sent_records=0,
        env=SimpleNamespace(control_hz=10),
        acting=SimpleNamespace(chunk_stats=dict),  # a policy without chunks
        reward=None,
        resets=[],  # no env.reset_mode
        safety=safety,
        human=None,
    )
    stats = Actor.loop_stats(actor)
    assert stats["safety_steps"] == 120 and stats["safety_workspace"] == 7 and stats["safety_stopped"] == 0
    assert "period_ms_p50" not in stats and "inference_ms_p50" not in stats  # skipped for this beat only
    clock.rows = collections.deque([(0.1, 0.001, 0.05, 0.0, 0.0, 0.04)] * 2)  # a period's length, then its parts
    clock.decide_ms = collections.deque([1.0, 2.0])
    stats = Actor.loop_stats(actor)
    assert abs(stats["period_ms_p50"] - 100.0) < 1e-6 and stats["inference_ms_p99"] > 1.0
    assert abs(stats["late_env_ms"] - 50.0) < 1e-6 and abs(stats["env_cpu_ms_p50"] - 40.0) < 1e-6
    assert stats["safety_steps"] == 120


def test_several_envs_in_one_actor_are_refused_for_a_robot_even_on_its_twin(tmp_path):
    from robo_rl.actor import Actor
    from robo_rl.config import ConfigError
    from tests.test_pipeline import toy_config

    assert ArmEnv.drives_robot, "the env says it drives a robot: the core never looks at where a class is defined"
    cfg = toy_config(tmp_path, "env=so101", "hardware.dry_run=true", "env.twin_clock=virtual", "actor.num_envs=2")
    with pytest.raises(ConfigError, match="run one actor per arm"):
        Actor(cfg, progress=False)
