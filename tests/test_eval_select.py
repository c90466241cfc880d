"""Checkpoint selection (`eval.select`): the highest Wilson lower bound among a run's evaluated checkpoints, never
the best point estimate of a few lucky episodes; the report says which rule chose it and lists the candidates."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from robo_rl.cli import main
from robo_rl.config import load_config, make_env, make_policy, save_config
from robo_rl.configs.eval import EvalConfig
from robo_rl.eval.select import candidate, choose, heldout_note, select_checkpoint, selection_markdown
from robo_rl.runs import save_checkpoint

MANY = candidate("/run/checkpoints/step_000010000.pt", 10000, 45, 50, 1000000)  # 0.90 [0.79, 0.96]
LUCKY = candidate("/run/checkpoints/step_000020000.pt", 20000, 3, 3, 1000000)  # 1.00 [0.44, 1.00]
SEEDS_OF = OmegaConf.create(
    {"seed": 0, "train": {"actors": 2}, "actor": {"num_envs": 1}, "demos": {"seed": 100000, "num_episodes": 20}}
)


def test_the_lower_bound_picks_45_of_50_over_3_of_3_where_the_point_estimate_would_not():
    assert LUCKY["success_ci95"][0] == pytest.approx(0.44, abs=0.005) and LUCKY["success_rate"] == 1.0
    assert MANY["success_ci95"][0] == pytest.approx(0.786, abs=0.005)
    chosen = {rule: select_checkpoint([MANY, LUCKY], rule)["chosen"] for rule in ("lower_bound", "point_estimate")}
    assert chosen == {"lower_bound": MANY["checkpoint"], "point_estimate": LUCKY["checkpoint"]}
    assert select_checkpoint([LUCKY, MANY], "last")["chosen"] == LUCKY["checkpoint"]  # the newest, whatever it scored
    assert EvalConfig().select == "lower_bound"
    with pytest.raises(ValueError, match="eval.select='best'"):
        select_checkpoint([MANY], "best")


def test_the_selection_names_its_rule_and_every_candidate():
    text = selection_markdown(select_checkpoint([MANY, LUCKY], "lower_bound"))
    assert "chosen by `eval.select=lower_bound` (the highest Wilson 95% lower bound) among 2" in text
    assert "| `step_000010000.pt` | 10000 | 45/50 | 0.90 | [0.79, 0.96] | **chosen** |" in text
    assert "| `step_000020000.pt` | 20000 | 3/3 | 1.00 | [0.44, 1.00] |  |" in text


def test_evaluation_seeds_are_held_out_from_the_seeds_training_and_demonstrations_start_from():
    assert "held out" in heldout_note(SEEDS_OF, 1000000, 50) and "NOT" not in heldout_note(SEEDS_OF, 1000000, 50)
    assert "NOT held out" in heldout_note(SEEDS_OF, 990, 20)  # actor-1 starts at seed 1000
    assert "NOT held out" in heldout_note(SEEDS_OF, 100010, 5)  # the demonstrations' seeds


def evaluated_run(root: Path) -> tuple[Path, list[Path]]:
    """A run folder with two checkpoints: an earlier one evaluated 45/50, the newest not yet evaluated."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    paths = []
    for steps in (10000, 20000):
        paths.append(run / "checkpoints" / f"step_{steps:09d}.pt")
        paths[-1].write_bytes(b"")
    earlier = {
        "episodes": 50,
        "seed": 1000000,
        "successes": 45,
        "success_rate": 0.9,
        "success_ci95": MANY["success_ci95"],
        "mean_length": 12.5,
        "mean_return": 0.9,
        "checkpoint": "/where/it/ran/before/run/checkpoints/step_000010000.pt",  # the run folder moved since
        "env_steps": 10000,
    }
    (run / "eval" / "step_000010000").mkdir(parents=True)
    (run / "eval" / "step_000010000" / "report.json").write_text(json.dumps(earlier))
    return run, paths


def test_a_run_report_stands_for_the_earlier_checkpoint_with_the_higher_lower_bound(tmp_path):
    run, (first, newest) = evaluated_run(tmp_path)
    now = {"episodes": 50, "seed": 1000000, "successes": 40, "success_rate": 0.8, "success_ci95": [0.67, 0.89]}
    result, path, steps = choose(
        run, {**now, "mean_length": 9.0, "mean_return": 0.8}, str(newest), 20000, "lower_bound", SEEDS_OF
    )
    assert (
        (path, steps) == (str(first.resolve()), 10000) and result["successes"] == 45 and result["mean_length"] == 12.5
    )
    sel = result["selection"]
    assert sel["rule"] == "lower_bound" and [c["env_steps"] for c in sel["candidates"]] == [10000, 20000]
    assert "held out" in sel["heldout"]
    result, path, _ = choose(run, {**now, "mean_length": 9.0, "mean_return": 0.8}, str(newest), 20000, "last", SEEDS_OF)
    assert path == str(newest) and result["successes"] == 40
    other_seeds = {**now, "seed": 5, "mean_length": 9.0, "mean_return": 0.8}  # not comparable: not a candidate
    assert len(choose(run, other_seeds, str(newest), 20000, "lower_bound", SEEDS_OF)[0]["selection"]["candidates"]) == 1


def make_reach_run(root: Path) -> Path:
    """A point_reach run whose earlier checkpoint steers to the goal and whose newest stands still."""
    cfg = load_config(["env=point_reach", "experiment=rlpd", "policy.hidden=[4]", "logger.progress=false"])
    run = root / "reach"
    run.mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    env = make_env(cfg)
    policy = make_policy(cfg, env)
    env.close()
    first, last = policy.head[0], policy.head[-1]
    for steps, good in ((1000, True), (2000, False)):
        with torch.no_grad():
            for p in policy.parameters():
                p.zero_()
            if good:  # hidden: relu(goal - pos), relu(pos - goal) per axis; the mean steers by their difference
                first.weight.copy_(torch.tensor([[-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0], [0, 1, 0, -1]]))
                last.weight[:2] = 5.0 * torch.tensor([[1.0, 0, -1, 0], [0, 1, 0, -1]])
        save_checkpoint(run, steps, {"algo": {"policy": policy.state_dict()}, "counters": {"env_steps": steps}})
    return run


@pytest.mark.slow  # two evaluations through the CLI, 5-10 s; fast cover: the choose() test above, test_eval_outputs
def test_robo_rl_eval_of_a_run_reports_the_checkpoint_the_rule_picks_and_says_so(tmp_path, capsys):
    run = make_reach_run(tmp_path)
    earlier = run / "checkpoints" / "step_000001000.pt"
    assert main(["eval", f"checkpoint={earlier}", "eval.episodes=6"]) == 0  # an evaluated candidate
    assert main(["eval", f"checkpoint={run}", "eval.episodes=6"]) == 0  # the newest, then the choice
    out = capsys.readouterr().out
    assert "checkpoint: step_000001000.pt, chosen by eval.select=lower_bound" in out and "held out" in out
    report = json.loads((run / "eval" / "step_000002000" / "report.json").read_text())
    assert report["checkpoint"] == str(earlier) and report["successes"] == 6
    assert [c["successes"] for c in report["selection"]["candidates"]] == [6, 0]
    md = (run / "eval" / "step_000002000" / "report.md").read_text()
    assert "chosen by `eval.select=lower_bound`" in md and "| `step_000002000.pt` | 2000 | 0/6 |" in md
