"""Why evaluation episodes failed, as each task names it, and the behaviour check for a success reached the wrong
way: a learned reward farmed (its success probability over the threshold while the simulator says failure), the run's
learned reward watching the evaluation without judging it."""

from pathlib import Path

import torch
from omegaconf import OmegaConf

from robo_rl.eval.behaviour import FARMED_SHARE_BOUND, farmed_reward_check
from robo_rl.eval.conditions import Condition
from robo_rl.eval.episodes import evaluate_policy, run_condition
from robo_rl.eval.failures import GENERIC, TASK_MODES, classify, task_key
from robo_rl.eval.report import header_lines, write_suite_report
from robo_rl.eval.suite import summarize
from robo_rl.eval.watch import watch_learned_reward
from robo_rl.rewards.classifier import SuccessClassifier
from sim.point_reach import PointReachEnv

GENERIC_NAMES = [m.name for m in GENERIC]


def episode(i: int, success: bool, task: str | None, **signals) -> dict:
    r = {
        "episode": i,
        "seed": i,
        "success": success,
        "length": 10,
        "return": 0.0,
        "ended_by": "env" if success else "time_limit",
        "interventions": 0,
        "episode_s": 1.0,
        "step_ms": 1.0,
        "cameras": [],
        "task": task,
        **signals,
    }
    return {**r, "failure_mode": classify(r)}


def report_of(episodes: list[dict]) -> dict:
    return {
        "suite": "smoke",
        "checkpoint": "/runs/x/checkpoints/step_000001000.pt",
        "env_steps": 1000,
        "episodes": len(episodes),
        "seed": 0,
        "score": "env",
        "real_robot": False,
        "stopped": None,
        "conditions": [summarize(Condition("nominal"), episodes)],
    }


def test_a_task_that_names_its_failure_modes_gets_them_in_the_report_and_one_without_the_generic_ones(tmp_path):
    pick = [
        episode(0, True, "pick_cube_lift", grasped_ever=True, grasped_at_end=True),
        episode(1, False, "pick_cube_lift", grasped_ever=False, grasped_at_end=False),
        episode(2, False, "pick_cube_lift", grasped_ever=True, grasped_at_end=False),
        episode(3, False, "pick_cube_lift", grasped_ever=True, grasped_at_end=True),
    ]
    (c,) = report_of(pick)["conditions"]
    assert list(c["failure_modes"]) == [
        "safety_stop",
        "human_failure",
        "never_grasped",
        "dropped",
        "timed_out",
        "other",
    ]
    assert c["failure_modes"]["never_grasped"] == c["failure_modes"]["dropped"] == c["failure_modes"]["timed_out"] == 1
    write_suite_report(tmp_path / "pick", report_of(pick))
    md = (tmp_path / "pick" / "report.md").read_text()
    assert "| never grasped | dropped | timed out | other |" in md and "pick_cube_lift" in md
    assert "never grasped" in (tmp_path / "pick" / "report.html").read_text()

    reach = [episode(0, False, "point_reach"), episode(1, False, "point_reach", ended_by="human_failure")]
    reach[1]["failure_mode"] = classify(reach[1])
    (c,) = report_of(reach)["conditions"]
    assert list(c["failure_modes"]) == GENERIC_NAMES and c["failure_modes"]["human_failure"] == 1
    write_suite_report(tmp_path / "reach", report_of(reach))
    md = (tmp_path / "reach" / "report.md").read_text()
    assert "never grasped" not in md and "| human failure | timed out | other |" in md


def test_robosuite_tasks_read_their_staged_progress():
    lift = "robosuite_lift"
    assert classify({"success": False, "ended_by": "time_limit", "progress_max": 0.6, "progress_end": 0.6}, lift) == (
        "never_grasped"
    )
    assert classify({"success": False, "ended_by": "time_limit", "progress_max": 0.9, "progress_end": 0.5}, lift) == (
        "dropped"
    )
    assert classify({"success": False, "ended_by": "time_limit", "progress_max": 0.9, "progress_end": 0.9}, lift) == (
        "timed_out"
    )
    can = {"success": False, "ended_by": "time_limit", "progress_max": 0.9, "progress_end": 0.8}
    assert classify(can, "robosuite_pick_place_can") == "not_placed"
    assert classify({**can, "ended_by": "safety"}, "robosuite_pick_place_can") == "safety_stop"  # a stop comes first
    assert classify({"success": False, "ended_by": "time_limit", "faulted": True}, "so101_reach") == "fault"
    assert {"pick_cube_lift", "robosuite_lift", "robosuite_pick_place_can", "gym_hil_pick_cube"} <= set(TASK_MODES)


