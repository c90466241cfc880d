"""Start LeRobot 0.6.1's own HIL-SERL learner or actor, unchanged, with one workaround for a config bug.

    python bench/lerobot_hilserl/hilserl_launch.py learner --config_path CFG.json  # == python -m lerobot.rl.learner ...
    python bench/lerobot_hilserl/hilserl_launch.py actor   --config_path CFG.json  # == python -m lerobot.rl.actor ...

The workaround: `TrainRLServerPipelineConfig` declares `dataset: DatasetConfig | None = None` ("In RL, we don't need
an offline dataset") and the learner handles `cfg.dataset is None`, but its `validate()` calls
`TrainPipelineConfig.validate()`, which dereferences `self.dataset.repo_id` and raises
`AttributeError: 'NoneType' object has no attribute 'repo_id'` (huggingface/lerobot issue #1546, still in 0.6.1).
For an online-only run (no demonstrations) validate() therefore gets a placeholder DatasetConfig for the duration of
the parent's checks only, and `cfg.dataset` is None again before anything else reads it, so the learner builds no
offline buffer.

Optional env override (run.py sets it; absent = LeRobot's stock env): LeRobot's `make_robot_env` builds the sim as
`gym.make(f"gym_hil/{task}", image_obs=True, render_mode="human", use_gripper=..., gripper_penalty=...)`, i.e. it
always renders both 128x128 cameras (about 0.5 CPU-s per step here, software EGL: 10k steps would take hours) and,
with image_obs=True, gym-hil drops the block position from the observation; gym-hil's block is also fixed at
(0.5, 0) unless `random_block_position=True`. If $LEROBOT_GYM_HIL_OVERRIDES holds a JSON object, its keys replace
those keyword arguments in every `gym.make("gym_hil/...")` call of this process (e.g. image_obs=false,
random_block_position=true); LeRobot's processors then map agent_pos -> observation.state and environment_state ->
observation.environment_state as usual. Nothing else is patched: LeRobot's own `train_cli` / `actor_cli` run as is.
"""

from __future__ import annotations

import sys


def _patch_validate() -> None:
    from lerobot.configs.default import DatasetConfig
    from lerobot.rl.train_rl import TrainRLServerPipelineConfig

    original = TrainRLServerPipelineConfig.validate

    def validate(self) -> None:
        if self.dataset is not None:
            return original(self)
        self.dataset = DatasetConfig(repo_id="online_only/no_dataset")  # never loaded: reset to None below
        try:
            original(self)
        finally:
            self.dataset = None

    TrainRLServerPipelineConfig.validate = validate


def _patch_gym_hil_make(overrides: dict) -> None:
    import gymnasium

    original_make = gymnasium.make

    def make(env_id, *args, **kwargs):
        if isinstance(env_id, str) and env_id.startswith("gym_hil/"):
            kwargs.update(overrides)
        return original_make(env_id, *args, **kwargs)

    gymnasium.make = make  # lerobot.rl.gym_manipulator calls gym.make through the module attribute


def gym_hil_overrides_from_env() -> dict:
    import json
    import os

    raw = os.environ.get("LEROBOT_GYM_HIL_OVERRIDES", "").strip()
    return json.loads(raw) if raw else {}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("learner", "actor"):
        raise SystemExit("usage: hilserl_launch.py {learner,actor} --config_path CFG.json")
    role = sys.argv.pop(1)
    _patch_validate()
    overrides = gym_hil_overrides_from_env()
    if overrides:
        _patch_gym_hil_make(overrides)
    if role == "learner":
        import logging

        from lerobot.rl.learner import train_cli

        train_cli()
        logging.info("[LEARNER] main finished")
    else:
        from lerobot.rl.actor import actor_cli

        actor_cli()


if __name__ == "__main__":
    main()
