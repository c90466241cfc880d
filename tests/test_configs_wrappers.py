"""The actor wrappers' blocks (`human`, `reward` and `reward.shaper`, `safety` and `safety.workspace`) come from their
dataclasses in robo_rl/configs/wrappers.py: the group options hold only what they differ in, a misspelt key or a value
out of range is refused by name, and a calibration file still sets the workspace box."""

from __future__ import annotations

import inspect

import pytest
from omegaconf import OmegaConf

from robo_rl.config import CONF_DIR, ConfigError, load_config
from robo_rl.configs.typed import LABEL_KEYS, defaults_of
from robo_rl.configs.wrappers import InterventionConfig, RewardConfig, SafetyConfig, ShaperConfig

HUMAN_OPTIONS = sorted(p.stem for p in (CONF_DIR / "human").glob("*.yaml") if p.stem != "none")
SAFETY = ["experiment=rlpd", "env=so101_twin", "safety=default"]
REWARD = ["reward=model", "reward.model=/tmp/a_reward_model"]


def _settings(block: dict, cls: type) -> dict:
    """A composed block's settings: neither its labels nor its sub-blocks and device specs."""
    return {k: v for k, v in block.items() if k not in LABEL_KEYS and k not in getattr(cls, "blocks", ())}


def _composed_equals_defaults_but_what_the_option_sets(block: dict, option: dict, cls: type) -> None:
    expected = {k: option.get(k, v) for k, v in defaults_of(cls).items()}
    assert _settings(block, cls) == expected
    literal = {k: v for k, v in option.items() if k in expected and not str(v).startswith("${")}
    repeated = {k: v for k, v in literal.items() if v == defaults_of(cls)[k]}
    assert not repeated, f"{cls.__name__}'s defaults repeated in the option's YAML: {repeated}"


@pytest.mark.parametrize("option", HUMAN_OPTIONS)
def test_each_human_option_gets_the_dataclass_defaults_and_keeps_its_devices(option):
    yaml = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "human" / f"{option}.yaml"))
    human = OmegaConf.to_container(load_config([f"human={option}"]).human, resolve=True)
    assert human["_target_"] == "robo_rl.teleop.intervention.InterventionWrapper"
    assert [d["_target_"] for d in human["devices"]] == [d["_target_"] for d in yaml["devices"]]
    _composed_equals_defaults_but_what_the_option_sets(human, yaml, InterventionConfig)


def test_the_reward_model_option_and_its_shaper_get_the_dataclass_defaults():
    yaml = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "reward" / "model.yaml"))
    cfg = load_config(REWARD)
    reward = OmegaConf.to_container(cfg.reward)  # interpolations as written, as the YAML holds them
    _composed_equals_defaults_but_what_the_option_sets({**reward, "model": "???"}, yaml, RewardConfig)
    _composed_equals_defaults_but_what_the_option_sets(reward["shaper"], yaml["shaper"], ShaperConfig)
    assert cfg.reward.model == "/tmp/a_reward_model"
    assert cfg.reward.shaper.gamma == cfg.algo.gamma and cfg.reward.key_name == cfg.actor.id  # interpolations stay


def test_the_safety_option_gets_the_dataclass_defaults_and_no_box():
    yaml = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "safety" / "default.yaml"))
    safety = OmegaConf.to_container(load_config(SAFETY).safety, resolve=True)
    _composed_equals_defaults_but_what_the_option_sets(safety, yaml, SafetyConfig)
    assert safety["workspace"] is None and safety["max_rot_step_rad"] == 0.2


def test_the_none_options_add_no_wrapper_block():
    cfg = load_config(["human=none", "reward=none", "safety=none"])
    assert not cfg.human and not cfg.reward and not cfg.safety


def test_a_wrapper_built_in_python_gets_the_dataclass_defaults():
    from hardware.safety import SafetyWrapper
    from robo_rl.rewards.wrapper import RewardWrapper
    from robo_rl.teleop.intervention import InterventionWrapper

    for wrapper, cls in (
        (InterventionWrapper, InterventionConfig),
        (RewardWrapper, RewardConfig),
        (SafetyWrapper, SafetyConfig),
    ):
        parameters = inspect.signature(wrapper).parameters
        # `reward.where` is read by the actor, not passed to the wrapper
        given = {k: v for k, v in defaults_of(cls).items() if k in parameters}
        defaults = {k: v for k, v in given.items() if parameters[k].default is not inspect.Parameter.empty}
        assert defaults and all(parameters[k].default == v for k, v in defaults.items()), wrapper.__name__
    assert ShaperConfig().success_threshold == 0.5  # null (the model's own) resolves to even odds without a model


@pytest.mark.parametrize(
    ("overrides", "wrong", "meant"),
    [
        (["human=keyboard", "human.takover=both"], "human.takover", "human.takeover"),
        ([*REWARD, "reward.max_stale_steps=2"], "reward.max_stale_steps", "reward.max_staleness_steps"),
        ([*REWARD, "reward.shaper.debounce=2"], "reward.shaper.debounce", "reward.shaper.debounce_k"),
        ([*SAFETY, "safety.watchdog=1.0"], "safety.watchdog", "safety.watchdog_s"),
        (
            [*SAFETY, "safety.workspace={low: [0, 0, 0], hihg: [1, 1, 1]}"],
            "safety.workspace.hihg",
            "safety.workspace.high",
        ),
    ],
)
def test_a_misspelt_key_is_refused_by_name_with_the_one_meant(overrides, wrong, meant):
    with pytest.raises(ConfigError) as refused:
        load_config(overrides)
    text = str(refused.value)
    assert f"unknown config key '{wrong}'; did you mean '{meant}'?" in text
    assert "set by experiment" not in text  # the user typed it: no experiment is blamed


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (
            ["human=sim", "human.implicit_threshold=1.5"],
            "human.implicit_threshold=1.5 is not allowed: must be a number in [0, 1]",
        ),
        (
            ["human=web", "human.takeover=always"],
            "human.takeover=always is not allowed: must be explicit | implicit | both",
        ),
        ([*REWARD, "reward.every=0"], "reward.every=0 is not allowed: must be an integer in [1, inf)"),
        ([*REWARD, "reward.shaper.gamma=0"], "reward.shaper.gamma=0 is not allowed: must be a number in (0, 1]"),
        ([*SAFETY, "safety.watchdog_s=0"], "safety.watchdog_s=0 is not allowed: must be a number in (0, inf) or null"),
        (
            [*SAFETY, "safety.workspace.low=[0, 0]", "safety.workspace.high=[1, 1, 1]"],
            "safety.workspace.low=[0,0] is not allowed: must be a list of 3 values",
        ),
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_range(overrides, refusal):
    with pytest.raises(ConfigError) as refused:
        load_config(overrides)
    assert refusal in str(refused.value)


def test_a_calibration_file_sets_the_workspace_box_and_the_command_line_wins(tmp_path):
    path = tmp_path / "calibration.yaml"
    box = {"low": [0.1, -0.1, 0.05], "high": [0.25, 0.1, 0.2]}
    OmegaConf.save({"safety": {"workspace": box}}, path)
    cfg = load_config([*SAFETY, f"hardware.calibration={path}"])
    assert OmegaConf.to_container(cfg.safety.workspace) == box
    given = {"low": [0.0, -0.2, 0.0], "high": [0.3, 0.2, 0.3]}
    cfg = load_config([*SAFETY, f"hardware.calibration={path}", f"safety.workspace={given}".replace("'", "")])
    assert OmegaConf.to_container(cfg.safety.workspace) == given
