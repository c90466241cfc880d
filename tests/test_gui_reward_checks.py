"""Live reward-model checks and the reset state on the page (issue 52): a real actor and learner on point_reach with
its 8x8 camera scored by a small success classifier, the GUI app on loopback, Debian's chromium driven by Playwright
(as tests/test_gui.py); the threshold and the marks from the page, a retrained model swapped into a running actor, an
actor waiting for a person in the page's queue, and the bad input each step refuses."""

# ruff: noqa: F811 - the fixtures imported from tests/test_gui.py are the tests' parameters here

import json
import os
import threading
import time

import numpy as np
import pytest

from robo_rl.config import save_config
from robo_rl.data.datasets import Episode
from robo_rl.data.datasets.io import load_episodes, save_store
from robo_rl.rewards.classifier import SuccessClassifier
from robo_rl.rewards.live import current_model, load_marks, mark_files, save_mark
from robo_rl.transport.link import free_ports
from tests.test_gui import (  # noqa: F401 - browser, chromium, gui_run: fixtures
    _Human,
    browser,
    chromium,
    gui_run,
    open_page,
    serve,
)
from tests.test_pipeline import toy_config
from tests.waiting import wait_until

SMALL = {"channels": 4, "features": 8, "hidden": 16, "resize": None, "kernels": [3], "strides": [2]}
ROW = '.actor[data-actor="actor-0"]'


def small_classifier(folder, threshold=0.5):
    """An untrained classifier for point_reach's 8x8 camera: its success_prob sits near 0.5 on every frame, so a
    threshold of 0.05 declares success after the debounce and one of 0.95 never does."""
    import torch

    torch.manual_seed(0)
    model = SuccessClassifier(("top",), image_sizes={"top": [8, 8]}, threshold=threshold, **SMALL)
    return model.save(folder)


def reward_run(gui_run, tmp_path, threshold=0.95):
    model = small_classifier(tmp_path / "model")
    run_dir = tmp_path / "run0" / "run"  # the learner's run folder (tests/test_gui.py's GuiRun makes it)
    run = gui_run(
        "reward=model",
        f"reward.model={model}",
        f"reward.shaper.success_threshold={threshold}",
        "reward.shaper.debounce_k=2",
        "reward.asynchronous=false",
        "demos.num_episodes=0",
        f"run_dir={run_dir}",
        "env.max_episode_steps=20",  # 2 s episodes at point_reach's 10 Hz
    )
    save_config(run.cfg, run_dir / "config.yaml")  # as `robo-rl train` does: where `reward retrain` reads the model
    return run, run_dir


def episodes_ended_by(run, why):
    return [e for e in run.episodes() if e["ended_by"] == why]


