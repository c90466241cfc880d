"""Settings are checked before anything runs: a value out of range, a misspelt key or group option is refused with
one line naming it; every setting of an env is in its YAML and reaches the env."""

import inspect
import os
import shutil

os.environ.setdefault("MUJOCO_GL", "egl")

import hydra.utils
import numpy as np
import pytest
from omegaconf import OmegaConf

import robo_rl.config
from robo_rl.cli import main
from robo_rl.config import CONF_DIR, ConfigError, group_options, load_config, load_saved_config, make_env, save_config
from robo_rl.configs.algo import ALGO_CONFIGS, PPOConfig, SACConfig
from robo_rl.configs.settings import SETTINGS
from robo_rl.configs.typed import config_from, defaults_of, settings_of


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("algo.batch_size=0", "algo.batch_size=0 is not allowed: must be an integer in [1, inf)"),
        ("train.total_env_steps=0", "train.total_env_steps=0 is not allowed: must be an integer in [1, inf)"),
        ("train.total_env_steps=-5", "train.total_env_steps=-5 is not allowed"),
        ("algo.gamma=1.5", "algo.gamma=1.5 is not allowed: must be a number in [0, 1]"),
        ("algo.lr_critic=0", "algo.lr_critic=0 is not allowed: must be a number in (0, 1]"),
        ("algo.batch_size=12.5", "algo.batch_size=12.5 is not allowed: must be an integer"),
        ("replay.online_fraction=nan", "replay.online_fraction=nan is not allowed"),
        ("replay.storage=dsik", "replay.storage=dsik is not allowed: must be ram | disk"),
        ("algo.critic_hidden=[256,0]", "algo.critic_hidden=[256,0] is not allowed"),
        ("transport.data_port=70000", "transport.data_port=70000 is not allowed: must be an integer in [1, 65535]"),
        ("env.cube_xy_range_m=[0.1]", "env.cube_xy_range_m=[0.1] is not allowed: must be a list of 2 values"),
        ("algo.critic_subsample=3", "algo.critic_subsample=3 must be at most algo.num_critics"),
    ],
)
def test_a_value_out_of_range_is_refused_with_key_value_and_range(override, expected):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_a_bad_value_stops_train_before_anything_starts(tmp_path, capsys):
    code = main(["train", "algo.batch_size=0", f"outputs_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "robo-rl train: error: algo.batch_size=0 is not allowed: must be an integer in [1, inf) "
        "(samples per gradient update)"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()  # no run folder, no demos


def test_a_resumed_or_evaluated_run_config_is_checked_too(tmp_path):
    save_config(load_config([]), tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match=r"eval.episodes=0 is not allowed"):
        load_saved_config(tmp_path / "config.yaml", ["eval.episodes=0"])
    with pytest.raises(ConfigError, match=r"unknown config key 'algo.batch_sise'.*did you mean 'algo.batch_size'"):
        load_saved_config(tmp_path / "config.yaml", ["algo.batch_sise=3"])
    with pytest.raises(ConfigError, match=r"a group option \(env=\.\.\.\) cannot change it"):
        load_saved_config(tmp_path / "config.yaml", ["env=point_reach"])  # was a traceback from make_env


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("algo.batch_sise=3", "unknown config key 'algo.batch_sise'; did you mean 'algo.batch_size'?"),
        ("trian.utd=2", "unknown config key 'trian.utd'; did you mean 'train.utd'?"),
        ("evn=point_reach", "unknown config key 'evn'; did you mean 'env'?"),
        ("env=pick_cub", "config group 'env' has no option 'pick_cub'; did you mean 'pick_cube'?"),
        ("experiment=reach_smok", "did you mean 'reach_smoke'?"),
    ],
)
def test_a_misspelt_key_or_option_gets_a_did_you_mean(override, suggestion):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert suggestion in str(e.value) and "\n" not in str(e.value)


