"""`robo-rl data`: record, inspect and convert episodes."""

from __future__ import annotations

import json
from pathlib import Path

from robo_rl.errors import UserError

DATA_USAGE = """usage: robo-rl data <inspect|convert|record> ...

  inspect <path> [episodes=true] [json=true]
      episodes, lengths, success and interventions per partition (online, demos, interventions) of a run
      folder, a replay store, a LeRobot dataset folder, a robomimic .hdf5 file or a demonstration .npz
  convert <src> <dst> [to=lerobot|store] [fps=10] [task=...] [repo_id=local/robo_rl]
          [state_keys=k1,k2] [image_size=HxW] [filter_key=train] [flip_images=true]
      any of the above into a LeRobotDataset v3 folder (images as video) or a robo_rl replay store;
      state_keys/image_size/filter_key/flip_images apply when reading LeRobot or robomimic data
  record <dst> [hold_success=0] [config overrides, e.g. env=point_reach demos.num_episodes=50 demos.noise_std=0.1]
      scripted-expert episodes of a simulated task into a replay store (partition: demos); use it with
      demos.path=<dst> in training; hold_success=N (reward data) goes on N steps past the first success, so a
      success classifier gets more than one positive per episode (ended at the last success frame if lost)
"""


class DataUsageError(UserError, ValueError):
    pass


def _options(args: list[str]) -> tuple[list[str], dict[str, str]]:
    positional = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    return positional, options


def _import_options(opts: dict[str, str], kind: str) -> dict:
    out: dict = {}
    if "state_keys" in opts:
        out["state_keys"] = opts.pop("state_keys").split(",")
    if "image_size" in opts:
        h, _, w = opts.pop("image_size").partition("x")
        out["image_size"] = (int(h), int(w))
    if kind == "robomimic":
        if "filter_key" in opts:
            out["filter_key"] = opts.pop("filter_key")
        if "flip_images" in opts:
            out["flip_images"] = opts.pop("flip_images").lower() in ("1", "true", "yes")
    return out


