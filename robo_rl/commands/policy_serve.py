"""`robo-rl policy serve <checkpoint>`: a base policy behind ZeroMQ (robo_rl/serving/) for actors whose machine has no
GPU: they act with `policy.base.kind=remote policy.base.path=tcp://<host>:<port>`. Off loopback it needs CURVE keys
(`robo-rl keys generate <dir> <actor>`, then `keys_dir=<dir>` here and `policy.base.curve_key=<dir>/<actor>.key_secret`
on the actor)."""

from __future__ import annotations

import logging
from pathlib import Path

from robo_rl.commands.common import UsageError, serve_until_interrupted

USAGE = (
    "usage: robo-rl policy serve <checkpoint> [kind=bc|lerobot] [host=127.0.0.1] [port=5610] [keys_dir=<dir>] "
    "[device=cpu|cuda] [task=<instruction>]"
)
OPTIONS = ("kind", "host", "port", "keys_dir", "device", "task")


def cmd_policy(args: list[str]) -> int:
    """robo-rl policy serve <checkpoint> [key=value ...]"""
    if not args or args[0] != "serve":
        raise UsageError(USAGE)
    path, o = _parse(args[1:])
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # refusals, as they come
    host, port = o.get("host", "127.0.0.1"), _port(o.get("port", "5610"))
    kind = o.get("kind") or ("lerobot" if (Path(path) / "config.json").is_file() else "bc")
    # checked before the policy loads: a refused address answers at once, not after a VLA's minute of loading
    from robo_rl.transport.security import CurveKeys, is_loopback

    try:
        curve = CurveKeys.load(o["keys_dir"], "learner") if o.get("keys_dir") else None
    except (FileNotFoundError, OSError, ValueError) as e:
        raise UsageError(f"keys_dir={o['keys_dir']}: {e}") from None
    if curve is None and not is_loopback(host):
        raise UsageError(
            f"refusing to serve on {host} without authentication: make keys with `robo-rl keys generate <dir> <actor>` "
            "and pass keys_dir=<dir> (the actor: policy.base.curve_key=<dir>/<actor>.key_secret), or serve on "
            "host=127.0.0.1"
        )
    import torch

    from robo_rl.serving.served import load_served
    from robo_rl.serving.server import PolicyServer

    device = o.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        served = load_served(kind, path, device, o.get("task"))
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"{path}: {e}") from None
    server = PolicyServer(served, host, port, curve)
    noise = "none" if served.noise_shape is None else "x".join(str(n) for n in served.noise_shape)
    print(
        f"policy server: {served.name} ({served.version}) on {server.address}, {device}: chunk {served.chunk_size} x "
        f"{served.action_dim}, noise {noise}, a guide {'steers its sampling' if served.guided else 'is blended in'}",
        flush=True,
    )
    return serve_until_interrupted(server)


def _parse(args: list[str]) -> tuple[str, dict[str, str]]:
    """The checkpoint (the one argument without `=`, or `path=`) and the key=value options."""
    paths, options = [], {}
    for a in args:
        key, eq, value = a.partition("=")
        if not eq:
            paths.append(a)
        elif key == "path":
            paths.append(value)
        elif key in OPTIONS:
            options[key] = value
        else:
            raise UsageError(f"'{a}' is not one of {', '.join(f'{k}=' for k in OPTIONS)}\n{USAGE}")
    if len(paths) != 1:
        raise UsageError(
            f"policy serve needs one checkpoint (a bc/policy.pt, a run folder or a pretrained_model folder)\n{USAGE}"
        )
    return paths[0], options


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UsageError(f"port={text} is not a port number in [1, 65535]")
    return int(text)
