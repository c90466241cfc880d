"""Human in the loop: the env spec the learner reads, the actor's wrapper chain, arbitration between the policy and
teleop devices, the simulated human, interventions in the replay, and `robo-rl record`."""

import json
import logging
import threading
import time

import numpy as np
import pytest

from robo_rl.config import ConfigError, load_config
from robo_rl.envs.spec import SPEC_FILE, EnvSpec, learner_spec, read_spec, spec_of, static_spec, write_spec
from robo_rl.envs.wrappers import make_actor_env
from robo_rl.teleop.base import FakeDevice
from robo_rl.teleop.intervention import InterventionWrapper
from sim.point_reach import PointReachEnv
from tests.test_pipeline import run_pair, toy_config
from tests.test_teleop_devices import xvfb  # noqa: F401 (a fixture)

POLICY = np.array([0.5, 0.5], np.float32)


def wrapped(*devices, **kw):
    env = InterventionWrapper(PointReachEnv(max_episode_steps=50), list(devices), **kw)
    env.reset(seed=0)
    return env


# --- the env spec --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"state": "proprio", "cameras": ["front", "wrist"], "image_size": 32}])
def test_the_pick_task_tells_its_spec_from_its_config_exactly_as_the_built_env_has_it(kwargs):
    from sim.pick_cube import PickCubeEnv

    env = PickCubeEnv(**kwargs)
    try:
        assert PickCubeEnv.spec_from_config(**kwargs) == spec_of(env)
    finally:
        env.close()
    assert spec_of(PointReachEnv(camera=True)) == PointReachEnv.spec_from_config(camera=True)


def test_the_learner_takes_the_spec_from_the_run_folder_a_file_or_an_actor_that_writes_it_later(tmp_path):
    cfg = load_config(["env=robosuite_lift"])  # RobosuiteEnv has no spec_from_config
    assert static_spec({"_target_": "sim.robosuite_tasks.RobosuiteEnv"}) is None
    with pytest.raises(FileNotFoundError, match="start an actor for this run"):
        learner_spec(cfg, tmp_path, wait_s=0.2)
    spec = EnvSpec(5, 3, {"cam": (8, 8)}, control_hz=20.0)
    writer = threading.Timer(0.3, write_spec, (spec, tmp_path))  # an actor starting after the learner
    writer.start()
    assert learner_spec(cfg, tmp_path, wait_s=10) == spec
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "mine.json").write_text(json.dumps(spec.to_json()))
    cfg2 = load_config(["env=robosuite_lift", f"env_spec={other / 'mine.json'}"])
    assert learner_spec(cfg2, None) == spec
    # a spec file that is not one is refused by name
    (other / "bad.json").write_text('{"version": 1, "state_dim": "x"}')
    with pytest.raises(ValueError, match="bad.json: malformed env spec"):
        read_spec(other / "bad.json")


def test_an_actor_whose_env_differs_from_the_runs_spec_is_refused_naming_the_difference(tmp_path):
    write_spec(EnvSpec(4, 3, {}), tmp_path)  # a run made for another task
    with pytest.raises(ValueError, match="action_dim 3 vs 2"):
        write_spec(spec_of(PointReachEnv()), tmp_path)
    from robo_rl.actor import Actor

    cfg = toy_config(tmp_path, f"run_dir={tmp_path}")
    with pytest.raises(ConfigError, match="does not match the run's env spec"):
        Actor(cfg, progress=False)


def test_the_learner_builds_without_opening_the_env(tmp_path):
    """An env that cannot be built (a robot that is not there) does not stop the learner: it reads the spec."""
    from robo_rl.learner import Learner

    write_spec(spec_of(PointReachEnv()), tmp_path)
    cfg = toy_config(tmp_path, "env._target_=tests.test_human.NoHardware", "demos.num_episodes=0")
    learner = Learner(cfg, tmp_path, progress=False)
    try:
        assert learner.fields["state"][0] == (4,) and learner.fields["action_executed"][0] == (2,)
    finally:
        learner.close()


