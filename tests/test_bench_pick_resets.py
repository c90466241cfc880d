"""bench/pick_resets.py: it tells the scripted reset that turns the cube from the one that sets it down square, by how
far the starts' yaw lies off square, and compares each with the env's own placement."""

import numpy as np

from bench.pick_resets import KINDS, compare, starts


def test_the_reset_bench_tells_a_square_reset_from_one_that_turns_the_cube():
    runs = {kind: starts(kind, 8, seed=0) for kind in KINDS}
    turned = {kind: float(np.median(np.abs(run["yaw"]))) for kind, run in runs.items()}  # degrees off square
    assert turned["square"] < 3 and turned["scripted"] > 8 and turned["env"] > 8, turned
    rows = compare(runs)
    assert all(0 <= rows[k][v]["ks_to_env"] <= 1 for k in ("scripted", "square") for v in ("x", "y", "yaw"))
    assert rows["scripted"]["failed_checks"] == rows["square"]["failed_checks"] == 0
    assert sum(rows["scripted"]["yaw_histogram_15deg"]) == 8 and "ks_to_env" not in rows["env"]["x"]
