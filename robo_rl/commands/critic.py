"""`robo-rl critic serve`: a saved reward model behind ZeroMQ (`robo_rl/rewards/remote.py`), for actors whose machine
has no GPU: they score through it with `reward=model reward.model=tcp://<host>:<port>`. Off loopback it needs CURVE
keys (`robo-rl keys generate <dir>`, then `keys_dir=<dir>`)."""

from __future__ import annotations

from robo_rl.commands.common import serve_until_interrupted
from robo_rl.commands.reward import RewardUsageError, key_value_options

USAGE = "usage: robo-rl critic serve model=<folder> [host=127.0.0.1] [port=5600] [keys_dir=]"
OPTIONS = ("model", "host", "port", "keys_dir")


def cmd_critic(args: list[str]) -> int:
    """robo-rl critic serve model=<folder> [host=127.0.0.1] [port=5600] [keys_dir=<dir>]"""
    if not args or args[0] != "serve":
        raise RewardUsageError(USAGE)
    o = key_value_options(args[1:], OPTIONS, USAGE)
    if "model" not in o:
        raise RewardUsageError("critic serve needs model=<a saved reward model folder>")
    # imported once the command line is good: a usage error answers without loading zmq or torch
    from robo_rl.rewards.base import load_model
    from robo_rl.rewards.remote import CriticServer
    from robo_rl.transport.security import CurveKeys

    curve = CurveKeys.load(o["keys_dir"], "learner") if o.get("keys_dir") else None
    server = CriticServer(load_model(o["model"]), o.get("host", "127.0.0.1"), int(o.get("port", 5600)), curve)
    print(
        f"critic: {o['model']} ({server.model.kind}, cameras {list(server.model.cameras)}) on "
        f"{o.get('host', '127.0.0.1')}:{o.get('port', 5600)}",
        flush=True,
    )
    return serve_until_interrupted(server)
