"""`robo-rl show [overrides]`: the composed config and its hash."""

from __future__ import annotations


def cmd_show(overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    from robo_rl.config import config_hash, load_config

    cfg = load_config(overrides)
    print(OmegaConf.to_yaml(cfg), end="")
    print(f"# config hash: {config_hash(cfg)}")
    return 0
