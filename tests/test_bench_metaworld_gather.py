"""bench/metaworld.py and bench/metaworld_vla.py --gather (bench/_gather.py): the RL runs other --out folders (or
an earlier sitting's result files) made from the same bases join one folder's records (runs side by side need folders
of their own), and what does not belong is refused by name, not averaged in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench._gather import gather_flow_results, gather_flow_runs, gather_vla_results

BASE = {"sampled": {"episodes": 50, "success_rate": 0.5}, "zero_noise": {"episodes": 50, "success_rate": 0.6}}
TRAINED = {"recipe": {"tasks": ["a-v3"], "demos": 10}, "val_loss": 0.58296, "best_epoch": 128, "updates": 3000}
METHOD = "residual_ramped_mode_l2"


def seed_folder(root: Path, seed: int, tasks: dict, base: Path | None = None) -> Path:
    """An --out folder's s<seed>: its base (its own, or a link to `base`) and partial.json holding `tasks`."""
    folder = root / f"s{seed}"
    folder.mkdir(parents=True)
    if base is None:
        (folder / "base").mkdir()
        (folder / "base" / "base.json").write_text("{}")
    else:
        (folder / "base").symlink_to(base)
    (folder / "partial.json").write_text(json.dumps(tasks))
    return folder


def run(folder: Path, name: str, success: float) -> dict:
    return {"run": str(folder / "runs" / name), "steps": 10000, "after": {"success_rate": success}}


def test_runs_made_side_by_side_join_the_bases_folder_and_rows_copied_from_it_are_not_gathered_twice(tmp_path):
    out = tmp_path / "out"
    mine = seed_folder(out, 2, {t: {"base": BASE} for t in ("a-v3", "b-v3")})
    mine_dsrl = run(mine, "dsrl_a", 0.7)
    (mine / "partial.json").write_text(json.dumps({"a-v3": {"base": BASE, "dsrl": mine_dsrl}, "b-v3": {"base": BASE}}))
    for task, success in (("a-v3", 0.8), ("b-v3", 0.9)):
        other = tmp_path / f"side_{task}"
        theirs = seed_folder(other, 2, {}, base=mine / "base")
        # each side folder started from a copy of the base folder's partial.json: the dsrl row is the base folder's own
        copied = {"a-v3": {"base": BASE, "dsrl": mine_dsrl}, "b-v3": {"base": BASE}}
        copied[task][METHOD] = run(theirs, task, success)
        (theirs / "partial.json").write_text(json.dumps(copied))
        assert gather_flow_runs(out, other, [0, 1, 2], ["dsrl", METHOD]) == [f"{task} s2 {METHOD}"]
    joined = json.loads((mine / "partial.json").read_text())
    assert joined["a-v3"][METHOD]["after"]["success_rate"] == 0.8
    assert joined["b-v3"][METHOD]["after"]["success_rate"] == 0.9
    assert joined["a-v3"]["dsrl"] == mine_dsrl
    # gathering the same folder again adds nothing new and changes nothing
    assert gather_flow_runs(out, tmp_path / "side_a-v3", [2], [METHOD]) == ["a-v3 s2 " + METHOD]
    assert json.loads((mine / "partial.json").read_text()) == joined


