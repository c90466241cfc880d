"""The run's own blocks (`train`, ...): one typed field per setting, with its default, range and meaning, the only
place they are written. `launch/conf/config.yaml` does not repeat them; an experiment's YAML sets what differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_rl.configs.typed import FIXED, setting


@dataclass
class TrainConfig:
    """The learner's budget and rhythm."""

    total_env_steps: int = setting(20000, "online env steps after which the learner stops the run", low=1)
    learning_starts: int = setting(500, "online steps collected before the first update", low=0)
    random_steps: int = setting(0, "first online steps taken with uniform random actions", low=0)
    utd: float = setting(
        1.0, "critic updates per received env step (update-to-data ratio), the learner keeps it", above=0, high=1000
    )
    weights_every_updates: int = setting(50, "publish the policy to actors every this many updates", low=1)
    checkpoint_every_env_steps: int = setting(5000, "write a checkpoint every this many env steps", low=1)
    actors: int = setting(
        1, "sim actor processes `robo-rl train` starts (actor-0, actor-1, ..., each its own seed)", low=1, high=64
    )


BLOCKS: dict[str, dict[str | None, type]] = {"train": {FIXED: TrainConfig}}
