"""The policies' typed configs (robo_rl/configs/policy.py) are the one source of their settings: each option's YAML
holds only what differs, a misspelt or out-of-range key is refused by name, and each dataclass names exactly what its
class's constructor takes."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest
from omegaconf import OmegaConf

from robo_rl.config import CONF_DIR, ConfigError, load_config
from robo_rl.configs.policy import BLOCKS, EncoderConfig, PolicyEncoderConfig
from robo_rl.configs.typed import FIXED, LABEL_KEYS, defaults_of

OPTIONS = sorted(p.stem for p in (CONF_DIR / "policy").glob("*.yaml"))
# constructor parameters a config never holds: the env's spaces (given by make_policy) and Python objects
NOT_SETTINGS = {"observation_space", "action_dim", "generator"}


def _compose(option: str) -> dict:
    """`policy=<option>` under an experiment that sets no policy key."""
    # the overrides in the order tests/test_settings.py gives them: one composition serves both
    return OmegaConf.to_container(load_config(["experiment=rlpd", f"policy={option}"]).policy, resolve=True)


def _written(option: str) -> dict:
    """What the option's YAML (and the options it extends) writes, before the dataclasses complete it."""
    raw = OmegaConf.load(CONF_DIR / "policy" / f"{option}.yaml")
    written = {}
    for parent in raw.get("defaults", []):
        if parent != "_self_":
            written = OmegaConf.to_container(OmegaConf.merge(written, _written(parent)))
    raw.pop("defaults", None)
    return OmegaConf.to_container(OmegaConf.merge(written, raw))


def _sub_blocks(block: dict, written: dict, cls: type, prefix: str):
    """(prefix, composed, written, dataclass) for the block and each typed sub-block its YAML has."""
    yield prefix, block, written, cls
    for name in getattr(cls, "blocks", ()):
        sub = BLOCKS.get(f"{prefix}.{name}", {}).get(FIXED)
        if sub is not None and name in written:
            yield from _sub_blocks(block[name], written[name] or {}, sub, f"{prefix}.{name}")


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_composes_to_its_dataclass_defaults_and_its_yaml_writes_only_what_differs(option):
    composed, written = _compose(option), _written(option)
    cls = BLOCKS["policy"][composed["_target_"]]
    seen = []
    for prefix, block, wrote, typed in _sub_blocks(composed, written, cls, "policy"):
        seen.append(prefix)
        for key, default in defaults_of(typed).items():
            if key in wrote:
                assert wrote[key] != default, f"{option}.yaml repeats {prefix}.{key}'s default {default}"
            assert block[key] == wrote.get(key, default), f"{prefix}.{key}"
        extra = set(block) - set(defaults_of(typed)) - set(LABEL_KEYS) - set(getattr(typed, "blocks", ()))
        assert not extra, f"{prefix} holds keys its dataclass does not know: {extra}"
    assert ("policy.encoder" in seen) == ("encoder" in written)


def test_the_encoder_settings_default_to_what_the_encoders_use_without_a_config():
    typed, torch_side = defaults_of(PolicyEncoderConfig), dataclasses.asdict(EncoderConfig())
    assert {k: torch_side[k] for k in typed} == typed
    assert set(torch_side) - set(typed) == set(PolicyEncoderConfig.blocks)  # crops: a mapping, kept as a block


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("policy.scael=0.2", "policy.scale"),
        ("policy.encoder.chanels=16", "policy.encoder.channels"),
        ("policy.base.pth=/tmp/base.pt", "policy.base.path"),
    ],
)
def test_a_misspelt_policy_key_is_refused_by_name_with_the_closest_one(override, suggestion):
    key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"unknown config key '{key}'; did you mean '{suggestion}'\?"):
        load_config([override])


def test_a_misspelt_key_in_a_chain_policys_model_block_is_refused_too():
    with pytest.raises(ConfigError, match=r"'policy.model.chunk'; did you mean 'policy.model.chunk_size'\?"):
        load_config(["experiment=reinflow_pick_cube", "policy.model.chunk=8"])


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["policy.scale=5"], r"policy.scale=5 is not allowed: must be a number in \(0, 2\]"),
        (["policy.encoder.features=0"], r"policy.encoder.features=0 is not allowed: must be an integer in \[1, inf\)"),
        (
            ["experiment=rlpd", "policy=dppo", "policy.sigma_min=0"],
            r"policy.sigma_min=0 is not allowed: must be a number in \(0, 1\]",
        ),
        (
            ["experiment=rlpd", "policy=flow", "policy.kind=ddpm"],
            r"policy.kind=ddpm is not allowed: must be flow \| diffusion",
        ),
        (["policy.encoder.resize=[64]"], r"must be a list of 2 values, each an integer in \[1, inf\) or null"),
    ],
)
def test_an_out_of_range_policy_setting_is_refused_naming_its_range(overrides, refusal):
    with pytest.raises(ConfigError, match=refusal):
        load_config(overrides)


def test_an_experiments_policy_key_under_another_policy_is_refused_by_name():
    # the default experiment sets the residual's bound; a flow policy has none
    with pytest.raises(ConfigError, match=r"unknown config key 'policy.scale'.*GenerativePolicyConfig has no such"):
        load_config(["policy=flow"])
    assert load_config(["experiment=rlpd", "policy=flow"]).policy.kind == "flow"


def test_relations_between_policy_settings_still_hold():
    with pytest.raises(ConfigError, match=r"policy.sigma_min=0.2 must be at most policy.sigma_max \(policy.sigma_max"):
        load_config(["experiment=rlpd", "policy=reinflow", "policy.sigma_min=0.2"])
    with pytest.raises(ConfigError, match=r"policy.log_std_min=3.0 must be below policy.log_std_max"):
        load_config(["experiment=rlpd", "policy.log_std_min=3.0"])


def test_a_policy_setting_the_yaml_leaves_to_its_dataclass_is_set_without_plus():
    cfg = load_config(["experiment=rlpd", "policy.epsilon=0.3", "policy=hybrid_gripper", "policy.encoder.freeze=true"])
    assert cfg.policy.epsilon == 0.3 and cfg.policy.encoder.freeze is True


@pytest.mark.parametrize("target", sorted(BLOCKS["policy"]))
def test_each_policy_dataclass_names_exactly_the_keys_its_class_takes(target):
    module, _, name = target.rpartition(".")
    params = set(inspect.signature(getattr(importlib.import_module(module), name)).parameters) - NOT_SETTINGS
    cls = BLOCKS["policy"][target]
    assert {f.name for f in dataclasses.fields(cls)} | set(cls.blocks) == params