def test_a_learner_started_alone_takes_the_spec_from_an_actors_hello_and_refuses_an_actor_with_another_env(tmp_path):
    """A robot's actor on another machine: no run-folder file, no env_spec=, an env that cannot tell its spaces from
    its config. The learner waits, takes the spec from the first hello, keeps it, and refuses a mismatching actor."""
    from robo_rl.config import config_hash
    from robo_rl.learner import Learner
    from robo_rl.transport.actor_link import ActorLink
    from robo_rl.transport.link import TransportError

    cfg = toy_config(tmp_path, "env._target_=tests.test_human.UnknownRobot", "demos.num_episodes=0")
    t = cfg.transport
    spec = spec_of(PointReachEnv())

    def actor(actor_id: str, spec_json: dict, out: list):
        link = ActorLink("127.0.0.1", t.data_port, t.weights_port, t.ctrl_port, actor_id)
        link.env_spec = json.dumps(spec_json)
        try:
            link.hello(config_hash(cfg), 20)
            out.append("welcome")
        except TransportError as e:
            out.append(str(e))
        finally:
            link.close(linger_s=0)

    first: list = []
    thread = threading.Thread(target=actor, args=("arm-0", spec.to_json(), first))
    thread.start()
    learner = Learner(cfg, tmp_path, progress=False)  # waits for the hello
    thread.join(30)
    try:
        assert first == ["welcome"] and read_spec(tmp_path / SPEC_FILE) == spec  # kept for resume
        assert learner.fields["action_executed"][0] == (2,)
        other: list = []
        wrong = {**spec.to_json(), "action_dim": 3}
        thread = threading.Thread(target=actor, args=("arm-1", wrong, other))
        thread.start()
        deadline = time.monotonic() + 20
        while thread.is_alive() and time.monotonic() < deadline:
            learner.link.poll(timeout_ms=50)
        thread.join(5)
        assert len(other) == 1 and "does not match the learner's spec: action_dim 2 vs 3" in other[0], other
    finally:
        learner.close()


class NoHardware(PointReachEnv):
    def __init__(self, **kwargs):
        raise RuntimeError("the learner opened the env")


class UnknownRobot(NoHardware):
    spec_from_config = None  # a driver that cannot tell its spaces before it connects


# --- the wrapper chain ---------------------------------------------------------------------------------------------
def test_the_actor_env_is_the_task_inside_the_configured_wrappers_and_none_is_skipped(tmp_path):
    env = make_actor_env(load_config(["env=point_reach"]))  # human=none: the bare env
    assert isinstance(env, PointReachEnv)
    env = make_actor_env(load_config(["env=point_reach", "human=sim"]))
    try:
        assert isinstance(env, InterventionWrapper) and env.devices[0].name == "sim_human"
        assert env.control_hz == 10.0 and env.action_names == ("x", "y")  # the env's attributes pass through
    finally:
        env.close()
    with pytest.raises(
        ConfigError, match=r"no device class 'KeybordDevice'.*did you mean 'hardware.teleop.keyboard.KeyboardDevice'"
    ):
        make_actor_env(
            load_config(
                [
                    "env=point_reach",
                    "human=keyboard",
                    "human.devices=[{_target_: hardware.teleop.keyboard.KeybordDevice}]",
                ]
            )
        )
    with pytest.raises(ConfigError, match="actor.wrappers names 'guard'"):
        make_actor_env(load_config(["env=point_reach", "actor.wrappers=[guard]"]))


# --- arbitration ---------------------------------------------------------------------------------------------------
def test_a_takeover_changes_what_the_env_executes_from_the_next_step_and_keeps_the_policys_proposal():
    pad = FakeDevice("pad")
    env = wrapped(pad, takeover="explicit")
    _, _, _, _, info = env.step(POLICY)
    assert not info["intervention"] and np.allclose(info["action_executed"], POLICY)
    pad.push(["intervention_toggle"], motion=[-1, 0.25, 0, 0, 0, 0])
    _, _, _, _, info = env.step(POLICY)
    assert info["intervention"] and info["intervention_device"] == "pad"
    assert np.allclose(info["action_executed"], [-1, 0.25]) and np.allclose(info["action_policy"], POLICY)


