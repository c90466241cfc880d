"""`robo-rl record <file.json> mode=reset [steps=300] [human=keyboard] [env=...]`: teach a reset trajectory once.

The task's env runs at its control rate under the first device `human` names (keyboard, gamepad, spacemouse,
leader_arm); the person drives the arm from where an episode leaves it to where the next should start, and presses
success (or lets `steps` run out) to end. Its poses are written to the file, which `env.reset_mode=taught
env.reset_trajectory=<file.json>` replays between episodes under the safety layer (robo_rl/envs/resets.py).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_STEPS = 300  # 30 s at 10 Hz: a person's reset move, ended earlier with a success press


def cmd_record_reset(dst: str, overrides: list[str], steps: int) -> int:
    from omegaconf import OmegaConf

    from robo_rl.config import ConfigError, load_config, make_env
    from robo_rl.teleop.devices import make_device
    from robo_rl.teleop.reset_teaching import record_reset_trajectory

    if Path(dst).exists():
        raise ConfigError(f"{dst} exists: choose a new file for the reset trajectory")
    if steps < 1:
        raise ConfigError(f"steps={steps}: a reset is taught over at least one step")
    defaults = {"human": "human=keyboard", "actor.realtime": "actor.realtime=true"}  # a person at the robot's pace
    overrides = [*(d for k, d in defaults.items() if not any(o.startswith(k + "=") for o in overrides)), *overrides]
    cfg = load_config([*overrides, "env.reset_mode=null"])  # the task's own env: nothing replays while teaching
    devices = OmegaConf.select(cfg, "human.devices", default=None)
    if not devices:
        raise ConfigError(
            "robo-rl record mode=reset needs a device: human=keyboard | gamepad | spacemouse | leader_arm"
        )
    env = make_env(cfg)
    try:
        device = make_device(OmegaConf.to_container(devices[0], resolve=True), env=env.unwrapped)
        env.reset(seed=int(cfg.seed))
        print(f"teaching a reset with {device.name}: drive the arm to where an episode should start, press success")
        path = record_reset_trajectory(env, device, dst, steps, realtime=bool(cfg.actor.realtime))
    finally:
        env.close()
    print(f"wrote {path}: replay it with env.reset_mode=taught env.reset_trajectory={path}")
    return 0
