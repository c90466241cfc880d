"""bench/methods.py's own logic: the success line it reads from `robo-rl recap collect`, the PPO rollouts a small
budget gets, rliable's summary against the base, and an unknown task refused in one line (the runs themselves are
`robo-rl` commands tested in their own files)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
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


def test_a_variant_trains_its_methods_preset_with_its_own_settings_and_keeps_its_own_row(tmp_path, monkeypatch):
    import bench.methods as methods

    seen = []
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "learner", "env_steps": 10, "episodes": 1}) + "\n")
    monkeypatch.setattr(methods, "cli", lambda args, log: seen.append(args) or ("", 1.0, 1.0))
    monkeypatch.setattr(methods, "new_folder", lambda out, name, before: run)
    for method in ("dsrl", "dsrl_no_entropy_backup"):
        methods.run_online("pick", method, tmp_path / "base.pt", 1, 100, "sparse", tmp_path)
    plain, variant = seen
    assert "experiment=dsrl_pick_cube" in plain and "experiment=dsrl_pick_cube" in variant
    assert "algo.backup_entropy=false" in variant and "algo.backup_entropy=false" not in plain
    assert (
        "name=dsrl_no_entropy_backup_s1" in variant
        and TASKS["lift"]["presets"]["dsrl_no_entropy_backup"] == "dsrl_lift"
    )


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
    def one(seed, base, method="recap", rate=0.8, steps=20000):
        runs = {
            "base": [{"seed": seed, "success": {"rate": base}}],
            method: [{"seed": seed, "success": {"rate": rate}}],
        }
        protocol = {
            "task": "pick",
            "online_env_steps": steps,
            "offline": {"iterations": 2},
            "eval": {},
            "reward": "sparse",
        }
        return {**protocol, "seeds": [seed], "runs": runs, "summary": {}}

    merged = merge_results([one(0, 0.5, rate=0.8), one(1, 0.6, rate=0.9), one(2, 0.7, rate=0.85)], reps=200)
    assert merged["seeds"] == [0, 1, 2] and [r["seed"] for r in merged["runs"]["recap"]] == [0, 1, 2]
    assert merged["summary"]["recap"]["mean"][0] == pytest.approx(0.85)
    assert merged["summary"]["recap"]["p_improvement_over_base"][0] > 0.9
    with pytest.raises(SystemExit, match="differ in online_env_steps"):
        merge_results([one(0, 0.5, "dsrl"), one(1, 0.6, "dsrl", steps=5000)])
    with pytest.raises(SystemExit, match="recap seed 0 is in two files"):
        merge_results([one(0, 0.5), one(0, 0.5, rate=0.9)])
    with pytest.raises(SystemExit, match="seed 0's base differs"):
        merge_results([one(0, 0.5), one(0, 0.6, "dsrl")])
    # the online methods beside a RECAP run of the same seeds: their budgets are each kind's own
    merged = merge_results(
        [one(0, 0.5, "recap", 0.9), one(0, 0.5, "dsrl", 0.7, steps=10000), one(1, 0.6, "dsrl", steps=10000)], reps=50
    )
    assert merged["seeds"] == [0, 1] and merged["online_env_steps"] == 10000
    assert [r["seed"] for r in merged["runs"]["base"]] == [0, 1] and len(merged["runs"]["recap"]) == 1
    assert set(merged["summary"]) == {"base", "dsrl"}  # recap ran on seed 0 only


@pytest.mark.parametrize("task", ["pick", "lift"])
def test_steam_collects_with_the_tasks_camera_and_labels_its_own_episodes_where_recap_keeps_the_demos(
    task, tmp_path, monkeypatch
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
        _, cost = methods.run_offline(task, method, base, 0, 5, 2, tmp_path / "out")
        verbs = [c[1] for c in calls]
        assert verbs == ["collect", "label", "finetune"] * 2 and cost["episodes"] == 10 and cost["env_steps"] == 300
        collects = [c for c in calls if c[1] == "collect"]
        labels = [c for c in calls if c[1] == "label"]
        if method == "steam":  # its critics compare frames: every collection renders them; the demos have none
            assert all(set(TASKS[task]["cameras"]) <= set(c) for c in collects)
            assert all("demos=false" in c and "recap.value=steam" in c for c in labels)
        else:
            assert not any(set(TASKS[task]["cameras"]) & set(c) for c in collects)
            assert not any("demos=false" in c for c in labels)


def test_steams_lift_collections_see_the_low_dim_state_the_base_reads_and_a_camera_beside_it():
    from robo_rl.config import load_config, make_env

    low_dim = make_env(load_config(["env=robosuite_lift"]))
    env = make_env(load_config(["env=robosuite_lift", *TASKS["lift"]["cameras"]]))
    try:
        assert env.state_names == low_dim.state_names  # the object's pose kept: the low-dim base acts unchanged
        obs, _ = env.reset(seed=4)
        assert np.array_equal(obs["state"], low_dim.reset(seed=4)[0]["state"])
        assert set(obs["images"]) == {"agentview"} and obs["images"]["agentview"].shape == (64, 64, 3)
        assert obs["images"]["agentview"].std() > 5  # a rendered scene, not a blank frame
    finally:
        env.close()
        low_dim.close()


def test_each_measured_run_is_written_at_once_so_a_stopped_bench_keeps_it(tmp_path, monkeypatch):
    import bench.methods as methods
    import robo_rl.eval.aggregate

    monkeypatch.setattr(robo_rl.eval.aggregate, "REPORT_REPS", 50)  # the summary's bootstrap, small for a test
    written = []
    monkeypatch.setattr(methods, "make_base", lambda task, seed, out: (tmp_path / "base", {"wall_s": 1.0}))
    monkeypatch.setattr(methods, "evaluate_flow", lambda *a: methods.success(5, 10))
    monkeypatch.setattr(
        methods, "evaluate_checkpoint", lambda run, n, initial=False: methods.success(5 + 3 * (not initial), 10)
    )

    def run_online(task, method, base, seed, steps, reward, out):
        if method == "dsrl":
            raise RuntimeError("the learner died")
        return tmp_path / method, {"env_steps": steps}

    monkeypatch.setattr(methods, "run_online", run_online)
    monkeypatch.setattr(
        methods, "write_result", lambda name, result, quick: written.append(json.loads(json.dumps(result)))
    )
    argv = [
        "methods.py",
        "--methods",
        "residual",
        "dsrl",
        "reinflow",
        "--seeds",
        "0",
        "--steps",
        "90",
        "--out",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    methods.main()
    partial, final = written[:-1], written[-1]
    assert [sorted(m for m, rows in w["runs"].items() if any("success" in r for r in rows)) for w in partial] == [
        ["base", "residual"],
        ["base", "reinflow", "residual"],  # dsrl failed: its row says so and the next run still went
    ]
    assert all(w["partial"] and "summary" not in w for w in partial) and "partial" not in final
    assert final["runs"]["dsrl"][0]["failed"].endswith("the learner died")
    assert (
        final["runs"]["residual"][0]["success"]["rate"] == 0.8
        and final["runs"]["residual"][0]["initial_policy"]["rate"] == 0.5
    )
    assert set(final["summary"]) == {"base", "residual", "reinflow"} and final["online_env_steps"] == 90
