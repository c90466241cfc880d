"""The run's own blocks (replay, demos, actor, hardware, transport, logger) have one source, their dataclass in
robo_rl/configs/run.py: the YAML repeats none of their settings, the composed config holds every default, a misspelt
key is refused by name with a did-you-mean (from the command line, an experiment's YAML or a saved run's config) and
a value out of range is refused naming its range."""

import os
import shutil

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest
from omegaconf import OmegaConf

import robo_rl.config
from robo_rl.cli import main
from robo_rl.config import CONF_DIR, ConfigError, load_config, load_saved_config, save_config
from robo_rl.configs.run import BLOCKS, LoggerConfig
from robo_rl.configs.settings import SETTINGS
from robo_rl.configs.typed import defaults_of, settings_of

RUN_BLOCKS = ("replay", "demos", "actor", "hardware", "transport", "logger")
BASE = ["experiment=rlpd"]  # an experiment that sets none of these blocks' keys

# One misspelt key per block, the setting it should be taken for and a value that setting allows.
TYPOS = {
    "replay": ("capacty", "capacity", 1),
    "demos": ("num_episode", "num_episodes", 1),
    "actor": ("heartbeat_every", "heartbeat_every_s", 1),
    "hardware": ("dry_runn", "dry_run", True),
    "transport": ("data_prot", "data_port", 1),
    "logger": ("log_evry_s", "log_every_s", 1),
}


def cls_of(prefix):
    (cls,) = BLOCKS[prefix].values()
    return cls


@pytest.mark.parametrize("prefix", RUN_BLOCKS)
def test_the_composed_block_is_its_dataclasss_defaults_and_no_yaml_repeats_them(prefix):
    cfg = load_config(BASE)
    assert OmegaConf.to_container(cfg[prefix]) == defaults_of(cls_of(prefix))
    assert prefix not in OmegaConf.load(CONF_DIR / "config.yaml")
    for s in settings_of(cls_of(prefix)).values():
        assert s.meaning and "\n" not in s.meaning
    for name, s in settings_of(cls_of(prefix)).items():
        assert SETTINGS[f"{prefix}.{name}"] == s  # the range table's entry is the field's, not a second one


def test_each_group_option_holds_only_what_it_differs_in():
    assert not OmegaConf.load(CONF_DIR / "transport" / "local.yaml")
    assert not OmegaConf.load(CONF_DIR / "logger" / "default.yaml")
    defaults = defaults_of(LoggerConfig)
    for backend in ("tensorboard", "wandb"):
        assert OmegaConf.to_container(OmegaConf.load(CONF_DIR / "logger" / f"{backend}.yaml")) == {"backend": backend}
        composed = OmegaConf.to_container(load_config([*BASE, f"logger={backend}"]).logger)
        assert composed == {**defaults, "backend": backend}


def test_a_setting_is_set_without_a_plus_and_reaches_the_config():
    cfg = load_config(
        [*BASE, "replay.capacity=5", "actor.wrappers=[human]", "logger.flush_every_s=3", "transport.host=10.0.0.2"]
    )
    assert cfg.replay.capacity == 5 and list(cfg.actor.wrappers) == ["human"]
    assert cfg.logger.flush_every_s == 3 and cfg.transport.host == "10.0.0.2"


@pytest.mark.parametrize("prefix", RUN_BLOCKS)
def test_a_misspelt_key_on_the_command_line_is_refused_with_a_did_you_mean(prefix):
    typo, meant, value = TYPOS[prefix]
    with pytest.raises(ConfigError) as e:
        load_config([*BASE, f"{prefix}.{typo}={str(value).lower()}"])
    assert f"unknown config key '{prefix}.{typo}'; did you mean '{prefix}.{meant}'?" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("prefix", RUN_BLOCKS)
def test_a_misspelt_key_in_an_experiment_yaml_is_refused_with_a_did_you_mean(prefix, tmp_path, monkeypatch):
    typo, meant, value = TYPOS[prefix]
    yaml_value = str(value).lower()
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "experiment" / "typo.yaml").write_text(
        f"# @package _global_\n# a misspelt key\n{prefix}:\n  {typo}: {yaml_value}\n"
    )
    monkeypatch.setattr(robo_rl.config, "CONF_DIR", conf)
    with pytest.raises(ConfigError, match=rf"unknown config key '{prefix}.{typo}'; did you mean '{prefix}.{meant}'"):
        load_config(["experiment=typo"])
    (conf / "experiment" / "typo.yaml").write_text(f"# @package _global_\n# fine\n{prefix}:\n  {meant}: {yaml_value}\n")
    assert load_config(["experiment=typo"])[prefix][meant] == value


