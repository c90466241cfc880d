"""The eval, bc, distill and gui blocks have one source, their typed configs (robo_rl/configs/eval.py, gui.py): the
composed config holds their defaults, a misspelt key is refused by name, a value out of range names its range."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest
from omegaconf import OmegaConf

from robo_rl.commands.eval import parse_request
from robo_rl.config import CONF_DIR, ConfigError, load_config, load_saved_config, save_config
from robo_rl.configs.eval import BCConfig, DistillConfig, EvalConfig
from robo_rl.configs.gui import GuiConfig
from robo_rl.configs.settings import SETTINGS
from robo_rl.configs.typed import defaults_of, settings_of

BLOCKS = {"eval": EvalConfig, "bc": BCConfig, "distill": DistillConfig, "gui": GuiConfig}


@pytest.mark.parametrize("prefix", sorted(BLOCKS))
def test_the_composed_block_is_its_dataclasss_defaults_and_no_yaml_repeats_them(prefix):
    cls = BLOCKS[prefix]
    assert prefix not in OmegaConf.load(CONF_DIR / "config.yaml")
    assert not OmegaConf.load(CONF_DIR / "bc" / "default.yaml"), "bc/default.yaml holds only its description"
    cfg = load_config(["experiment=rlpd"])  # an experiment that sets none of these blocks
    assert OmegaConf.to_container(cfg[prefix]) == defaults_of(cls)
    for name, s in settings_of(cls).items():  # each default in range, with a meaning, in the range table
        assert s.meaning and s.problem(defaults_of(cls)[name]) is None, name
        assert SETTINGS[f"{prefix}.{name}"] == s


def test_an_experiment_sets_only_what_differs_and_keeps_the_rest():
    cfg = load_config(["experiment=dsrl_lift"])
    assert cfg.bc.patience == 300 and cfg.bc.epochs == BCConfig.epochs and cfg.bc.flow_updates == BCConfig.flow_updates


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("eval.episode=3", "unknown config key 'eval.episode'; did you mean 'eval.episodes'?"),
        ("bc.patiense=5", "unknown config key 'bc.patiense'; did you mean 'bc.patience'?"),
        ("distill.iteration=5", "unknown config key 'distill.iteration'; did you mean 'distill.iterations'?"),
        ("gui.jpeg_qualty=80", "unknown config key 'gui.jpeg_qualty'; did you mean 'gui.jpeg_quality'?"),
    ],
)
def test_a_misspelt_key_is_refused_by_name(override, suggestion):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert suggestion in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("eval.workers=65", "eval.workers=65 is not allowed: must be an integer in [1, 64]"),
        ("eval.score=reward", "eval.score=reward is not allowed: must be env | human"),
        ("bc.lr=0", "bc.lr=0 is not allowed: must be a number in (0, 1]"),
        ("bc.hidden=[64,0]", "bc.hidden=[64,0] is not allowed: must be a list of values, each an integer in [1, inf)"),
        ("distill.batch_size=0", "distill.batch_size=0 is not allowed: must be an integer in [1, inf)"),
        ("gui.jpeg_quality=5", "gui.jpeg_quality=5 is not allowed: must be an integer in [10, 100]"),
        ("gui.deadman=stop", "gui.deadman=stop is not allowed: must be pause | continue"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_range(override, expected):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_a_saved_runs_null_distill_iterations_still_loads(tmp_path):
    save_config(load_config(["distill.iterations=null"]), tmp_path / "config.yaml")
    assert load_saved_config(tmp_path / "config.yaml").distill.iterations is None


def test_gui_true_is_short_for_gui_enabled_on_a_fresh_and_a_saved_config(tmp_path):
    assert load_config([]).gui.enabled is False
    cfg = load_config(["gui=true", "gui.port=9000"])
    assert cfg.gui.enabled is True and cfg.gui.port == 9000
    save_config(load_config([]), tmp_path / "config.yaml")
    assert load_saved_config(tmp_path / "config.yaml", ["gui=true"]).gui.enabled is True


def test_the_suite_runner_checks_its_eval_keys_against_the_typed_ranges():
    with pytest.raises(ConfigError, match=r"eval.workers=0 is not allowed: must be an integer in \[1, 64\]"):
        parse_request(["checkpoint=x.pt", "suite=pick_robustness", "eval.workers=0"])
    req = parse_request(["checkpoint=x.pt", "suite=pick_robustness", "eval.workers=2", "eval.seed=7"])
    assert (req.workers, req.seed, req.suite) == (2, 7, "pick_robustness")
