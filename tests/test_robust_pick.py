"""The delay-robust pick preset (`experiment=residual_pick_cube_robust`, issue 50): it trains under action latency
that covers the suite's two steps, within twice the default's env steps, leaves the default run as it is, and
records its demonstrations on the nominal env (`demos.randomize=false`), where the scripted expert can lift at all:
under two steps of latency it cannot."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must be set before mujoco is first imported

import numpy as np
import pytest

from robo_rl.config import load_config
from robo_rl.data.demos import demos_path, load_or_make_demos
from sim.randomize import Randomization

PRESET = "experiment=residual_pick_cube_robust"


def test_the_preset_trains_under_latency_within_twice_the_defaults_steps():
    default, robust = load_config([]), load_config([PRESET])
    spec = Randomization.from_config(robust.env.randomize)
    assert spec.action_latency_steps is not None and spec.action_latency_steps[0] == 0
    assert spec.action_latency_steps[1] >= 2  # the suite's latency_2 and all_strong are inside the training range
    assert robust.policy.scale > default.policy.scale  # room for the residual to damp the base's overshoot
    # the commands still in flight under the largest trained delay are in the residual's input; none by default
    assert robust.policy.action_history >= spec.action_latency_steps[1] and default.policy.action_history == 0
    assert robust.train.total_env_steps <= 2 * default.train.total_env_steps
    assert robust.demos.randomize is False
    # the rest is the default experiment's: the same residual on the same BC recipe, and the default stays nominal
    assert robust.policy._target_ == default.policy._target_ and robust.algo._target_ == default.algo._target_
    assert robust.demos.num_episodes == default.demos.num_episodes
    assert default.env.randomize is None and default.demos.randomize is True


def test_the_preset_shares_the_defaults_nominal_demonstrations(tmp_path):
    cache = [f"cache_dir={tmp_path}"]
    assert demos_path(load_config([PRESET, *cache])) == demos_path(load_config(cache))
    # recording under the randomisation is another recording
    under = load_config([PRESET, *cache, "demos.randomize=true"])
    assert demos_path(under) != demos_path(load_config(cache))


def test_demonstrations_are_recorded_without_latency_only_when_asked(tmp_path):
    latency = ["++env.randomize.action_latency_steps=[2,2]", "demos.num_episodes=2", f"cache_dir={tmp_path}"]
    with pytest.raises(RuntimeError, match="succeeded in only 0"):
        load_or_make_demos(load_config(latency), progress=False)
    batch, path, cached = load_or_make_demos(load_config([*latency, "demos.randomize=false"]), progress=False)
    assert not cached and path.exists()
    assert int((batch["step"] == 0).sum()) == 2 and np.sum(batch["terminated"]) == 2  # both lifted


def test_the_demonstrations_can_keep_the_randomisation_the_expert_handles(tmp_path):
    from robo_rl.data.demos import recording_config

    size = ["++env.randomize.object_size_scale=[0.75,1.25]", f"cache_dir={tmp_path}"]
    kept = load_config([PRESET, *size, "demos.randomize_keep=[object_size_scale]"])
    assert dict(recording_config(kept).env.randomize) == {"object_size_scale": [0.75, 1.25]}  # the latency left out
    assert list(kept.env.randomize.action_latency_steps) == [0, 2]  # training still draws both
    assert list(kept.env.randomize.object_size_scale) == [0.75, 1.25]
    nominal = load_config([PRESET, *size])
    assert recording_config(nominal).env.randomize is None
    assert demos_path(kept) != demos_path(nominal) == demos_path(load_config([f"cache_dir={tmp_path}"]))
    # under two steps of latency and the sizes, the expert lifts once the latency is left out of its recording
    two = [PRESET, *size, "env.randomize.action_latency_steps=[2,2]", "demos.num_episodes=2"]
    batch, _, _ = load_or_make_demos(load_config([*two, "demos.randomize_keep=[object_size_scale]"]), progress=False)
    assert np.sum(batch["terminated"]) == 2  # both lifted
