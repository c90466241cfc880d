"""`robo-rl record`: demonstrations with a teleop device, into a replay store or a LeRobot dataset.

    robo-rl record <dst> [human=keyboard] [episodes=20] [keep=success|all] [format=store|lerobot] [env=...] ...
    robo-rl record <file.json> mode=reset [steps=300] [human=keyboard] [env=...]: teach a reset (record_reset.py)
    robo-rl record <dst> mode=dagger policy=<checkpoint or run> [human=dagger_leader] [keep=corrections|all]: a person
        corrects a policy: pause, the leader synced to the robot, correct, hand back (record_dagger.py)

The env runs at its control rate (`actor.realtime`, on by default here) under the device named by `human` (keyboard,
gamepad, spacemouse, web, leader_arm, or `sim` for the scripted expert); while the device is idle the arm holds
still and the gripper keeps its last command. The device's labels steer the session: success / failure end the
episode with that label, re-record discards it and records it again, abort (terminate_episode) discards it and
ends the session, e-stop ends the session. `keep=success` keeps only successful episodes (judged by the simulator
or labelled by the person). Each kept episode is written to disk before the next one starts, so stopping the
session (Ctrl-C included) loses at most the episode under way; `format=lerobot` collects them in a replay store
beside `<dst>` and converts it at the end. In simulation a window shows the person the scene (`gui.view_size` pixels
square; 0: none) where a display exists.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from robo_rl.commands.common import paced_episode
from robo_rl.errors import UserError

RECORD_USAGE = __doc__.split("\n\n", 2)[1]
OPTIONS = ("episodes", "keep", "format", "mode", "steps", "policy")


class RecordUsageError(UserError, ValueError):
    pass


class HoldStill:
    """The 'policy' between the human's commands: no motion, the gripper as last commanded."""

    def __init__(self, action_names: tuple[str, ...], action_dim: int) -> None:
        self.gripper = [i for i, n in enumerate(action_names) if n == "gripper"]
        self.action = np.zeros(action_dim, np.float32)
        self.action[self.gripper] = -1.0  # open

    def __call__(self) -> np.ndarray:
        return self.action.copy()

    def executed(self, action: np.ndarray) -> None:
        self.action[self.gripper] = np.asarray(action, np.float32)[self.gripper]


def record_episodes(
    env,
    store,
    episodes: int,
    keep: str = "success",
    seed: int = 0,
    realtime: bool = True,
    progress: bool = True,
    say=print,
    view=None,
) -> dict:
    """Run `env` (an InterventionWrapper) until `episodes` are kept in `store` or the person ends the session;
    `view()`, where given, shows the person the scene after each reset and step."""
    from tqdm import tqdm

    from robo_rl.data.schema import EpisodeRecorder, fields_for_env, stack_records

    fields = fields_for_env(env)
    recorder = EpisodeRecorder(env.action_space.shape[0])
    hold = HoldStill(tuple(getattr(env, "action_names", ())), env.action_space.shape[0])
    period = 1.0 / float(getattr(env, "control_hz", 10.0))
    counts = {"kept": 0, "discarded": 0, "rerecorded": 0, "attempts": 0}
    bar = tqdm(total=episodes, desc="episodes kept", unit="ep", disable=not progress)
    stop = None
    try:
        while counts["kept"] < episodes and stop is None:
            obs, _ = env.reset(seed=seed + counts["attempts"])
            counts["attempts"] += 1
            records = [recorder.reset(obs, counts["attempts"], 0, time.time())]
            if view is not None:
                view()

            def after_step(obs, reward, terminated, truncated, info, records=records):  # this episode's
                hold.executed(info["action_executed"])
                records.append(recorder.record_step(obs, reward, terminated, truncated, info, 0, time.time()))
                if view is not None:
                    view()

            info = paced_episode(env, obs, lambda _: hold(), after_step, period, realtime)
            ended = info.get("ended_by")
            if env.estopped:
                stop = f"e-stop from {env.estopped}"
            elif ended == "human_rerecord":
                counts["rerecorded"] += 1
                say(f"episode {counts['attempts']}: discarded, recording it again")
            elif ended == "human_abort":
                stop = "aborted by the person (terminate_episode)"
            elif keep == "success" and not info.get("success", False):
                counts["discarded"] += 1
                say(f"episode {counts['attempts']}: not a success ({ended}), discarded (keep=success)")
            else:
                batch = stack_records(records, fields)
                if len(recorder.tasks) != len(store.tasks):  # the instructions its records index, on disk first
                    store.save_tasks(recorder.tasks.names)
                store.write(batch, np.full(len(records), "human", dtype=object))  # on disk before the next one
                counts["kept"] += 1
                bar.update(1)
    except KeyboardInterrupt:
        stop = "interrupted (Ctrl-C)"
    finally:
        bar.close()
    counts["stopped"] = stop or "done"
    return counts