def cmd_data(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(DATA_USAGE)
        return 0 if args else 2
    sub, rest = args[0], args[1:]
    commands = {"inspect": _inspect, "convert": _convert, "record": _record}
    if sub not in commands:
        raise DataUsageError(f"unknown data command '{sub}' (one of: {', '.join(commands)})")
    try:
        return commands[sub](rest)
    except (ValueError, FileExistsError) as e:  # importers name the file and the problem
        raise DataUsageError(str(e)) from None


def _inspect(args: list[str]) -> int:
    from robo_rl.data.datasets.io import describe_fields, detect_format, fields_of, load_episodes, summarize

    positional, opts = _options(args)
    if len(positional) != 1:
        raise DataUsageError("usage: robo-rl data inspect <path> [episodes=true] [json=true]")
    path = Path(positional[0])
    kind = detect_format(path)
    episodes = load_episodes(path, progress=False)
    summary = summarize(episodes)
    if opts.get("json", "").lower() == "true":
        print(json.dumps({"path": str(path), "format": kind, "partitions": summary}))
        return 0
    layout = f"; {describe_fields(fields_of(episodes[0].records))}" if episodes else ""
    print(f"{path} ({kind}): {len(episodes)} episodes{layout}")
    for partition, s in summary.items():
        print(
            f"  {partition:<13} {s['episodes']:>6} episodes {s['transitions']:>9} transitions  "
            f"length {s['length_mean']:.1f} [{s['length_min']}, {s['length_max']}]  "
            f"success {s['success_rate']:.2f}  with interventions {s['episodes_with_interventions']} "
            f"({s['intervention_steps']} steps)  ended by "
            + ", ".join(f"{why} {n}" for why, n in s["ended_by"].items())
        )
        if s["instructions"]:  # a multi-task dataset: its episodes per instruction
            print("    instructions: " + ", ".join(f"{text!r} {n}" for text, n in s["instructions"].items()))
    if opts.get("episodes", "").lower() == "true":
        for ep in episodes:
            print(
                f"    {ep.partition:<13} {ep.source or '-':<12} episode {int(ep.records['episode_id'][0]):>10} "
                f"length {len(ep):>5}  success {int(ep.success)}  interventions {ep.interventions}"
            )
    return 0


def _convert(args: list[str]) -> int:
    from robo_rl.data.datasets.io import detect_format, load_episodes, save_store

    positional, opts = _options(args)
    if len(positional) != 2:
        raise DataUsageError("usage: robo-rl data convert <src> <dst> [to=lerobot|store] [options]")
    src, dst = (Path(p) for p in positional)
    to = opts.pop("to", "lerobot")
    if to not in ("lerobot", "store"):
        raise DataUsageError(f"to={to}: convert writes 'lerobot' or 'store'")
    kind = detect_format(src)
    episodes = load_episodes(src, **_import_options(opts, kind))
    if not episodes:
        raise DataUsageError(f"{src} holds no episodes")
    if to == "store":
        partitions = {e.partition for e in episodes}
        save_store(episodes, dst, partition="demos" if partitions == {"demos"} else "online")
    else:
        from robo_rl.data.datasets.lerobot_v3 import export_lerobot

        export_lerobot(
            episodes,
            dst,
            repo_id=opts.pop("repo_id", "local/robo_rl"),
            fps=float(opts.pop("fps", 10)),
            task=opts.pop("task", ""),
        )
    if opts:
        print(f"note: options not used for this conversion: {', '.join(opts)}")
    print(f"wrote {len(episodes)} episodes ({sum(len(e) for e in episodes)} transitions) to {dst} ({to})")
    return 0


def _record(args: list[str]) -> int:
    from tqdm import tqdm

    from robo_rl.config import ConfigError, load_config, make_env, make_expert
    from robo_rl.data.datasets import Episode
    from robo_rl.data.datasets.io import save_store
    from robo_rl.data.demos import rollout_episode
    from robo_rl.data.schema import fields_for_env, stack_records
    from robo_rl.data.tasks import TaskTable

    positional, opts = _options(args)
    if len(positional) != 1:
        raise DataUsageError("usage: robo-rl data record <dst> [hold_success=N] [config overrides]")
    try:
        hold = int(opts.get("hold_success", 0))
        if hold < 0:
            raise ValueError
    except ValueError:
        raise DataUsageError(
            f"hold_success={opts['hold_success']}: a number of steps (0: end at the success)"
        ) from None
    cfg = load_config([a for a in args if "=" in a and not a.startswith("hold_success=")])
    if hold and "terminate_on_success" in cfg.env:
        cfg.env.terminate_on_success = False  # the episode goes on past the success: `rollout_episode` ends it
    if "expert" not in cfg.env:  # decided from the config: building a robot env would open the robot only to refuse it
        raise ConfigError(
            f"env {cfg.env._target_} has no scripted expert (env.expert) to record demonstrations with, as on a "
            "robot: record them with a device instead (robo-rl record <dst> human=keyboard episodes=20)"
        )
    env = make_env(cfg)
    expert = make_expert(cfg, env, noise_std=cfg.demos.noise_std, seed=cfg.demos.seed)
    fields = fields_for_env(env)
    episodes, tasks = [], TaskTable()
    for i in tqdm(range(cfg.demos.num_episodes), desc="recording", unit="ep", disable=not cfg.logger.progress):
        expert.reset()
        records, _ = rollout_episode(env, expert.act, cfg.demos.seed + i, i, hold_success=hold, tasks=tasks)
        instruction = tasks.name(records[0]["task"])
        episodes.append(Episode(stack_records(records, fields), "demos", "expert", instruction))
    env.close()
    save_store(episodes, positional[0], partition="demos", progress=False)
    wins = sum(e.success for e in episodes)
    print(f"recorded {len(episodes)} episodes ({wins} successful) to {positional[0]}")
    return 0
