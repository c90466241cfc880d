"""bench/methods.py's own logic: the success line it reads from `robo-rl recap collect`, the PPO rollouts a small
budget gets, rliable's summary against the base, and an unknown task refused in one line (the runs themselves are
`robo-rl` commands tested in their own files)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.methods import (
    METHODS,
    ONLINE,
    ROOT,
    SUCCESS,
    TASKS,
    add_validation,
    merge_results,
    on_policy_rollouts,
    summarise,
)


def test_it_reads_the_success_line_recap_collect_prints():
    line = "p.pt (guidance 1.0): success 7/10 = 0.70 (Wilson 95% CI [0.40, 0.89]), mean length 41.3"
    assert SUCCESS.search(line).groups() == ("7", "10", "41.3")


def test_a_small_budget_still_gives_the_on_policy_methods_three_updates():
    assert on_policy_rollouts("grpo", 1500) == ["algo.rollout_env_steps=500"]
    assert on_policy_rollouts("reinflow", 20000) == [] and on_policy_rollouts("residual", 1500) == []


def test_every_method_is_a_preset_or_an_offline_iteration():
    presets = {p.name[: -len(".yaml")] for p in (ROOT / "launch" / "conf" / "experiment").glob("*.yaml")}
    assert all(preset in presets for task in TASKS.values() for preset in task["presets"].values())
    assert set(TASKS["pick"]["presets"]) == set(ONLINE)  # the pick task runs every method
    assert {"recap", "steam"} <= set(METHODS)


def test_the_summary_puts_each_method_against_the_base_over_seeds():
    runs = {
        "base": [{"success": {"rate": r}} for r in (0.3, 0.4, 0.35)],
        "recap": [{"success": {"rate": r}} for r in (0.6, 0.7, 0.65)],
        "residual": [{"success": {"rate": 0.9}, "initial_policy": {"rate": r}} for r in (0.9, 0.95, 0.85)],
    }
    summary = summarise(runs, reps=50)
    assert summary["recap"]["iqm"][0] == pytest.approx(0.65) and summary["base"]["iqm"][0] == pytest.approx(0.35)
    assert summary["recap"]["p_improvement_over_base"][0] == pytest.approx(1.0)
    assert "p_improvement_over_base" not in summary["base"]
    # against its own untrained policy evaluated the same (deterministic) way: no clear gain
    assert summary["residual"]["p_improvement_over_initial_policy"][0] == pytest.approx(0.5)
    assert "p_improvement_over_initial_policy" not in summary["recap"]


def test_an_unknown_task_or_a_method_without_a_preset_for_the_task_is_refused_in_one_line():
    run = subprocess.run(
        [sys.executable, "bench/methods.py", "--task", "metaworld"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 1 and "unknown task 'metaworld' (known: pick, lift)" in run.stderr
    run = subprocess.run(
        [sys.executable, "bench/methods.py", "--task", "lift", "--methods", "recap", "grpo", "parl"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "lift has no preset for grpo, parl yet" in run.stderr


def test_the_validation_episodes_of_recap_tune_are_counted_apart_and_the_scale_kept_with_its_iteration():
    cost = {"episodes": 200, "validation_episodes": 0, "validation_env_steps": 0, "iterations": [{"collected": 0.3}]}
    tuned = {"guidance": 2.0, "results": {"1.0": {"episodes": 50, "mean_length": 40.0, "successes": 20}}}
    tuned["results"]["2.0"] = {"episodes": 50, "mean_length": 30.5, "successes": 31}
    add_validation(cost, tuned)
    assert cost["validation_episodes"] == 100 and cost["validation_env_steps"] == 2000 + 1525
    assert cost["episodes"] == 200 and cost["iterations"][0]["guidance"] == 2.0  # the collected count is untouched


def test_runs_side_by_side_merge_into_one_summary_over_every_seed_and_a_different_protocol_is_refused():
    def one(seed, base, recap, steps=20000):
        runs = {
            "base": [{"seed": seed, "success": {"rate": base}}],
            "recap": [{"seed": seed, "success": {"rate": recap}}],
        }
        protocol = {
            "task": "pick",
            "online_env_steps": steps,
            "offline": {"iterations": 2},
            "eval": {},
            "reward": "sparse",
        }
        return {**protocol, "seeds": [seed], "runs": runs, "summary": {}}

    merged = merge_results([one(0, 0.5, 0.8), one(1, 0.6, 0.9), one(2, 0.7, 0.85)])
    assert merged["seeds"] == [0, 1, 2] and [r["seed"] for r in merged["runs"]["recap"]] == [0, 1, 2]
    assert merged["summary"]["recap"]["mean"][0] == pytest.approx(0.85)
    assert merged["summary"]["recap"]["p_improvement_over_base"][0] > 0.9
    with pytest.raises(SystemExit, match="differ in online_env_steps"):
        merge_results([one(0, 0.5, 0.8), one(1, 0.6, 0.9, steps=5000)])
    with pytest.raises(SystemExit, match="a seed is in two files"):
        merge_results([one(0, 0.5, 0.8), one(0, 0.6, 0.9)])


def test_steam_collects_with_the_tasks_camera_and_labels_its_own_episodes_where_recap_keeps_the_demos(
    tmp_path, monkeypatch
):
    import bench.methods as methods

    base = tmp_path / "base"
    (base / "bc").mkdir(parents=True)
    calls = []

    def fake_cli(args, log):  # the commands a run would give robo-rl, each answered as robo-rl would
        calls.append(args)
        return "p.pt (guidance 1.0): success 3/5 = 0.60 (Wilson 95% CI [0.23, 0.88]), mean length 30.0", 1.0, 1.0

    monkeypatch.setattr(methods, "cli", fake_cli)
    for method in ("steam", "recap"):
        calls.clear()
        _, cost = methods.run_offline("pick", method, base, 0, 5, 2, tmp_path / "out")
        verbs = [c[1] for c in calls]
        assert verbs == ["collect", "label", "finetune"] * 2 and cost["episodes"] == 10 and cost["env_steps"] == 300
        collects = [c for c in calls if c[1] == "collect"]
        labels = [c for c in calls if c[1] == "label"]
        if method == "steam":  # its critics compare frames: every collection renders them; the demos have none
            assert all(set(TASKS["pick"]["cameras"]) <= set(c) for c in collects)
            assert all("demos=false" in c and "recap.value=steam" in c for c in labels)
        else:
            assert not any(a.startswith("env.cameras") for c in collects for a in c)
            assert not any("demos=false" in c for c in labels)
