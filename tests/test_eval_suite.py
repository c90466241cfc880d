"""Evaluation suites (`robo-rl eval checkpoint=<run> suite=<name>`, `eval compare`): every condition on the same seeds,
in one process or several with the same episodes, reports with Wilson intervals and failure modes, comparisons that
say where a difference is significant, and a person's labels and hand resets on a real robot."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robo_rl.cli import main
from robo_rl.commands.eval import TIMING_KEYS, evaluate_on_suite
from robo_rl.config import load_config, make_env, make_policy, save_config
from robo_rl.envs import RobotEnv, make_observation_space
from robo_rl.eval.conditions import PromptError, load_suite
from robo_rl.eval.episodes import run_condition, wilson_interval
from robo_rl.eval.prompt import HumanPrompt
from robo_rl.eval.report import FAILURE_MODES, fisher_exact_p
from robo_rl.runs import save_checkpoint
from robo_rl.teleop.base import FakeDevice
from robo_rl.teleop.intervention import InterventionWrapper
from sim.point_reach import PointReachEnv

SMOKE = load_suite("smoke")
STEER_GAIN = 5.0  # mean action per unit of distance: the point reaches the goal in a step once within 0.2


def make_run(root: Path, name: str, skill: str) -> Path:
    """A point_reach run folder whose policy is set by hand: `good` steers to the goal, `bad` stands still."""
    cfg = load_config(["env=point_reach", "experiment=rlpd", "policy.hidden=[4]", "logger.progress=false"])
    run = root / name
    run.mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    env = make_env(cfg)
    policy = make_policy(cfg, env)
    env.close()
    first, last = policy.head[0], policy.head[-1]
    with torch.no_grad():
        for p in policy.parameters():
            p.zero_()
        if skill == "good":  # hidden: relu(goal - pos) and relu(pos - goal) per axis; mean: their difference
            first.weight.copy_(torch.tensor([[-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0], [0, 1, 0, -1]]))
            last.weight[:2] = STEER_GAIN * torch.tensor([[1.0, 0, -1, 0], [0, 1, 0, -1]])
    save_checkpoint(run, 1000, {"algo": {"policy": policy.state_dict()}, "counters": {"env_steps": 1000}})
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {skill: make_run(root, skill, skill) for skill in ("good", "bad")}


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_every_condition_runs_on_the_same_seeds_into_a_report_with_a_row_a_bar_and_clips_each(runs, capsys):
    assert main(["eval", f"checkpoint={runs['good']}", "suite=smoke"]) == 0
    out_dir = runs["good"] / "eval" / "smoke"
    report = json.loads((out_dir / "report.json").read_text())
    conditions = report["conditions"]
    assert [c["name"] for c in conditions] == [c.name for c in SMOKE.conditions]
    seeds = list(range(SMOKE.seed, SMOKE.seed + SMOKE.episodes))
    assert all(c["seeds"] == seeds and c["n"] == SMOKE.episodes for c in conditions)
    rates = [c["success_rate"] for c in conditions]
    assert rates[0] == 1.0 and rates[-1] < rates[0], "a shorter time limit costs the steering policy successes"
    for c in conditions:
        assert c["success_ci95"] == list(wilson_interval(c["successes"], c["n"]))
        assert sum(c["failure_modes"].values()) == c["n"] - c["successes"]  # every failure has one mode
        assert set(c["failure_modes"]) == set(FAILURE_MODES)
        assert c["step_ms"] > 0 and c["episode_s"] > 0
    short = conditions[-1]
    assert short["failure_modes"]["timed_out"] == short["n"] - short["successes"]  # point_reach reports no grasp
    assert short["mean_length"] <= 4
    html = (out_dir / "report.html").read_text()
    assert html.count("<svg") == 1 and html.count("<rect") == len(conditions)  # one bar per condition
    assert html.count("<tr>") == len(conditions) + 1  # a header and one row per condition
    md = (out_dir / "report.md").read_text()
    assert all(f"| {c['name']} | {c['successes']}/{c['n']} |" in md for c in conditions)
    for c in conditions:
        outcomes = {r["success"] for r in c["episodes"]}
        assert set(c["clips"]) == {"success" if o else "failure" for o in outcomes}
        for clip in c["clips"].values():
            assert clip["replayed_as_evaluated"] and f'src="{clip["path"]}"' in html
            with Image.open(out_dir / clip["path"]) as gif:
                assert gif.format == "GIF" and max(gif.size) <= 96 and gif.n_frames <= 60
    printed = capsys.readouterr().out
    assert "horizon_4" in printed and "report: " in printed
    assert "successes/h (control rate)" in printed  # in sim the primary clock is the env's control rate


def test_wilson_intervals_match_the_closed_form_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(81, 100) == pytest.approx((0.7222, 0.8749), abs=1e-4)


def test_two_worker_processes_give_the_same_episodes_as_one(runs):
    common = [f"checkpoint={runs['good']}", "suite=smoke", "eval.video=false"]
    one, _ = evaluate_on_suite([*common, "eval.workers=1"], say=lambda _: None)
    two, _ = evaluate_on_suite([*common, "eval.workers=2"], say=lambda _: None)
    assert (one["workers"], two["workers"]) == (1, 2)

    def episodes(report):
        return [
            [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in c["episodes"]] for c in report["conditions"]
        ]

    assert episodes(one) == episodes(two)


class GraspScriptEnv(RobotEnv):
    """Each seed plays one way a pick ends, reporting `info["grasped"]` as a pick env does."""

    SCRIPTS = {  # seed: (grasped per step, ended_by of the last step, success)
        0: ([False] * 5, "time_limit", False),
        1: ([False, True, True, False, False], "time_limit", False),
        2: ([False, True, True, True, True], "time_limit", False),
        3: ([False, True], "safety", False),
        4: ([False, True, True], "env", True),
        5: ([False, True], "env", False),
    }
    max_episode_steps = 5
    failure_task = "pick_cube_lift"  # it plays a pick's endings: the pick task's failure modes (eval/failures.py)

    def __init__(self):
        super().__init__()
        self.observation_space = make_observation_space(2, {})
        import gymnasium as gym

        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        self.script, self.t = self.SCRIPTS[seed], 0
        return super().reset(seed=seed, options=options)

    def _reset(self, rng, options):
        return {"state": np.zeros(2, np.float32), "images": {}}, {}

    def _step(self, action):
        grasped, ended_by, success = self.script
        self.t += 1
        done = self.t == len(grasped)
        info = {"grasped": grasped[self.t - 1], "success": success and done}
        if done and ended_by != "time_limit":
            info["ended_by"] = ended_by
        return {"state": np.zeros(2, np.float32), "images": {}}, 0.0, done and ended_by != "time_limit", info


class Still:
    def act(self, obs, deterministic=True):
        return torch.zeros(1, 2)


def test_failure_modes_come_from_the_grasp_the_env_reports_else_from_what_ended_the_episode():
    results = run_condition(GraspScriptEnv(), Still(), list(range(6)))
    modes = [r["failure_mode"] for r in results]
    assert modes == ["never_grasped", "dropped", "timed_out", "safety_stop", None, "other"]
    env = PointReachEnv(max_episode_steps=3)  # no grasp report: the time limit is all it says
    (result,) = run_condition(env, Still(), [1])
    assert not result["success"] and result["failure_mode"] == "timed_out"


# scipy 1.18.1's fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]) p-values: importing scipy.stats cost 1.3 s of CPU
SCIPY_FISHER_P = {
    (6, 6, 0, 6): 0.0021645021645021645,
    (3, 6, 3, 6): 1.0,
    (45, 50, 35, 50): 0.02283498101141552,
    (0, 10, 0, 10): 1.0,
    (7, 20, 15, 21): 0.029366258588311604,
}


def test_fisher_exact_test_matches_scipy():
    for (k1, n1, k2, n2), expected in SCIPY_FISHER_P.items():
        assert fisher_exact_p(k1, n1, k2, n2) == pytest.approx(expected, rel=1e-9)


def test_compare_flags_a_good_policy_against_a_bad_one_and_nothing_against_itself(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert (
        main(["eval", "compare", str(runs["good"]), str(runs["bad"]), "suite=smoke", "eval.video=false", f"out={out}"])
        == 0
    )
    table = json.loads((out / "compare_smoke.json").read_text())
    assert [p["label"] for p in table["policies"]] == ["good", "bad"] and "Fisher" in table["test"]
    nominal = table["rows"][0]
    assert nominal["condition"] == "nominal" and nominal["same_seeds"]
    (test,) = nominal["tests"]
    assert test["significant"] and test["difference"] == -1.0 and test["p_value"] < 0.01
    assert "* |" in (out / "compare_smoke.md").read_text()
    capsys.readouterr()

    report = runs["good"] / "eval" / "smoke" / "report.json"  # a report given as itself: no evaluation
    assert (
        main(["eval", "compare", str(runs["good"]), str(report), "suite=smoke", "eval.video=false", f"out={out}"]) == 0
    )
    assert "reusing" in capsys.readouterr().err
    table = json.loads((out / "compare_smoke.json").read_text())
    assert [p["label"] for p in table["policies"]] == ["good", "good_2"]
    assert not any(t["significant"] for row in table["rows"] for t in row["tests"])
    assert all(t["p_value"] == 1.0 for row in table["rows"] for t in row["tests"])


def test_sim_vs_real_sets_a_robot_report_beside_the_simulator_one(runs, capsys):
    sim = runs["good"] / "eval" / "smoke" / "report.json"
    if not sim.exists():
        evaluate_on_suite([f"checkpoint={runs['good']}", "suite=smoke", "eval.video=false"], say=lambda _: None)
    real = json.loads(sim.read_text())
    real["real_robot"], real["conditions"] = True, real["conditions"][:1]  # a robot runs the nominal condition
    real["conditions"][0] = {**real["conditions"][0], "successes": 3, "success_rate": 0.5}
    (runs["good"] / "eval" / "smoke_real").mkdir(exist_ok=True)
    (runs["good"] / "eval" / "smoke_real" / "report.json").write_text(json.dumps(real))
    assert main(["eval", "sim_vs_real", str(runs["good"])]) == 0
    table = json.loads((runs["good"] / "eval" / "sim_vs_real_smoke.json").read_text())
    assert [p["label"] for p in table["policies"]] == ["sim", "real"] and table["policies"][1]["real_robot"]
    nominal, horizon = table["rows"][0], table["rows"][1]
    assert nominal["results"]["real"]["success_rate"] == 0.5 and not nominal["tests"][0]["significant"]
    assert horizon["results"]["real"] is None and horizon["tests"] == []  # the robot did not run it
    (test,) = nominal["tests"]  # Fisher's exact test, two-sided, on 6/6 against 3/6: p = 40/220
    assert test["difference"] == -0.5 and test["p_value"] == pytest.approx(2 / 11, abs=1e-9)
    out = capsys.readouterr().out
    assert "| nominal | 1.00 [0.61, 1.00] (6/6) | 0.50" in out and "| -0.50 (p=0.182) |" in out
    real["conditions"][0] = {**real["conditions"][0], "successes": 0, "success_rate": 0.0}  # the robot fails all
    (runs["good"] / "eval" / "smoke_real" / "report.json").write_text(json.dumps(real))
    assert main(["eval", "sim_vs_real", str(runs["good"])]) == 0
    (test,) = json.loads((runs["good"] / "eval" / "sim_vs_real_smoke.json").read_text())["rows"][0]["tests"]
    assert test["difference"] == -1.0 and test["p_value"] == pytest.approx(2 / 924, abs=1e-9) and test["significant"]
    assert "| -1.00 (p=0.00216) * |" in capsys.readouterr().out


class LabellingDevice(FakeDevice):
    """A person at a teleop device: labels episode k on its second step (`labels[k]`, None: no label)."""

    def __init__(self, labels):
        super().__init__("labeller")
        self.labels, self.episode, self.steps = labels, -1, 0

    def episode_start(self):
        self.episode, self.steps = self.episode + 1, 0

    def observe(self, obs, policy_action):
        self.steps += 1

    def _poll(self):
        if self.steps == 2 and self.labels[self.episode] is not None:
            self._emit(self.labels[self.episode])
            self.steps += 1  # said once


def test_a_person_scores_the_episodes_with_a_device_or_when_asked_on_the_terminal():
    device = LabellingDevice(["success", "failure", None])
    env = InterventionWrapper(PointReachEnv(), [device])
    said = []
    prompt = HumanPrompt([device], lines=iter(["maybe", "y"]), say=said.append)
    results = run_condition(env, Still(), [1, 2, 3], score="human", prompt=prompt)
    assert [r["success"] for r in results] == [True, False, True]
    assert [r["ended_by"] for r in results] == ["human_success", "human_failure", "time_limit"]
    assert [r["length"] for r in results] == [2, 2, 20]
    assert sum("a success?" in s for s in said) == 1 and any("answer with" in s for s in said)
    env.close()
    scored_by_env = run_condition(PointReachEnv(), Still(), [1, 2, 3])
    assert not any(r["success"] for r in scored_by_env)  # standing still: the env's own check says failure


class ArmOnTheTable(PointReachEnv):
    """Stands for a real arm: a `driver` that is not a twin."""

    driver = "metal"
    driver_twin = None


def test_a_real_robot_waits_for_a_hand_reset_before_every_episode():
    said, device = [], FakeDevice("pad").start()
    device.push(["success"])  # the first reset answered with the device's button, the others with Enter
    prompt = HumanPrompt([device], lines=iter(["", ""]), say=said.append)
    results = run_condition(ArmOnTheTable(max_episode_steps=3), Still(), [5, 6, 7], prompt=prompt)
    assert len(results) == 3
    assert [s.split(":")[0] for s in said] == ["episode 1/3", "episode 2/3", "episode 3/3"]
    assert all("reset the scene by hand" in s for s in said)
    with pytest.raises(PromptError, match="stdin is closed and no teleop device"):
        HumanPrompt([], lines=iter([]), say=said.append).wait_for_reset("reset")


def test_scoring_by_the_reward_model_is_refused_with_the_reason(runs, capsys):
    err = one_line_error(capsys, ["eval", f"checkpoint={runs['good']}", "suite=smoke", "eval.score=reward"])
    assert "eval.score=reward is refused" in err and "eval.score=env" in err and "trained on" in err


def test_a_bad_suite_name_or_condition_is_one_line_naming_it(runs, capsys, tmp_path):
    err = one_line_error(capsys, ["eval", f"checkpoint={runs['good']}", "suite=smoek"])
    assert "no suite 'smoek'; did you mean 'smoke'?" in err and "pick_robustness, smoke" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nepisodes: 2\nconditions:\n  - {name: typo, overrides: ['env.max_episode_stepz=3']}\n")
    err = one_line_error(capsys, ["eval", f"checkpoint={runs['good']}", f"suite={bad}"])
    assert "suite bad, condition 'typo'" in err and "env.max_episode_stepz" in err
    bad.write_text("name: bad\nepisodes: 0\nconditions: []\n")
    err = one_line_error(capsys, ["eval", f"checkpoint={runs['good']}", f"suite={bad}"])
    assert f"suite {bad}: episodes must be an integer >= 1" in err


def test_the_pick_robustness_suite_varies_each_perturbation_alone_at_two_strengths_then_all_together():
    suite = load_suite("pick_robustness")
    assert suite.conditions[0].name == "nominal" and not suite.conditions[0].overrides
    alone = [c for c in suite.conditions[1:] if len(c.overrides) == 1]
    keys = [c.overrides[0].split("=")[0] for c in alone]
    assert all(keys.count(k) == 2 for k in keys)
    together = [c for c in suite.conditions if len(c.overrides) > 1]
    assert [c.name for c in together] == ["all_mild", "all_strong"]
    assert all(sorted(o.split("=")[0] for o in c.overrides) == sorted(set(keys)) for c in together)


def test_a_condition_replaces_the_randomisation_a_run_was_trained_with(tmp_path):
    from robo_rl.commands.eval import _perturbation
    from robo_rl.config import load_saved_config

    cfg = load_config(["env.randomize={object_mass_scale: [0.5, 2.0]}"])
    assert _perturbation(cfg, []) == ["env.randomize=null"]  # nominal is nominal, whatever the policy trained on
    assert _perturbation(
        cfg, ["env.randomize.image_noise_std=8", "env.randomize.friction_scale=[0.5,0.5]", "env.max_episode_steps=20"]
    ) == ["env.max_episode_steps=20", "env.randomize={image_noise_std: 8, friction_scale: [0.5, 0.5]}"]
    point = load_config(["env=point_reach"])
    assert _perturbation(point, ["env.max_episode_steps=4"]) == ["env.max_episode_steps=4"]
    save_config(cfg, tmp_path / "config.yaml")  # a run trained with randomised masses, evaluated under noise alone
    merged = load_saved_config(tmp_path / "config.yaml", _perturbation(cfg, ["env.randomize.image_noise_std=8"]))
    # the block as a fresh config would have it: noise 8, the trained masses gone, every other setting its default
    assert merged.env.randomize == load_config(["env.randomize={image_noise_std: 8}"]).env.randomize
    assert merged.env.randomize.image_noise_std == 8 and merged.env.randomize.object_mass_scale is None
    assert load_saved_config(tmp_path / "config.yaml", _perturbation(cfg, [])).env.randomize is None