def _numeric_leaves(node, prefix=""):
    """Dotted keys of every number or list of numbers (bools are not numbers here)."""
    for key, value in node.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _numeric_leaves(value, full + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield full
        elif isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            yield full


GROUPS = ("env", "algo", "policy", "experiment", "transport", "logger")
GROUP_OPTIONS = [(group, option) for group in GROUPS for option in group_options(group)]


@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS)
def test_every_numeric_setting_has_a_range_and_the_defaults_are_in_it(group, option):
    # the default experiment sets residual's algo and policy keys, which another refuses: an experiment setting none
    base = ["experiment=rlpd"] if group in ("algo", "policy") else []
    cfg = load_config([*base, f"{group}={option}"])  # the defaults pass the check
    leaves = set(_numeric_leaves(OmegaConf.to_container(cfg, resolve=True)))
    assert leaves - set(SETTINGS) == set(), "give these settings a range in robo_rl/configs/settings.py"


ENV_OPTIONS = sorted(group_options("env"))


@pytest.mark.parametrize("option", ENV_OPTIONS)
def test_every_constructor_argument_of_an_env_is_in_its_yaml(option):
    spec = load_config([f"env={option}"]).env  # its YAML completed with its dataclass's defaults
    env_class = hydra.utils.get_class(spec._target_)
    arguments = set(inspect.signature(env_class.__init__).parameters) - {"self"}
    assert arguments - set(spec) == set(), f"add these to its dataclass in robo_rl/configs/env.py ({option})"


def test_the_cube_spawn_range_and_size_are_set_from_the_command_line():
    cfg = load_config(["env.cube_xy_range_m=[0.15,0.15]", "env.cube_half_size_m=0.025", "env.cube_mass_kg=0.1"])
    env = make_env(cfg)
    offsets = []
    for seed in range(20):
        env.reset(seed=seed)
        cube = env.unwrapped.data.xpos[env.unwrapped.model.body("cube").id]
        offsets.append(cube[:2] - np.array(cfg.env.cube_center_xy_m))
        assert cube[2] == pytest.approx(0.025, abs=1e-6)  # resting on the table: z = half its edge
    offsets = np.abs(np.array(offsets))
    assert offsets.max() <= 0.15 + 1e-9
    assert (offsets > 0.1).any()  # beyond the default 0.1: the setting reached the env
    cube_geom = env.unwrapped.model.geom("cube")
    assert cube_geom.size == pytest.approx([0.025] * 3) and env.unwrapped.model.body("cube").mass[0] == 0.1
    env.close()


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        (
            "algo.image_augmentaton=none",
            "unknown config key 'algo.image_augmentaton'; did you mean 'algo.image_augmentation'?",
        ),
        ("algo.precison=float32", "unknown config key 'algo.precison'; did you mean 'algo.precision'?"),
        ("algo.share_encodr=true", "unknown config key 'algo.share_encodr'; did you mean 'algo.share_encoder'?"),
    ],
)
def test_a_misspelt_non_numeric_algo_key_is_refused_by_name(override, suggestion):
    with pytest.raises(ConfigError) as e:
        load_config(["experiment=rlpd", override])
    assert suggestion in str(e.value) and "\n" not in str(e.value)


def test_a_misspelt_algo_key_in_an_experiment_file_is_refused_by_name(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "experiment" / "typo.yaml").write_text(
        "# @package _global_\n# a misspelt key\nalgo:\n  image_augmentaton: null\n  batch_size: 64\n"
    )
    monkeypatch.setattr(robo_rl.config, "CONF_DIR", conf)
    with pytest.raises(
        ConfigError, match=r"unknown config key 'algo.image_augmentaton'; did you mean 'algo.image_augmentation'"
    ):
        load_config(["experiment=typo"])
    (conf / "experiment" / "typo.yaml").write_text("# @package _global_\n# fine\nalgo:\n  batch_size: 64\n")
    assert load_config(["experiment=typo"]).algo.batch_size == 64