def test_handing_control_back_ramps_without_a_jump():
    pad = FakeDevice("pad")
    env = wrapped(pad, takeover="explicit", handback_steps=3)
    pad.push(["intervention_toggle"], motion=[-1, -1, 0, 0, 0, 0])
    env.step(POLICY)
    pad.push(["intervention_toggle"], motion=np.zeros(6))
    executed = [env.step(POLICY)[4]["action_executed"] for _ in range(5)]
    jumps = np.abs(np.diff(np.array([[-1, -1], *executed]), axis=0)).max(axis=1)
    assert jumps.max() <= 1.5 / 4 + 1e-6, jumps  # 1.5 from -1 to 0.5, in 4 equal parts
    assert np.allclose(executed[-1], POLICY) and np.allclose(executed[3], POLICY)


@pytest.mark.parametrize(
    "event, terminated, truncated, ended_by",
    [
        ("success", True, False, "human_success"),
        ("failure", True, False, "human_failure"),
        ("rerecord_episode", False, True, "human_rerecord"),
        ("terminate_episode", False, True, "human_abort"),
        ("estop", False, True, "estop"),
    ],
)
def test_labels_end_the_episode_with_the_right_flags(event, terminated, truncated, ended_by):
    pad = FakeDevice("pad")
    env = wrapped(pad)
    env.step(POLICY)
    pad.push([event])
    _, reward, term, trunc, info = env.step(POLICY)
    assert (term, trunc, info["ended_by"]) == (terminated, truncated, ended_by)
    assert (reward == 1.0) == (event == "success") and info["success"] == (event == "success")
    assert (env.estopped == "pad") == (event == "estop")
    assert np.allclose(env._last_executed, 0.0) == (event == "estop")  # the e-stopped step commands no motion
    _, _, term, trunc, _ = env.step(POLICY)  # a label counts once
    assert not (term or trunc)


def test_two_devices_claiming_control_are_settled_by_priority_and_logged(caplog):
    pad, keys = FakeDevice("pad"), FakeDevice("keys")
    env = wrapped(pad, keys, priority=["keys", "pad"], takeover="implicit")
    pad.push(motion=[1, 0, 0, 0, 0, 0])
    keys.push(motion=[0, -1, 0, 0, 0, 0])
    with caplog.at_level(logging.WARNING):
        info = env.step(POLICY)[4]
    assert info["intervention_device"] == "keys" and np.allclose(info["action_executed"], [0, -1])
    assert "claim control at once: keys has priority" in caplog.text
    keys.push(motion=np.zeros(6))  # below the threshold: the other device has it
    assert env.step(POLICY)[4]["intervention_device"] == "pad"


def test_a_device_unplugged_mid_episode_leaves_the_policy_in_control(caplog):
    pad = FakeDevice("pad")
    env = wrapped(pad, takeover="explicit", handback_steps=0)
    pad.push(["intervention_toggle"], motion=[-1, 0, 0, 0, 0, 0])
    assert env.step(POLICY)[4]["intervention"]
    pad.unplug()
    with caplog.at_level(logging.WARNING):
        info = env.step(POLICY)[4]
    assert not info["intervention"] and np.allclose(info["action_executed"], POLICY)
    assert "pad disconnected: the policy takes over" in caplog.text and env.stats()["device_dropouts"] == 1


def test_a_missing_device_is_named_and_the_policy_keeps_control(caplog):
    with caplog.at_level(logging.ERROR):
        env = wrapped(FakeDevice("spacemouse", fail_on_open=True))
    assert "spacemouse: not plugged in; the policy keeps control" in caplog.text
    assert not env.devices and np.allclose(env.step(POLICY)[4]["action_executed"], POLICY)


def test_a_motion_device_that_does_not_command_the_gripper_keeps_its_last_command():
    from sim.pick_cube import PickCubeEnv

    pad = FakeDevice("pad")
    env = InterventionWrapper(PickCubeEnv(), [pad], takeover="explicit")
    try:
        env.reset(seed=0)
        env.step(np.array([0, 0, 0, 1.0], np.float32))  # the policy closed the gripper
        pad.push(["intervention_toggle"], motion=[0, 0, 1, 0, 0, 0])
        info = env.step(np.array([0, 0, 0, -1.0], np.float32))[4]
        assert info["intervention"] and np.allclose(info["action_executed"], [0, 0, 1, 1.0])
        env.reset(seed=1)  # taking over at the first step of an episode: the gripper stays open
        info = env.step(np.array([0, 0, 0, 1.0], np.float32))[4]
        assert info["intervention"] and np.allclose(info["action_executed"], [0, 0, 1, -1.0])
    finally:
        env.close()