# --- the page: threshold and marks ----------------------------------------------------------------------------------
def test_a_threshold_from_the_page_changes_the_actors_success_decision_and_marks_save_labelled_frames(
    gui_run, browser, tmp_path
):
    run, run_dir = reward_run(gui_run, tmp_path)
    page = open_page(browser, run, "hana")
    row = page.locator(ROW)
    model_line = row.locator(".reward-model")
    wait_until(lambda: "threshold 0.95" in model_line.inner_text(), what="the reward panel with its threshold")
    assert "debounce 2" in model_line.inner_text() and "v0" in model_line.inner_text()
    wait_until(lambda: len(run.episodes()) >= 1, timeout_s=60, what="a first episode")
    assert not episodes_ended_by(run, "reward_success"), "at 0.95 the untrained model declares no success"

    # out of range: refused in one line, the actor's threshold unchanged
    row.locator(".threshold-input").fill("1.5")
    row.locator(".threshold-set").click()
    row.page.locator("#messages .refused").first.wait_for(timeout=15000)
    assert "out of range" in page.locator("#messages").inner_text()
    assert run.actor.reward.threshold == pytest.approx(0.95)

    # 0.05 reaches the RewardWrapper (between steps), and from then on episodes end as the model's successes
    row.locator(".threshold-input").fill("0.05")
    row.locator(".threshold-set").click()
    wait_until(lambda: run.actor.reward.threshold == pytest.approx(0.05), what="the new threshold on the actor")
    wait_until(lambda: episodes_ended_by(run, "reward_success"), timeout_s=30, what="a success by the new threshold")
    stats = run.actor.reward.stats()  # the heartbeat's (the run's metrics): to what, how often, when
    assert stats["reward_threshold"] == pytest.approx(0.05) and stats["reward_threshold_changes"] == 1
    assert time.time() - stats["reward_threshold_changed_at"] < 120
    wait_until(lambda: "threshold 0.05" in model_line.inner_text(), what="the page to show the new threshold")

    # one key marks a false success, a button a missed one: the actor's last frames saved with that label
    page.locator("body").click(position={"x": 5, "y": 5})  # focus on the page, not the threshold input
    row.locator(".mode").click()  # this actor selected
    page.keyboard.press("f")
    wait_until(lambda: len(mark_files(run_dir)) == 1, what="the false-success mark on disk")
    row.locator('button.mark[data-label="missed_success"]').click()
    wait_until(lambda: len(mark_files(run_dir)) == 2, what="the missed-success mark on disk")
    frames, labels = load_marks(run_dir, ["top"])  # the classifier's human_labelled input
    by_file = {p.name.rsplit("_", 2)[-2] + "_" + p.name.rsplit("_", 2)[-1]: p for p in mark_files(run_dir)}
    assert set(by_file) == {"false_success.npz", "missed_success.npz"}
    with np.load(by_file["false_success.npz"]) as z:
        assert set(z["label"]) == {0.0} and z["image/top"].shape[1:] == (8, 8, 3) and 1 <= len(z["label"]) <= 8
        assert json.loads(str(z["meta"]))["actor"] == "actor-0"
    with np.load(by_file["missed_success.npz"]) as z:
        assert set(z["label"]) == {1.0}
    assert frames["top"].shape == (len(labels), 8, 8, 3) and set(labels) == {0.0, 1.0}
    wait_until(lambda: "marks 2" in model_line.inner_text(), what="the page to count the marks")
    assert page.js_errors == []


# --- a retrained model, swapped into the running actor --------------------------------------------------------------
def _store(folder, n=10):
    """Episodes of 8x8 frames for the retrain: successful ones end on bright frames (flagged), failed ones stay dark."""
    rng = np.random.default_rng(0)
    episodes = []
    for i in range(n):
        success = i % 2 == 0
        frames = rng.integers(0, 60, (9, 8, 8, 3)).astype(np.uint8)
        flags = np.zeros(9, bool)
        if success:
            frames[-3:] += 150
            flags[-3:] = True
        records = {
            "image/top": frames,
            "success": flags,
            "reward": flags.astype(np.float32),
            "step": np.arange(9, dtype=np.int32),
            "episode_id": np.full(9, i, np.int64),
            "ended_by": np.zeros(9, np.int8),
            "intervention": np.zeros(9, bool),
        }
        episodes.append(Episode(records))
    save_store(episodes, folder, partition="demos", progress=False)
    return folder


def test_a_retrained_model_is_swapped_into_the_running_actor_and_later_records_carry_its_version(gui_run, tmp_path):
    import torch

    from robo_rl.commands.reward import cmd_reward

    run, run_dir = reward_run(gui_run, tmp_path)
    data = _store(tmp_path / "data")
    save_mark(run_dir, "actor-0", "false_success", {"top": np.full((3, 8, 8, 3), 200, np.uint8)}, {"step": 1})
    wait_until(lambda: len(run.episodes()) >= 1, timeout_s=60, what="a first episode scored by v0")
    threads = torch.get_num_threads()
    retrain = ["retrain", str(run_dir), f"data={data}", "epochs=1", "nice=0", f"threads={threads + 1}"]
    assert cmd_reward(retrain) == 0  # nice=0: this test's own worker
    version, folder = current_model(run_dir)
    report = json.loads((folder / "train_report.json").read_text())
    assert version == 1 and report["marks"] == 1 and report["human_frames"] == 3
    assert report["nice"] == os.nice(0)  # nice=0 left the process's priority as it was
    # the threads asked for (one by default, beside the actors' loops); the caller's own count given back afterwards
    assert report["threads"] == threads + 1 and torch.get_num_threads() == threads
    wait_until(lambda: run.actor.reward.model_version == 1, timeout_s=30, what="v1 swapped into the actor")
    swapped_at = run.episodes()[-1]["episode"] if run.episodes() else 0
    wait_until(lambda: len(run.episodes()) >= swapped_at + 2, timeout_s=60, what="episodes scored by v1")
    assert run.actor_thread.is_alive(), "the run went on through the swap"
    assert run.actor.reward.stats()["reward_model_swaps"] == 1
    run.close()
    stored = load_episodes(run_dir, progress=False)  # the learner's replay, as stored
    versions = np.concatenate([e.records["extra/reward_model_version"][1:] for e in stored])
    assert set(versions) == {0, 1}, "records before the swap say v0, after it v1"
    first_v1 = int(np.argmax(versions == 1))
    assert (versions[first_v1:] == 1).all(), "once swapped, every later record is v1's"


