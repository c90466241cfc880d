"""The envs' settings have one source, their dataclass in robo_rl/configs/env.py: each option's YAML holds only what it
differs in, the composed block is that plus the defaults, a misspelt key is refused by name, a value out of range
names its range, and the env classes' own keyword defaults (kept for Python users) equal the dataclass's."""

import dataclasses
import inspect

import hydra.utils
import pytest
import yaml
from omegaconf import OmegaConf

from robo_rl.config import CONF_DIR, ConfigError, group_options, load_config, load_saved_config, save_config
from robo_rl.configs.env import BLOCKS, RandomizeConfig, ReachConfig
from robo_rl.configs.settings import SETTINGS, problem
from robo_rl.configs.typed import defaults_of
from robo_rl.eval.conditions import load_suite, suite_names

ENV_CONFIGS = BLOCKS["env"]
OPTIONS = sorted(group_options("env"))
SUB_BLOCKS = {"randomize": RandomizeConfig, "reach": ReachConfig}
IDENTITY = ("task",)  # what an option is (robosuite_lift's Lift) stays written, whatever the default becomes


def _option_yaml(option: str) -> dict:
    return yaml.safe_load((CONF_DIR / "env" / f"{option}.yaml").read_text())


def _interpolation(value) -> bool:
    return isinstance(value, str) and value.startswith("${")


@pytest.mark.parametrize("option", OPTIONS)
def test_an_env_options_composed_block_is_its_yaml_over_its_dataclasss_defaults(option):
    written = _option_yaml(option)
    cls = ENV_CONFIGS[written["_target_"]]  # every env option is typed
    cfg = load_config([f"env={option}", "experiment=rlpd"])  # an experiment that sets no env key
    env = OmegaConf.to_container(cfg.env, resolve=True)
    for key, default in defaults_of(cls).items():
        if key in written and _interpolation(written[key]):
            assert env[key] == OmegaConf.select(cfg, written[key][2:-1]), key
        else:
            assert env[key] == written.get(key, default), key
    for key, sub in SUB_BLOCKS.items():
        if isinstance(written.get(key), dict):
            assert env[key] == {**defaults_of(sub), **written[key]}, key
    assert set(env) == set(defaults_of(cls)) | set(written), "no key appears from anywhere else"


@pytest.mark.parametrize("option", OPTIONS)
def test_no_env_yaml_repeats_a_default_of_its_dataclass(option):
    written = _option_yaml(option)
    defaults = defaults_of(ENV_CONFIGS[written["_target_"]])
    repeated = [k for k, v in written.items() if k in defaults and v == defaults[k] and k not in IDENTITY]
    assert repeated == [], f"launch/conf/env/{option}.yaml repeats its dataclass's default: leave it to the dataclass"


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["env.cube_mas_kg=0.1"], "unknown config key 'env.cube_mas_kg'; did you mean 'env.cube_mass_kg'?"),
        (
            ["env.randomize.object_mas_scale=[1.0,2.0]"],
            "unknown config key 'env.randomize.object_mas_scale'; did you mean 'env.randomize.object_mass_scale'?",
        ),
        (
            ["env.randomize={frction_scale: [0.5, 1.0]}"],
            "unknown config key 'env.randomize.frction_scale'; did you mean 'env.randomize.friction_scale'?",
        ),
        (["env=so101_twin", "env.twin_clok=virtual"], "did you mean 'env.twin_clock'?"),
        (["env=so101_twin", "env.driver.prot=/dev/ttyUSB0"], "unknown config key 'env.driver.prot'"),
        (["env=so101_twin", "env.reach.tolerance=0.05"], "did you mean 'env.reach.tolerance_m'?"),
    ],
)
def test_a_misspelt_env_key_is_refused_by_name_with_the_closest_one(overrides, refusal):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert refusal in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["env.cube_half_size_m=0.1"], "env.cube_half_size_m=0.1 is not allowed: must be a number in [0.005, 0.04]"),
        (["env.task=push"], "env.task=push is not allowed: must be lift | reach"),
        (
            ["env.randomize.control_jitter=0.95"],
            "env.randomize.control_jitter=0.95 is not allowed: must be a number in",
        ),
        (["env=point_reach", "env.step_size=0"], "env.step_size=0 is not allowed: must be a number in (0, inf)"),
        (["env=robosuite_lift", "env.reward_type=shaped"], "must be sparse | dense | potential or null"),
        (["env=so101_twin", "env.twin_clock=fast"], "env.twin_clock=fast is not allowed: must be real | virtual"),
        (["env=so101", "env.reach.low=[0.1,0.0,0.1]"], "env.reach.high=null is not allowed: must be a list of 3"),
        (["env=ur5e", "env.driver.control_hz=0"], "env.driver.control_hz=0 is not allowed: must be a number in (0"),
    ],
)
def test_an_env_value_out_of_range_is_refused_naming_its_range(overrides, refusal):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert refusal in str(e.value)


def test_a_setting_the_yaml_leaves_to_the_dataclass_is_set_without_a_plus_and_a_randomize_key_under_null():
    cfg = load_config(["env.cube_mass_kg=0.1", "env.randomize.object_mass_scale=[0.5,2.0]"])
    assert cfg.env.cube_mass_kg == 0.1 and list(cfg.env.randomize.object_mass_scale) == [0.5, 2.0]
    assert cfg.env.randomize.friction_scale is None and cfg.env.randomize.control_jitter == 0.0  # the nominal rest


def test_a_saved_run_with_a_misspelt_randomize_key_is_refused_by_name(tmp_path):
    cfg = load_config(["env.randomize={friction_scale: [0.5, 1.0]}"])
    save_config(cfg, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text().replace("friction_scale:", "frictoin_scale:")
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"'env.randomize.frictoin_scale'; did you mean 'env.randomize.friction_"):
        load_saved_config(tmp_path / "config.yaml")


def _keyword_defaults(func, skip=()) -> dict:
    """A constructor's keywords with their defaults (a required one: None, as its dataclass writes "no default")."""
    params = list(inspect.signature(func).parameters.values())[1:]  # not self
    out = {}
    for p in params:
        if p.name not in skip:
            default = None if p.default is inspect.Parameter.empty else p.default
            out[p.name] = tuple(default) if isinstance(default, (list, tuple)) else default
    return out


def _field_defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("target", sorted(ENV_CONFIGS))
def test_each_env_classs_keyword_defaults_equal_its_dataclasss(target):
    cls = ENV_CONFIGS[target]
    defaults = _keyword_defaults(hydra.utils.get_class(target).__init__, skip=cls.blocks)
    assert defaults == _field_defaults(cls), f"{target}'s keyword defaults and {cls.__name__} differ"


def test_the_randomize_and_reach_dataclasses_agree_with_the_classes_that_read_them():
    from hardware.env import ReachTask
    from sim.randomize import Randomization

    assert _field_defaults(Randomization) == _field_defaults(RandomizeConfig)
    assert _keyword_defaults(ReachTask.__init__) == _field_defaults(ReachConfig)


@pytest.mark.parametrize("suite", suite_names())
def test_every_env_key_an_eval_suite_sets_is_a_setting_and_in_range(suite):
    for condition in load_suite(suite).conditions:
        for override in condition.overrides:
            key, _, value = override.partition("=")
            if key.startswith("env."):
                assert key in SETTINGS, f"suite {suite}, {condition.name}: {key} is no env setting"
                assert problem(key, yaml.safe_load(value)) is None, f"suite {suite}, {condition.name}: {override}"