# --- the simulated human -------------------------------------------------------------------------------------------
def sim_human_env(**kw):
    from sim.point_reach import PointReachExpert  # noqa: F401 (the expert the config names)

    cfg = {
        "_target_": "sim.simulated_human.SimulatedHuman",
        "expert": {"_target_": "sim.point_reach.PointReachExpert"},
        "seed": 0,
        **kw,
    }
    env = InterventionWrapper(PointReachEnv(max_episode_steps=40), [cfg])
    return env


def run_episode(env, seed, policy=lambda: np.zeros(2, np.float32)):
    env.reset(seed=seed)
    flags = []
    while True:
        _, _, term, trunc, info = env.step(policy())
        flags.append(info["intervention"])
        if term or trunc:
            return flags, info


def test_the_simulated_human_takes_over_a_drifting_policy_after_its_reaction_delay_and_rescues_it():
    env = sim_human_env(patience=3, reaction_delay=2, hold_steps=40)
    flags, info = run_episode(env, seed=1)  # a policy that never moves
    first = flags.index(True)
    assert first == 3 + 2 - 1, flags[:8]  # drift seen for 3 steps, then 2 steps of reaction
    assert info["success"] and info["interventions"][0][0] == first
    alone = sim_human_env(takeover_prob=0.0)
    flags, info = run_episode(alone, seed=1)
    assert not any(flags) and not info["success"]


def test_the_simulated_human_intervenes_less_and_less_often():
    env = sim_human_env(patience=1, reaction_delay=0, hold_steps=2, takeover_prob=1.0, decay=0.5)
    steps = [sum(run_episode(env, seed=s)[0]) for s in range(8)]
    assert steps[0] > 0 and sum(steps[4:]) < sum(steps[:4]), steps


def test_on_a_discrete_gripper_the_simulated_human_reads_stay_as_the_command_the_gripper_holds():
    from sim.experts import PickCubeExpert
    from sim.pick_cube import PickCubeEnv

    def episode(stay_when_held):
        base = PickCubeEnv(gripper="discrete")
        spec = {
            "_target_": "sim.simulated_human.SimulatedHuman",
            "expert": {"_target_": "sim.experts.PickCubeExpert"},
            "seed": 0,
            "patience": 1,
            "reaction_delay": 0,
        }
        env, mine = InterventionWrapper(base, [spec]), PickCubeExpert(base)
        obs, _ = env.reset(seed=0)
        mine.reset()
        flags = []
        for _ in range(60):
            action = mine.act(obs)
            # 'stay' while the gripper holds the expert's command / 'stay' instead of ever closing
            stay = action[3] == base._gripper_cmd if stay_when_held else action[3] > 0
            action[3] = 0.0 if stay else action[3]
            obs, _, term, trunc, info = env.step(action)
            flags.append(info["intervention"])
            if term or trunc:
                break
        return flags, info

    flags, info = episode(stay_when_held=True)  # the expert's own moves, 'stay' wherever it holds its command
    assert info["success"] and not any(flags)
    flags, _ = episode(stay_when_held=False)  # never closes: it drifts, and the human takes over
    assert any(flags)