# --- the reset state and the human-call queue -----------------------------------------------------------------------
def test_the_page_shows_an_actor_waiting_for_a_person_and_why_and_refuses_checks_without_a_reward_model(
    tmp_path, browser
):
    from robo_rl.gui.bridge import GuiBridge
    from robo_rl.gui.server import make_app
    from robo_rl.gui.web_device import WebDevice

    http_port, zmq_port = free_ports(2)
    cfg = toy_config(tmp_path, "gui=true", f"gui.port={http_port}", f"gui.zmq_port={zmq_port}")
    server, server_thread = serve(make_app(cfg), http_port)
    webs = {name: WebDevice().start() for name in ("arm-a", "arm-b")}
    bridges = {n: GuiBridge(n, "127.0.0.1", zmq_port, w, _Human(), deadman="continue") for n, w in webs.items()}
    why = "the reset check failed: the cube is 0.12 m from its start (tolerance 0.03)"
    counts = {"resets": 4, "resets_ok": 3, "resets_failed": 1, "reset_calls": 1}  # the ResetWrapper's heartbeat fields
    stop = threading.Event()

    def ticks():
        step = 0
        while not stop.is_set():
            step += 1
            for name, bridge in bridges.items():
                waiting = name == "arm-b"
                bridge.tick(
                    {
                        "mode": "POLICY",
                        "policy_version": 1,
                        "episode": 2,
                        "step": 0 if waiting else step,
                        "reward": 0.0,
                        "return": 0.0,
                        "reset_state": "waiting" if waiting else "running",
                        "reset_why": why if waiting else None,
                        "reset_counts": counts if waiting else {**counts, "resets_failed": 0, "reset_calls": 0},
                    }
                )
            time.sleep(0.05)

    thread = threading.Thread(target=ticks, daemon=True)
    thread.start()
    try:
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{http_port}/?name=ines")
        queue = page.locator("#queue .queue-item")
        queue.first.wait_for(timeout=15000)
        assert queue.count() == 1 and queue.first.get_attribute("data-actor") == "arm-b"
        assert why in queue.first.inner_text()
        line = page.locator('.actor[data-actor="arm-b"] .reset-state')
        wait_until(lambda: "WAITING FOR A PERSON" in line.inner_text(), what="arm-b's reset line")
        assert why in line.inner_text() and "person called 1×" in line.inner_text()
        running = page.locator('.actor[data-actor="arm-a"] .reset-state').inner_text()
        assert running.startswith("reset: running")
        assert page.locator('.actor[data-actor="arm-a"] .reward-checks').is_hidden()  # no learned reward: no panel
        # a mark or a threshold sent for an actor without a learned reward: refused in one line, nothing sent on
        page.evaluate("send({type: 'reward_mark', actor: 'arm-a', label: 'false_success'})")
        page.evaluate("send({type: 'reward_threshold', actor: 'arm-a', threshold: 0.5})")
        wait_until(lambda: page.locator("#messages .refused").count() >= 2, what="two refusals")
        text = page.locator("#messages").inner_text()
        assert "arm-a has no learned reward model: no mark to set" in text
        assert "no threshold to set" in text
        assert not bridges["arm-a"].counts["checks_refused"], "refused by the GUI, never sent to the actor"
    finally:
        stop.set()
        thread.join(2)
        for bridge in bridges.values():
            bridge.close()
        for web in webs.values():
            web.close()
        server.should_exit = True
        server_thread.join(10)


