"""The delay-robust pick recipe on robosuite Lift (`experiment=residual_lift_robust`, issue 50) and the suite it is
measured on (`suite=lift_robustness`): the preset is residual_lift with the pick preset's robustness parts and
nothing else changed, and every condition of the suite is a valid perturbation of the Lift env (the pick scene's pose
keys are not Lift's), the delays inside what the preset trains on."""

from __future__ import annotations

from robo_rl.commands.eval import _perturbation
from robo_rl.config import load_config
from robo_rl.eval.conditions import load_suite
from sim.randomize import Randomization

PRESET = "experiment=residual_lift_robust"
LATENCY = "env.randomize.action_latency_steps"


def test_the_lift_preset_is_the_pick_presets_recipe_on_residual_lift():
    default, robust = load_config(["experiment=residual_lift"]), load_config([PRESET])
    pick = load_config(["experiment=residual_pick_cube_robust"])
    assert robust.env.randomize == pick.env.randomize  # latency [0, 2], drawn per episode, nothing else
    assert (robust.policy.scale, robust.policy.action_history) == (pick.policy.scale, pick.policy.action_history)
    assert robust.demos.randomize is False and default.demos.randomize is True and default.env.randomize is None
    assert robust.train.total_env_steps <= 2 * default.train.total_env_steps
    for group in ("algo", "train"):  # the rest is residual_lift's: its quiet start, ten heads, UTD and budget
        assert robust[group] == default[group]
    assert robust.env.task == default.env.task == "Lift" and robust.demos.num_episodes == default.demos.num_episodes


def test_every_lift_suite_condition_is_a_valid_lift_perturbation_within_the_trained_delays():
    suite, trained = load_suite("lift_robustness"), Randomization.from_config(load_config([PRESET]).env.randomize)
    assert suite.conditions[0].name == "nominal" and not suite.conditions[0].overrides
    names = [c.name for c in suite.conditions]
    assert {"latency_1", "latency_2", "all_mild", "all_strong"} <= set(names)
    base = load_config(["env=robosuite_lift"])
    for cond in suite.conditions:
        cfg = load_config(["env=robosuite_lift", *_perturbation(base, list(cond.overrides))])  # refused if not Lift's
        spec = Randomization.from_config(cfg.env.randomize)
        if spec.action_latency_steps is not None:
            assert trained.action_latency_steps[0] <= spec.action_latency_steps[0]
            assert spec.action_latency_steps[1] <= trained.action_latency_steps[1]
    strong = next(c for c in suite.conditions if c.name == "all_strong")
    assert f"{LATENCY}=[2,2]" in strong.overrides and len(strong.overrides) >= 6