def cmd_record(args: list[str]) -> int:
    from omegaconf import OmegaConf

    from robo_rl.config import ConfigError, load_config
    from robo_rl.data.schema import fields_for_env
    from robo_rl.data.storage import SegmentStore
    from robo_rl.envs.wrappers import make_actor_env
    from robo_rl.teleop.intervention import InterventionWrapper

    positional = [a for a in args if "=" not in a]
    options = {k: v for k, v in (a.split("=", 1) for a in args if "=" in a) if k in OPTIONS}
    overrides = [a for a in args if "=" in a and a.split("=", 1)[0] not in OPTIONS]
    if len(positional) != 1:
        raise RecordUsageError(f"usage: {RECORD_USAGE.strip()}")
    if options.get("mode", "episodes") != "episodes":  # mode=reset: a reset trajectory, taught once
        from robo_rl.commands.record_reset import DEFAULT_STEPS, cmd_record_reset

        if options["mode"] == "dagger":  # a policy acts, a person corrects it
            from robo_rl.commands.record_dagger import cmd_record_dagger

            return cmd_record_dagger(positional[0], overrides, options)
        if options["mode"] != "reset":
            raise RecordUsageError(
                f"mode={options['mode']}: episodes (demonstrations), reset (a reset trajectory) or dagger (corrections)"
            )
        return cmd_record_reset(positional[0], overrides, int(options.get("steps", DEFAULT_STEPS)))
    fmt, keep = options.get("format", "store"), options.get("keep", "success")
    if fmt not in ("store", "lerobot") or keep not in ("success", "all"):
        raise RecordUsageError("format must be store or lerobot, keep success or all")
    if not any(o.startswith("human=") for o in overrides):
        overrides.append("human=keyboard")
    if not any(o.startswith("actor.realtime=") for o in overrides):
        overrides.append("actor.realtime=true")  # a person drives at the robot's pace
    cfg = load_config(overrides)
    if not OmegaConf.select(cfg, "human._target_", default=None):
        raise ConfigError(
            "robo-rl record needs a device: human=keyboard | gamepad | spacemouse | web | leader_arm | sim"
        )
    episodes = int(options.get("episodes", cfg.demos.num_episodes))
    dst = Path(positional[0])
    store_dir = dst if fmt == "store" else dst.with_name(dst.name + ".store")
    for path in {dst, store_dir}:
        if path.exists() and any(path.iterdir()):
            raise RecordUsageError(f"{path} exists and is not empty: choose a new folder")
    env = make_actor_env(OmegaConf.merge(cfg, {"actor": {"wrappers": ["human"]}}))
    wrapper = env if isinstance(env, InterventionWrapper) else None
    if wrapper is None or not wrapper.devices:
        env.close()
        kinds = ", ".join(str(d.kind) for d in cfg.human.devices)
        raise ConfigError(f"no teleop device could be opened ({kinds}); see the error above")
    store = SegmentStore(store_dir, fields_for_env(env), partition="demos")
    from robo_rl.configs.gui import AUTO_VIEW_SIZE
    from robo_rl.gui.scene_window import open_scene_window

    size = AUTO_VIEW_SIZE if cfg.gui.view_size is None else int(cfg.gui.view_size)
    window = open_scene_window(env, size, f"robo-rl record: {store_dir.name}")  # before "recording": then it runs
    print(
        f"recording {episodes} episodes of {cfg.env._target_.rsplit('.', 1)[-1]} with "
        f"{', '.join(d.name for d in wrapper.devices)} into {store_dir}",
        flush=True,
    )
    try:
        counts = record_episodes(
            wrapper,
            store,
            episodes,
            keep,
            cfg.demos.seed,
            bool(cfg.actor.realtime),
            progress=cfg.logger.progress,
            view=window.show if window is not None else None,
        )
    finally:
        if window is not None:
            window.close()
        env.close()
    print(
        f"kept {counts['kept']} episodes ({counts['discarded']} discarded, {counts['rerecorded']} re-recorded); "
        f"{counts['stopped']}"
    )
    if fmt == "lerobot" and counts["kept"]:
        from robo_rl.data.datasets.io import load_episodes
        from robo_rl.data.datasets.lerobot_v3 import export_lerobot

        export_lerobot(
            load_episodes(store_dir, progress=False),
            dst,
            fps=float(cfg.env.get("control_hz", 10)),
            task=str(getattr(wrapper.unwrapped, "task_description", "")),
            progress=cfg.logger.progress,
        )
        print(f"wrote the LeRobot dataset {dst} (the replay store {store_dir} keeps the same episodes)")
    return 0 if counts["kept"] or counts["stopped"] == "done" else 1
