"""`robo-rl keys generate <dir> [actor ids ...]`: CURVE key pairs for links off loopback."""

from __future__ import annotations

from pathlib import Path

from robo_rl.commands.common import UsageError


def cmd_keys(args: list[str]) -> int:
    if len(args) < 2 or args[0] != "generate":
        raise UsageError("usage: robo-rl keys generate <dir> [actor ids ...] (default actor id: actor-0)")
    from robo_rl.transport.security import generate_keys

    keys_dir, actors = args[1], args[2:] or ["actor-0"]
    try:
        files = generate_keys(keys_dir, actors)
    except FileExistsError as e:
        raise UsageError(str(e)) from None
    for f in files:
        print(f)
    folder = Path(keys_dir)  # `keys/` as typed prints keys/authorized/, not keys//authorized/
    print(
        f"the learner accepts the actors whose public keys are in {folder / 'authorized'}/; "
        f"copy {folder / 'learner.key'} and each actor's own .key/.key_secret to its machine, "
        f"and set transport.curve_keys_dir={keys_dir} on both sides"
    )
    return 0