def test_another_base_a_differing_evaluation_or_a_run_made_twice_is_refused_by_name(tmp_path):
    out = tmp_path / "out"
    mine = seed_folder(out, 0, {"a-v3": {"base": BASE}})

    other_base = tmp_path / "other_base"
    theirs = seed_folder(other_base, 0, {})  # a base of its own: another seed's, or retrained
    (theirs / "partial.json").write_text(json.dumps({"a-v3": {"base": BASE, METHOD: run(theirs, "x", 0.9)}}))
    with pytest.raises(SystemExit, match="seed 0's base is not"):
        gather_flow_runs(out, other_base, [0], [METHOD])

    evaluated = tmp_path / "evaluated"
    theirs = seed_folder(evaluated, 0, {}, base=mine / "base")
    other_eval = {**BASE, "sampled": {"episodes": 20, "success_rate": 0.55}}
    (theirs / "partial.json").write_text(json.dumps({"a-v3": {"base": other_eval, METHOD: run(theirs, "x", 0.9)}}))
    with pytest.raises(SystemExit, match="a-v3's base evaluation"):
        gather_flow_runs(out, evaluated, [0], [METHOD])

    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        theirs = seed_folder(folder, 0, {}, base=mine / "base")
        (theirs / "partial.json").write_text(json.dumps({"a-v3": {"base": BASE, METHOD: run(theirs, "x", 0.9)}}))
    gather_flow_runs(out, first, [0], [METHOD])
    with pytest.raises(SystemExit, match="ran twice"):
        gather_flow_runs(out, second, [0], [METHOD])

    foreign = tmp_path / "foreign"
    theirs = seed_folder(foreign, 0, {}, base=mine / "base")
    (theirs / "partial.json").write_text(json.dumps({"z-v3": {"base": BASE, METHOD: run(theirs, "x", 0.9)}}))
    with pytest.raises(SystemExit, match="it ran z-v3"):
        gather_flow_runs(out, foreign, [0], [METHOD])

    lone = tmp_path / "lone"
    seed_folder(lone, 1, {"a-v3": {"base": BASE}})
    with pytest.raises(SystemExit, match="has no seed 1"):
        gather_flow_runs(out, lone, [1], [METHOD])


def result_file(path: Path, seed: int, tasks: dict, trained: dict = TRAINED) -> Path:
    """A bench/metaworld.py result as an earlier sitting wrote it (its run folders gone with that machine)."""
    path.write_text(json.dumps({"seeds_detail": [{"seed": seed, "base_training": trained, "tasks": tasks}]}))
    return path


def test_runs_an_earlier_sitting_recorded_in_a_result_file_join_a_rebuilt_base_and_another_base_is_refused(tmp_path):
    out = tmp_path / "out"
    mine = seed_folder(out, 0, {t: {"base": BASE} for t in ("a-v3", "b-v3")})
    (mine / "base" / "base.json").write_text(json.dumps({**TRAINED, "checkpoint": "out/s0/base/bc/policy.pt"}))
    # the same base evaluated again on the same episodes: only the wall times differ
    timed = {m: {**v, "wall_s": 17.0} for m, v in BASE.items()}
    earlier = result_file(tmp_path / "earlier.json", 0, {"a-v3": {"base": timed, "dsrl": run(tmp_path, "gone", 0.9)}})
    assert gather_flow_results(out, earlier, [0, 1], ["dsrl", METHOD]) == ["a-v3 s0 dsrl"]
    joined = json.loads((mine / "partial.json").read_text())
    assert joined["a-v3"]["dsrl"]["after"]["success_rate"] == 0.9
    assert joined["a-v3"]["dsrl"]["gathered_from"] == "earlier.json"
    assert "dsrl" not in joined["b-v3"]

    retrained = result_file(tmp_path / "retrained.json", 0, {"a-v3": {"base": BASE, METHOD: run(tmp_path, "x", 0.8)}},
                            {**TRAINED, "val_loss": 0.61})  # fmt: skip
    with pytest.raises(SystemExit, match="seed 0's base is not .* val_loss differ"):
        gather_flow_results(out, retrained, [0], [METHOD])
    other_eval = {**BASE, "sampled": {"episodes": 50, "success_rate": 0.56, "successes": 28}}
    evaluated = result_file(
        tmp_path / "evaluated.json", 0, {"b-v3": {"base": other_eval, METHOD: run(tmp_path, "y", 1)}}
    )
    with pytest.raises(SystemExit, match="b-v3's base evaluation"):
        gather_flow_results(out, evaluated, [0], [METHOD])
    twice = result_file(tmp_path / "twice.json", 0, {"a-v3": {"base": BASE, "dsrl": run(tmp_path, "again", 0.4)}})
    with pytest.raises(SystemExit, match="ran twice"):
        gather_flow_results(out, twice, [0], ["dsrl"])
    (tmp_path / "broken.json").write_text('{"bench": "metaworld_vla"}')
    with pytest.raises(SystemExit, match="not a bench/metaworld.py result file"):
        gather_flow_results(out, tmp_path / "broken.json", [0], ["dsrl"])


