"""Metric backends beside the run's metrics.jsonl: TensorBoard event files and Weights & Biases runs.

`metrics_writer(cfg, run_dir)` is what the learner calls: the JSONL file always (the training bar, the report
and resume read it), plus the backend chosen with `logger=tensorboard` or `logger=wandb`. Each backend's
package is imported only when it is chosen, so commands that do not log start fast.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robo_rl.runs import MetricsWriter

BACKENDS = ("jsonl", "tensorboard", "wandb")


def metrics_writer(cfg: DictConfig, run_dir: Path) -> MetricsWriter:
    """The run's metrics writer: <run_dir>/metrics.jsonl fanned out to `cfg.logger.backend`."""
    run_dir = Path(run_dir)
    backend = cfg.logger.backend
    if backend not in BACKENDS:
        from robo_rl.config import ConfigError

        raise ConfigError(f"logger.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    sinks = []
    if backend == "tensorboard":
        sinks.append(TensorBoardSink(run_dir / "tensorboard", flush_every_s=cfg.logger.flush_every_s))
    elif backend == "wandb":
        sinks.append(WandbSink(cfg, run_dir))
    return MetricsWriter(run_dir / "metrics.jsonl", sinks)


def scalars(record: dict, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a metrics record as flat `a/b/c` names (booleans as 0/1; text and nulls left out)."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(scalars(value, name))
        elif isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[name] = float(value)
    return out


def _tagged(record: dict) -> tuple[int | None, dict[str, float]]:
    """(env step, scalars named `<kind>/<key>`) of a record; the wall-clock time, the step and ids left out."""
    kind = record.get("kind", "metrics")
    step = record.get("env_steps")
    values = scalars({k: v for k, v in record.items() if k not in ("time", "kind", "env_steps", "episode_id")})
    return (int(step) if isinstance(step, (int, float)) else None), {f"{kind}/{k}": v for k, v in values.items()}


class TensorBoardSink:
    """Scalars to TensorBoard event files in <run>/tensorboard/, against env steps (`tensorboard --logdir`)."""

    def __init__(self, log_dir: Path, flush_every_s: float) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), flush_secs=max(1, round(flush_every_s)))

    def write(self, record: dict) -> None:
        step, values = _tagged(record)
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step, walltime=record.get("time"))

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A Weights & Biases run whose files live in <run>/wandb/ (offline with `logger.mode=offline` or
    WANDB_MODE=offline; `wandb sync` uploads them later). A resumed run folder continues the same W&B run."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        import wandb

        logger = cfg.logger
        run_dir = Path(run_dir).resolve()
        self.wandb = wandb
        self.run = wandb.init(
            dir=str(run_dir),
            project=logger.project,
            entity=logger.entity,
            group=logger.group,
            name=f"{run_dir.parent.name}/{run_dir.name}",
            id=hashlib.sha256(str(run_dir).encode()).hexdigest()[:16],  # one run folder, one W&B run
            resume="allow",
            mode=logger.mode,
            config=OmegaConf.to_container(cfg, resolve=True),
            settings=wandb.Settings(console="off", silent=True),
        )
        self.run.define_metric("*", step_metric="env_steps")

    def write(self, record: dict) -> None:
        step, values = _tagged(record)
        if values:
            self.run.log({**values, **({"env_steps": step} if step is not None else {})})

    def close(self) -> None:
        self.run.finish()