def test_a_real_actor_whose_reset_check_fails_waits_in_the_pages_queue_until_a_person_resets_the_scene(
    gui_run, browser
):
    from robo_rl.envs.resets import ResetWrapper
    from robo_rl.envs.wrappers import find_wrapper
    from tests.test_pipeline import SMALL_NETS

    run = gui_run(
        "env.reset_mode=human",  # after the first episode the check fails (the arm is not home): a person is called
        "env.reset_wait_s=120",
        "env.max_episode_steps=8",
        "demos.num_episodes=0",
        *SMALL_NETS,
        task=("env=pick_cube",),
        view_size=0,
    )
    resets = find_wrapper(run.actor.env, ResetWrapper)
    person_here = threading.Event()

    def person():  # read between the checks on the control thread, as a device is: puts the scene back when told
        if person_here.is_set():
            resets.unwrapped.place_scene(np.random.default_rng(0))
        return set()

    resets.add_poller(person)
    page = open_page(browser, run, "jo")
    line = page.locator(f"{ROW} .reset-state")
    wait_until(lambda: "WAITING FOR A PERSON" in line.inner_text(), timeout_s=60, what="the actor waiting for a person")
    assert "the reset check failed: " in line.inner_text() and "person called 1×" in line.inner_text()
    item = page.locator("#queue .queue-item")
    assert item.count() == 1 and item.first.get_attribute("data-actor") == "actor-0"
    assert "reset: the reset check failed: " in item.first.inner_text()
    assert "offline" not in page.locator(f"{ROW} .offline-marker").inner_text(), "a waiting actor is not offline"
    person_here.set()
    wait_until(lambda: line.inner_text().startswith("reset: running"), timeout_s=30, what="the run going on")
    wait_until(lambda: page.locator("#queue .queue-empty").count() == 1, what="the queue empty again")
    assert page.js_errors == []


# --- bad input, without a browser -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"v": 1, "type": "reward_threshold", "threshold": 0.5}', "needs an 'actor'"),
        ('{"v": 1, "type": "reward_threshold", "actor": "a", "threshold": "high"}', "needs a number 'threshold'"),
        ('{"v": 1, "type": "reward_mark", "actor": "a", "label": "meh"}', "false_success, missed_success"),
    ],
)
def test_malformed_check_messages_are_refused_with_the_reason(text, reason):
    from robo_rl.gui.server import PageError, parse_page_message

    with pytest.raises(PageError, match=reason):
        parse_page_message(text)


def test_the_wrapper_refuses_a_threshold_out_of_range_and_swaps_a_model_between_steps(tmp_path):
    from robo_rl.rewards.base import load_model
    from robo_rl.rewards.wrapper import RewardWrapper
    from sim.point_reach import PointReachEnv

    env = RewardWrapper(PointReachEnv(camera=True), str(small_classifier(tmp_path / "m")), asynchronous=False)
    env.reset(seed=0)
    for bad in (0.0, 1.0, 1.5, -0.1, float("nan"), True):
        with pytest.raises(ValueError, match="out of range"):
            env.request_threshold(bad)
    env.request_model(load_model(small_classifier(tmp_path / "m2", threshold=0.7)), 3)
    assert env.step(np.zeros(2, np.float32))[4]["record_extras"]["reward_model_version"] == 3
    assert env.threshold == pytest.approx(0.7), "no threshold of a person's: the new model's own"
    assert env.recent_frames()["top"].shape == (1, 8, 8, 3)
    env.close()


def test_a_retrain_of_a_run_without_a_saved_model_is_refused_in_one_line(tmp_path):
    from robo_rl.rewards.base import RewardModelError
    from robo_rl.rewards.live import retrain

    (tmp_path / "config.yaml").write_text("reward: null\n")
    with pytest.raises(RewardModelError, match="scores with no saved reward model"):
        retrain(tmp_path)