VLA_BASE = {"episodes": 50, "successes": 22, "success_rate": 0.44, "mean_length": 120.5, "wall_s": 60.0}
VLA_MODE = {"episodes": 50, "successes": 38, "success_rate": 0.76, "mean_length": 101.2, "wall_s": 58.0}


def test_runs_an_earlier_sitting_recorded_for_a_smolvla_join_a_rebuilt_one_in_either_layout_and_another_is_refused(
    tmp_path,
):
    per_task = {t: {"base": VLA_BASE, "base_zero_noise": VLA_MODE} for t in ("a-v3", "b-v3")}
    timed = {**VLA_BASE, "wall_s": 75.0}  # the same episodes, timed on another day
    # seed 0's methods beside the base (a file written before seeds were kept), seed 2's under rl.s2
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"per_task": {"a-v3": {"base": timed, "reinflow": run(tmp_path, "r0", 0.52)}}}))
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"per_task": {"b-v3": {"base": VLA_BASE, "base_zero_noise": VLA_MODE, "rl": {
        "s0": {"dsrl": run(tmp_path, "d0", 0.7), "reinflow": run(tmp_path, "r0b", 0.3)},
        "s2": {"dsrl": run(tmp_path, "d2", 0.8)}}}}}))  # fmt: skip
    assert gather_vla_results(per_task, old, ["reinflow"]) == ["a-v3 s0 reinflow"]
    assert gather_vla_results(per_task, new, ["dsrl"]) == ["b-v3 s0 dsrl", "b-v3 s2 dsrl"]
    assert per_task["a-v3"]["rl"]["s0"]["reinflow"]["gathered_from"] == "old.json"
    assert per_task["b-v3"]["rl"]["s2"]["dsrl"]["after"]["success_rate"] == 0.8
    assert "reinflow" not in per_task["b-v3"]["rl"]["s0"]  # only the methods asked for
    # the same runs again (another file that copied them) add nothing new
    assert gather_vla_results(per_task, new, ["dsrl"]) == ["b-v3 s0 dsrl", "b-v3 s2 dsrl"]

    other_mode = {**VLA_MODE, "successes": 36, "success_rate": 0.72}
    retrained = tmp_path / "retrained.json"
    retrained.write_text(json.dumps({"per_task": {"a-v3": {"base": VLA_BASE, "base_zero_noise": other_mode}}}))
    with pytest.raises(SystemExit, match="a-v3's SmolVLA evaluates differently"):
        gather_vla_results(per_task, retrained, ["dsrl"])
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"per_task": {"z-v3": {"base": VLA_BASE}}}))
    with pytest.raises(SystemExit, match="it holds z-v3"):
        gather_vla_results(per_task, foreign, ["dsrl"])
    twice = tmp_path / "twice.json"
    twice.write_text(
        json.dumps({"per_task": {"b-v3": {"base": VLA_BASE, "rl": {"s2": {"dsrl": run(tmp_path, "x", 0.1)}}}}})
    )
    with pytest.raises(SystemExit, match="ran twice"):
        gather_vla_results(per_task, twice, ["dsrl"])
    (tmp_path / "flow.json").write_text(json.dumps({"seeds_detail": []}))
    with pytest.raises(SystemExit, match="not a bench/metaworld_vla.py result file"):
        gather_vla_results(per_task, tmp_path / "flow.json", ["dsrl"])