@pytest.mark.parametrize("prefix", RUN_BLOCKS)
def test_a_misspelt_key_in_a_saved_runs_config_is_refused_on_resume(prefix, tmp_path):
    typo, meant, value = TYPOS[prefix]
    save_config(load_config(BASE), tmp_path / "config.yaml")
    saved = OmegaConf.load(tmp_path / "config.yaml")
    saved[prefix][typo] = value
    OmegaConf.save(saved, tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match=rf"unknown config key '{prefix}.{typo}'; did you mean '{prefix}.{meant}'"):
        load_saved_config(tmp_path / "config.yaml")


def test_a_saved_run_without_a_block_gets_its_defaults_on_resume(tmp_path):
    save_config(load_config(BASE), tmp_path / "config.yaml")
    saved = OmegaConf.load(tmp_path / "config.yaml")
    del saved.logger.flush_every_s  # a setting added after the run was saved
    del saved["hardware"]
    OmegaConf.save(saved, tmp_path / "config.yaml")
    resumed = load_saved_config(tmp_path / "config.yaml", ["replay.capacity=7"])
    assert resumed.logger.flush_every_s == 10.0 and resumed.hardware.dry_run is False
    assert resumed.replay.capacity == 7


def test_a_resume_given_a_typed_block_as_a_mapping_agrees_with_the_fresh_config_its_actor_composed(tmp_path):
    # `train` restarts a crashed learner as resume=<run> plus the run's own keys: env.randomize={...} must make the
    # block a fresh config makes (the others at their defaults), or the actor is refused for a config hash mismatch
    from robo_rl.config import config_hash

    given = [*BASE, "env.randomize={object_mass_scale: [0.5, 2.0], friction_scale: [0.7, 1.3]}"]
    fresh = load_config(given)
    save_config(fresh, tmp_path / "config.yaml")
    keys = [g for g in given if not g.startswith("experiment=")]
    resumed = load_saved_config(tmp_path / "config.yaml", keys)
    assert resumed.env.randomize == fresh.env.randomize and resumed.env.randomize.control_jitter == 0.0
    assert config_hash(resumed) == config_hash(fresh)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("replay.online_fraction=1.5", "replay.online_fraction=1.5 is not allowed: must be a number in [0, 1]"),
        ("replay.storage=ssd", "replay.storage=ssd is not allowed: must be ram | disk"),
        ("demos.num_episodes=-1", "demos.num_episodes=-1 is not allowed: must be an integer in [0, inf)"),
        ("actor.num_envs=0", "actor.num_envs=0 is not allowed: must be an integer in [1, 256]"),
        ("actor.apply_weights=never", "actor.apply_weights=never is not allowed: must be step | episode"),
        ("actor.wrappers=[1]", "actor.wrappers=[1] is not allowed: must be a list of values, each text"),
        ("hardware.dry_run=3", "hardware.dry_run=3 is not allowed: must be true | false"),
        ("transport.data_port=0", "transport.data_port=0 is not allowed: must be an integer in [1, 65535]"),
        ("transport.max_message_mb=0", "transport.max_message_mb=0 is not allowed: must be a number in (0, inf)"),
        ("logger.log_every_s=0", "logger.log_every_s=0 is not allowed: must be a number in (0, inf)"),
        ("logger.level=LOUD", "logger.level=LOUD is not allowed: must be DEBUG | INFO | WARNING | ERROR"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_range(override, expected):
    with pytest.raises(ConfigError) as e:
        load_config([*BASE, override])
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_robo_rl_show_lists_every_setting_of_the_run_blocks(capsys):
    assert main(["show", *BASE]) == 0
    shown = OmegaConf.create(capsys.readouterr().out)
    for prefix in RUN_BLOCKS:
        assert OmegaConf.to_container(shown[prefix]) == defaults_of(cls_of(prefix)), prefix