# --- interventions through actor, link and learner -----------------------------------------------------------------
def test_intervention_steps_reach_the_interventions_partition_and_are_sampled_as_prior_data(tmp_path):
    # 200 steps (100 updates): about 57 human steps, and a human share of the batch near 0.45 against 0.25 online
    cfg = toy_config(tmp_path, "human=sim", "train.total_env_steps=200", "human.devices.0.hold_steps=3")
    (tmp_path / "run").mkdir()
    learner, reason = run_pair(cfg, tmp_path / "run")
    assert reason == "done"
    online = learner.replay.online
    rows = online.intervention_rows()
    assert len(rows) > 20, "the simulated human took over a random-ish policy"
    assert json.loads((tmp_path / "run" / SPEC_FILE).read_text())["action_dim"] == 2  # written by the actor
    from robo_rl.runs import read_metrics

    episodes = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["kind"] == "episode"]
    logged = sum(m["intervention_steps"] for m in episodes)  # finished episodes; the last may still run
    assert 0 < logged <= len(rows) and len(rows) - logged < 20
    stats = [m["actor_stats"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m.get("actor_stats")]
    assert any(s.get("actor-0", {}).get("human_intervention_steps", 0) > 0 for s in stats)
    batch = learner.replay.sample(512, np.random.default_rng(0), 0.99, 1, 1, ())
    human_share = float(np.mean(batch["intervention"]))
    online_share = len(rows) / online.size
    assert human_share > online_share, (human_share, online_share)  # interventions join the prior half


# --- recording with a device ---------------------------------------------------------------------------------------
class ScriptedPerson(FakeDevice):
    """Drives point_reach to its goal; labels episodes by a script: one re-record, one failure, then successes."""

    def __init__(self, script):
        super().__init__("person")
        self.script, self.episode, self.t = list(script), -1, 0

    def episode_start(self):
        self.episode, self.t = self.episode + 1, 0

    def observe(self, obs, policy_action):
        self.t += 1
        state = obs["state"]
        self.push(motion=np.r_[np.clip((state[2:] - state[:2]) / 0.2, -1, 1), np.zeros(4)])
        plan = self.script[self.episode] if self.episode < len(self.script) else "goal"
        if plan != "goal" and self.t == 3:
            self.push([plan])


def test_recording_keeps_successes_re_records_on_request_and_writes_each_episode_as_it_goes(tmp_path):
    from robo_rl.commands.record import record_episodes
    from robo_rl.data.datasets.io import load_episodes
    from robo_rl.data.schema import fields_for_env
    from robo_rl.data.storage import SegmentStore

    env = InterventionWrapper(
        PointReachEnv(max_episode_steps=30),
        [ScriptedPerson(["rerecord_episode", "failure"])],
        takeover="implicit",
        implicit_threshold=0.0,
    )
    store = SegmentStore(tmp_path / "demos", fields_for_env(env), partition="demos")
    counts = record_episodes(env, store, 3, keep="success", realtime=False, progress=False, say=lambda s: None)
    assert counts["kept"] == 3 and counts["rerecorded"] == 1 and counts["discarded"] == 1 and counts["attempts"] == 5
    episodes = load_episodes(tmp_path / "demos", progress=False)
    assert len(episodes) == 3 and all(e.success for e in episodes) and {e.partition for e in episodes} == {"demos"}
    assert all(e.records["intervention"][1:].all() for e in episodes)  # every step the person's


def test_robo_rl_record_with_the_simulated_human_writes_a_store_training_can_use(tmp_path, capsys):
    from robo_rl.cli import main
    from robo_rl.data.datasets.io import load_episodes

    dst = tmp_path / "demos"
    code = main(
        [
            "record",
            str(dst),
            "env=point_reach",
            "human=sim",
            "episodes=2",
            "actor.realtime=false",
            "human.devices.0.patience=1",
            "human.devices.0.reaction_delay=0",
            "human.devices.0.hold_steps=100",
            "logger.progress=false",
        ]
    )
    assert code == 0, capsys.readouterr()
    assert "kept 2 episodes" in capsys.readouterr().out
    assert len(load_episodes(dst, progress=False)) == 2
    assert main(["record", str(dst), "env=point_reach", "human=sim", "episodes=1"]) == 2  # not over existing data
    assert "exists and is not empty" in capsys.readouterr().err
    assert main(["record", str(tmp_path / "x"), "env=point_reach", "human=none"]) == 2
    assert "needs a device" in capsys.readouterr().err


def test_device_latency_is_measured_from_the_input_to_the_step_that_executes_it():
    """Each figure lies between the time from the input's end to the step's start and the time from the input's start
    to the step's end; a wrong origin (the reset, the previous step, the device's start) falls outside."""
    pad = FakeDevice("pad")
    env = wrapped(pad, takeover="explicit")
    env.step(POLICY)  # no input yet: nothing to measure
    assert not env.latency_ms
    bounds = []
    for events, motion, wait_s in ((["intervention_toggle"], [1, 0, 0, 0, 0, 0], 0.0), ([], [0, 1, 0, 0, 0, 0], 0.06)):
        time.sleep(0.08)  # the origin a wrong measure would take is this far before the input
        before = time.monotonic()
        pad.push(events, motion=motion)
        pushed = time.monotonic()
        time.sleep(wait_s)
        stepping = time.monotonic()
        env.step(POLICY)
        bounds.append(((stepping - pushed) * 1e3, (time.monotonic() - before) * 1e3))
        env.step(POLICY)  # the same input: not counted twice
    assert len(env.latency_ms) == 2
    for measured, (low, high) in zip(env.latency_ms, bounds, strict=True):
        assert low <= measured <= high, (measured, low, high)
    assert env.stats()["device_latency_ms_p50"] == pytest.approx(np.median(env.latency_ms))


def test_pause_holds_the_actor_until_pressed_again_and_e_stop_stops_it():
    pad = FakeDevice("pad")
    env = wrapped(pad)
    pad.push(["pause"])
    env.step(POLICY)
    assert env.paused
    assert env.poll() == set() and env.paused  # nothing pressed: still paused
    pad.push(["pause"])
    assert env.poll() == {"pause"} and not env.paused
    pad.push(["estop"])
    env.poll()
    assert env.estopped == "pad"


def test_recording_writes_a_lerobot_dataset_when_asked(tmp_path, capsys):
    from robo_rl.cli import main
    from robo_rl.data.datasets.io import detect_format, load_episodes

    dst = tmp_path / "lerobot"
    code = main(
        [
            "record",
            str(dst),
            "format=lerobot",
            "keep=all",
            "env=point_reach",
            "human=sim",
            "episodes=2",
            "actor.realtime=false",
            "human.devices.0.patience=1",
            "human.devices.0.reaction_delay=0",
            "human.devices.0.hold_steps=100",
            "logger.progress=false",
        ]
    )
    assert code == 0, capsys.readouterr()
    assert detect_format(dst) == "lerobot"
    episodes = load_episodes(dst, progress=False)
    assert len(episodes) == 2 and all(e.records["intervention"][1:].all() for e in episodes)


def test_recording_with_the_keyboard_for_real(tmp_path, xvfb):  # noqa: F811 (the fixture imported above)
    """`robo-rl record` on the real X keyboard (Xvfb + xdotool): hold a key to move, Return labels a success."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DISPLAY": xvfb}
    dst = tmp_path / "demos"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "robo_rl.cli",
            "record",
            str(dst),
            "human=keyboard",
            "keep=all",
            "episodes=1",
            "env=point_reach",
            "env.max_episode_steps=200",
            "logger.progress=false",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "recording" not in line:  # the device is open once this is printed
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, "record did not start"

        def xdotool(*args):
            time.sleep(0.05)
            subprocess.run(["xdotool", *args], env=env, check=True, timeout=10)

        xdotool("key", "space")  # take over (the keyboard's takeover is explicit)
        xdotool("keydown", "Up")
        time.sleep(0.6)  # about 6 steps at 10 Hz, +x each
        xdotool("keyup", "Up")
        xdotool("key", "Return")  # success: the episode ends and is kept
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    from robo_rl.data.datasets.io import load_episodes

    (episode,) = load_episodes(dst, progress=False)
    actions = episode.records["action_executed"][1:]
    assert episode.records["intervention"][1:].sum() >= 3 and (actions[:, 0] == 1.0).sum() >= 3
    assert episode.success and episode.records["ended_by"][-1] == 3  # human_success


def test_an_actor_started_before_its_learner_made_the_run_folder_writes_the_spec_there(tmp_path):
    run = tmp_path / "not_yet"
    assert write_spec(spec_of(PointReachEnv()), run) == run / SPEC_FILE and read_spec(run / SPEC_FILE).action_dim == 2
