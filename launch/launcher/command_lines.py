"""The processes' command lines: what each `robo-rl <role> ...` is given (overrides, ports, run folder, seeds,
addresses, keys), and where its servers bind (`Network`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launch.launcher.ports import CRITIC_PORT
from launch.layout import Layout, Process, merge_overrides, override_key
from robo_rl.seeding import ACTOR_SEED_STRIDE

SEED_STRIDE = ACTOR_SEED_STRIDE  # actor i runs seed + i * SEED_STRIDE, as `robo-rl train train.actors=N` does


@dataclass
class Network:
    """Where each server binds and is reached; the defaults (None) keep the config's loopback binds."""

    learner_address: str | None = None
    gui_address: str | None = None
    critic_address: str = "127.0.0.1"
    keys_dirs: dict[str, str] = field(default_factory=dict)  # process name -> its CURVE keys folder


def process_args(
    layout: Layout, proc: Process, overrides: list[str], ports: dict, net: Network, run_dir: Path | None, base_seed: int
) -> list[str]:
    """The `robo-rl <role> ...` arguments of one process: the layout's shared overrides, the command line's, the
    process's own, then what the launch decides (ports, run folder, actor id and seed, addresses, keys)."""
    keys_dir = net.keys_dirs.get(proc.name)
    if proc.role == "critic":  # its own options, not config overrides: model=<folder> [host=] [port=] [keys_dir=]
        given = {override_key(o) for o in proc.overrides}
        extra = [f"port={ports[CRITIC_PORT]}"] if "port" not in given else []
        extra += [f"host={net.critic_address}"] if "host" not in given else []
        extra += [f"keys_dir={keys_dir}"] if keys_dir and "keys_dir" not in given else []
        return ["critic", "serve", *proc.overrides, *extra]
    chosen = [f"{k}={v}" for k, v in ports.items() if "." in k]
    mine = merge_overrides(layout.overrides, overrides, proc.overrides)
    keys = {override_key(o) for o in mine}
    launch = ["logger.progress=false", *chosen]
    if run_dir is not None and (proc.role == "learner" or (proc.role == "actor" and proc.host is None)):
        launch.append(f"run_dir={run_dir}")  # one run folder for all; an actor elsewhere has no such folder
    if net.learner_address:
        launch.append(f"transport.host={net.learner_address}")
    if net.gui_address:
        launch.append(f"gui.zmq_host={net.gui_address}")
    if keys_dir:
        launch.append(f"transport.curve_keys_dir={keys_dir}")
    if proc.role == "actor":
        launch.append(f"actor.id={proc.name}")
        if "seed" not in {override_key(o) for o in proc.overrides}:
            launch.append(f"seed={base_seed + SEED_STRIDE * (proc.actor_index or 0)}")
        if layout.of_role("gui"):
            launch.append("gui.enabled=true")
        critics = layout.of_role("critic")
        if critics and "reward.model" not in keys:
            port = dict(o.split("=", 1) for o in critics[0].overrides).get("port", ports.get(CRITIC_PORT))
            launch += ["reward=model", f"reward.model=tcp://{net.critic_address}:{port}"]
    return [proc.role, *merge_overrides(mine, launch)]


def arg_value(args: list[str], key: str) -> str:
    """The value a process's arguments give `key` (every port is in them: chosen, or pinned by an override)."""
    return [o.split("=", 1)[1] for o in args if override_key(o) == key][-1]
