"""A layout checked before anything starts (every process's config composes, actors agree with the learner) and
its run folder made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from launch.launcher.command_lines import Network, process_args
from launch.layout import Layout, LayoutError


@dataclass
class Prepared:
    """A checked layout with its run folder: what every launcher (local, SSH, Ray) starts from."""

    layout: Layout
    overrides: list[str]
    run_dir: Path
    base_seed: int
    total_env_steps: int


def prepare(layout: Layout, overrides: list[str], ports: dict) -> Prepared:
    """Check every process's config (a bad override is one line naming the process) before anything starts, then
    make the run folder (the learner's: a new one, or `run_dir=` / `resume=` as given) with its logs/ folder."""
    from robo_rl.config import ConfigError, config_hash, load_config
    from robo_rl.runs import new_run_dir

    cfgs = {}
    for p in layout.processes:
        if p.role == "critic":
            if not any(o.startswith("model=") for o in p.overrides):
                raise LayoutError(f"layout {layout.name}: {p.name}: a critic needs overrides: [model=<folder>]")
            continue
        args = process_args(layout, p, overrides, ports, Network(), None, 0)
        try:
            cfgs[p.name] = load_config(args[1:])
        except ConfigError as e:
            raise LayoutError(f"layout {layout.name}: {p.name}: {e}") from None
    cfg = cfgs[layout.learner.name]
    for p in layout.of_role("actor"):
        if config_hash(cfgs[p.name]) != config_hash(cfg):  # the learner would refuse its hello: say why now
            keys = ", ".join(_differing_keys(cfgs[p.name], cfg)[:3])
            raise LayoutError(
                f"layout {layout.name}: {p.name}: its env/policy config differs from the learner's in "
                f"{keys}: the learner would refuse it (config hash)"
            )
    if cfg.resume:
        run_dir = Path(cfg.resume)
    elif cfg.run_dir:
        run_dir = Path(cfg.run_dir)
    else:
        run_dir = new_run_dir(cfg.outputs_dir, cfg.name)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return Prepared(layout, overrides, run_dir, int(cfg.seed), int(cfg.train.total_env_steps))


def _differing_keys(a, b) -> list[str]:
    from omegaconf import OmegaConf

    from robo_rl.config import SHARED_KEYS

    def flat(node, prefix: str) -> dict:
        if not isinstance(node, dict):
            return {prefix: node}
        return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}.{key}").items()}

    fa, fb = (
        {k: v for key in SHARED_KEYS for k, v in flat(OmegaConf.to_container(c[key], resolve=True), key).items()}
        for c in (a, b)
    )
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