def test_a_builder_refuses_a_key_its_config_does_not_have():
    with pytest.raises(ValueError, match=r"unknown config key 'algo.image_augmentaton'; did you mean"):
        config_from(SACConfig, {"name": "sac", "image_augmentaton": "none"}, "algo")
    with pytest.raises(ValueError, match=r"algo.clip=1 is not allowed: must be a number in \(0, 1\)"):
        config_from(PPOConfig, {"clip": 1}, "algo")
    assert config_from(SACConfig, {"critic_hidden": [64, 64]}, "algo").critic_hidden == (64, 64)


@pytest.mark.parametrize("target", sorted(ALGO_CONFIGS))
def test_every_algo_setting_has_a_default_in_range_a_meaning_and_reaches_the_composed_config(target):
    cls = ALGO_CONFIGS[target]
    fields = settings_of(cls)
    assert set(fields) == set(defaults_of(cls)), "every field is declared with setting()"
    for name, s in fields.items():
        assert s.meaning and s.problem(defaults_of(cls)[name]) is None, name
        assert SETTINGS[f"algo.{name}"].kind == s.kind
    option = next(
        o for o in group_options("algo") if OmegaConf.load(CONF_DIR / "algo" / f"{o}.yaml")._target_ == target
    )
    cfg = load_config(["experiment=rlpd", f"algo={option}"])
    assert {k: v for k, v in OmegaConf.to_container(cfg.algo).items() if k not in ("_target_", "name")} == defaults_of(
        cls
    ), "the YAML holds no value of its own: the composed block is the dataclass's defaults"


def test_a_setting_the_yaml_leaves_to_its_dataclass_is_set_without_a_plus():
    assert "lr_actor" not in OmegaConf.load(CONF_DIR / "algo" / "sac.yaml")
    cfg = load_config(
        ["experiment=rlpd", "algo.lr_actor=1e-3", "algo.critic_hidden=[64,64]", "algo.target_q_clip=null"]
    )
    assert cfg.algo.lr_actor == 1e-3 and list(cfg.algo.critic_hidden) == [64, 64] and cfg.algo.target_q_clip is None
    with pytest.raises(ConfigError, match=r"algo.lr_actor=0 is not allowed: must be a number in \(0, 1\]"):
        load_config(["experiment=rlpd", "algo.lr_actor=0"])


def test_a_run_saved_with_algo_sacs_unread_gripper_penalty_still_resumes(tmp_path):
    cfg = load_config(["experiment=rlpd"])
    save_config(cfg, tmp_path / "config.yaml")
    saved = OmegaConf.load(tmp_path / "config.yaml")
    saved.algo.gripper_penalty = -0.02  # what sac.yaml held before SACGripperConfig took it
    del saved.algo.share_encoder  # a setting added after the run was saved gets its default
    OmegaConf.save(saved, tmp_path / "config.yaml")
    resumed = load_saved_config(tmp_path / "config.yaml", ["algo.batch_size=64"])
    assert "gripper_penalty" not in resumed.algo and resumed.algo.share_encoder is False
    assert resumed.algo.batch_size == 64


def test_an_experiments_key_that_does_not_fit_the_chosen_algorithm_is_refused_naming_the_experiment():
    """`algo=sac` under the default (residual) experiment: its residual-only settings are refused, and the message
    says they came from the experiment (the user never typed them) and how to pick a matching one."""
    import pytest

    from robo_rl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"unknown config key 'algo\.\w+'.*set by experiment=residual_pick_cube"):
        load_config(["algo=sac"])
    assert load_config(["experiment=rlpd", "algo=sac"]).algo._target_.endswith("build_sac")


def test_a_config_composed_again_is_a_fresh_copy():
    """load_config composes a tree once per content and group options: what one caller changes, the next does not see
    (an edited YAML composing afresh: the experiment-file tests above rewrite one between two loads)."""
    first = load_config(["experiment=rlpd"])
    default_batch, default_x_range = first.algo.batch_size, first.env.cube_xy_range_m[0]
    first.algo.batch_size = default_batch + 1
    first.env.cube_xy_range_m[0] = default_x_range + 0.05
    again = load_config(["experiment=rlpd"])
    assert again.algo.batch_size == default_batch and again.env.cube_xy_range_m[0] == default_x_range