def test_the_task_key_is_the_env_class_and_its_task_or_the_name_the_env_gives():
    assert task_key(PointReachEnv()) == "point_reach"

    class RobosuiteEnv:  # the shape of sim/robosuite_tasks.py's env, without robosuite
        task = "PickPlaceCan"

    assert task_key(RobosuiteEnv()) == "robosuite_pick_place_can"

    class Named:
        failure_task = "pick_cube_lift"

    assert task_key(Named()) == "pick_cube_lift"


SMALL = {"channels": 4, "features": 8, "hidden": 8, "resize": None, "kernels": [3, 3], "strides": [2, 1]}


def learned_reward_cfg(root: Path, sure: bool):
    """A run config whose learned reward is a saved success classifier (threshold 0.7) that is sure every frame is a
    success (`sure`) or sure none is: its last bias set by hand, as test_eval_suite sets a policy's weights."""
    model = SuccessClassifier(["top"], threshold=0.7, **SMALL | {"image_sizes": {"top": [8, 8]}})
    with torch.no_grad():
        for p in model.net.parameters():
            p.zero_()
        model.net["head"][-1].bias.fill_(8.0 if sure else -8.0)
    folder = model.save(root / ("sure" if sure else "unsure"))
    return OmegaConf.create(
        {
            "reward": {"_target_": "robo_rl.rewards.wrapper.RewardWrapper", "model": str(folder), "shaper": {}},
            "env": {"_target_": "sim.point_reach.PointReachEnv"},
        }
    )


class Still:
    def act(self, obs, deterministic=True):
        return torch.zeros(1, 2)


def test_a_farmed_learned_reward_is_flagged_and_a_healthy_one_is_not(tmp_path, capsys):
    sure = watch_learned_reward(PointReachEnv(max_episode_steps=3, camera=True), learned_reward_cfg(tmp_path, True))
    farmed = run_condition(sure, Still(), [1, 2, 3])  # the suite runner's episodes
    assert all(r["success_prob_max"] > 0.99 and r["success_threshold"] == 0.7 and not r["success"] for r in farmed)
    check = farmed_reward_check(farmed)
    assert check["farmed"] == 3 and check["share"] == 1.0 and check["flagged"] and check["seeds"] == [1, 2, 3]
    lines = header_lines(report_of(farmed))
    assert any(ln.startswith("warning: nominal: the learned reward was farmed in 3/3 episodes") for ln in lines)
    result = evaluate_policy(sure, Still(), 2, 0)  # the plain evaluation's episodes
    assert result["farmed_reward"]["farmed"] == 2 and result["farmed_reward"]["flagged"]
    assert "warning: evaluation: the learned reward was farmed in 2/2" in capsys.readouterr().err

    unsure = watch_learned_reward(PointReachEnv(max_episode_steps=3, camera=True), learned_reward_cfg(tmp_path, False))
    healthy = run_condition(unsure, Still(), [1, 2, 3])
    assert farmed_reward_check(healthy) == {**check, "farmed": 0, "share": 0.0, "flagged": False, "seeds": []}
    assert not any(ln.startswith("warning") for ln in header_lines(report_of(healthy)))
    one_in_twenty = [
        episode(i, False, None, success_prob_max=0.9 if i == 0 else 0.1, success_threshold=0.7) for i in range(20)
    ]
    assert farmed_reward_check(one_in_twenty)["share"] == 0.05 <= FARMED_SHARE_BOUND  # under the bound: counted only
    assert not farmed_reward_check(one_in_twenty)["flagged"]
    assert farmed_reward_check([episode(0, False, None)]) is None  # no learned reward: nothing to check
    no_reward = OmegaConf.create({"reward": None, "env": {"_target_": "sim.point_reach.PointReachEnv"}})
    env = PointReachEnv()
    assert watch_learned_reward(env, no_reward) is env  # a run without a learned reward: the env as it is
