"""bench/metaworld_reward.py on the flow baseline: the simulator-reward run a learned-reward run is measured against
comes from a result file of an earlier sitting, and only when that file's base evaluation is this base's."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from bench.metaworld_reward import flow_base

TASK, METHOD = "peg-insert-side-v3", "residual_ramped_mode_l2"
BASE = {
    "sampled": {"episodes": 50, "successes": 26, "success_rate": 0.52, "mean_length": 120.5, "wall_s": 30.1},
    "zero_noise": {"episodes": 50, "successes": 25, "success_rate": 0.5, "mean_length": 118.0, "wall_s": 29.0},
}
TRAINED = {"recipe": {"tasks": [TASK], "demos": 10}, "val_loss": 0.58296, "best_epoch": 128, "updates": 3000}


def flow_out(root: Path, seed: int) -> Path:
    """bench/metaworld.py's --out after its bases: s<seed>/base/base.json and the base's evaluation per task."""
    folder = root / f"s{seed}"
    (folder / "base").mkdir(parents=True)
    (folder / "base" / "base.json").write_text(json.dumps({**TRAINED, "checkpoint": str(folder / "base" / "best.pt")}))
    (folder / "partial.json").write_text(json.dumps({TASK: {"instruction": "Insert the peg", "base": BASE}}))
    return root


def sim_result(path: Path, seed: int, base: dict, steps: int = 10000, trained: dict = TRAINED) -> Path:
    after = {"steps": steps, "after": {"success_rate": 0.86}}
    detail = [{"seed": s, "base_training": trained, "tasks": {TASK: {"base": base, METHOD: after}}} for s in (0, seed)]
    path.write_text(json.dumps({"seeds_detail": detail}))
    return path


def args(out: Path, sim: Path, seed: int = 1, steps: int = 10000) -> Namespace:
    return Namespace(flow_out=str(out), seed=seed, method="residual_mode_l2", sim_result=sim, rl_steps=steps)


def test_the_simulator_reward_run_on_the_same_base_is_read_and_the_base_figures_are_this_seeds(tmp_path):
    out = flow_out(tmp_path / "mw", 1)
    # the same base evaluated on another sitting: the same episodes, other wall times
    again = {way: {**figures, "wall_s": 99.0} for way, figures in BASE.items()}
    got = flow_base(args(out, sim_result(tmp_path / "sim.json", 1, again)), TASK)
    assert got == {
        "checkpoint": str(out / "s1" / "base" / "best.pt"),
        "instruction": "Insert the peg",
        "sampled": 0.52,
        "mode": 0.5,
        "sim": 0.86,
    }
    # another budget than the run's: no reference (the ratio is not reported), not a wrong one
    assert flow_base(args(out, tmp_path / "sim.json", steps=20000), TASK)["sim"] is None
    assert flow_base(args(out, tmp_path / "absent.json"), TASK)["sim"] is None


def test_a_simulator_reward_run_from_another_base_is_refused_by_name(tmp_path):
    out = flow_out(tmp_path / "mw", 1)
    other = {**BASE, "sampled": {**BASE["sampled"], "successes": 25, "success_rate": 0.5}}
    with pytest.raises(SystemExit, match=f"{TASK} s1 base is not"):
        flow_base(args(out, sim_result(tmp_path / "sim.json", 1, other)), TASK)
    retrained = {**TRAINED, "val_loss": 0.6}  # the same evaluation by chance, from a base trained otherwise
    with pytest.raises(SystemExit, match=f"{TASK} s1 base is not"):
        flow_base(args(out, sim_result(tmp_path / "sim2.json", 1, BASE, trained=retrained)), TASK)
