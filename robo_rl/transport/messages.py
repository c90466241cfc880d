"""The message kinds of each channel and the fields of their `meta`, checked before any field is used.

A message that decodes (see `codec.py`) is still only bytes a stranger chose: every field that the
receiving side reads is checked here for its type and range, so a handler never meets a list where it
expects a map, a negative sequence number, or bytes in a heartbeat's stats. Fields a kind does not list
are ignored (a newer sender may add some); a listed field that is required and missing, or of the
wrong type, makes the message a counted drop with the reason.
"""

from __future__ import annotations

import math

from robo_rl.transport.errors import MessageError


class InvalidMessage(MessageError):
    """A well-formed message of a kind this channel does not take, or whose fields have the wrong types."""


MAX_TEXT = 1000  # characters in a reason or hash
MAX_ID = 128  # characters in an actor id
MAX_STATS = 64  # entries in a heartbeat's stats
MAX_LAYOUT = 10_000  # arrays in a shared-memory weights notice
MAX_SPEC = 20_000  # characters of an env spec in a hello
INT64 = 2**63


def _int(low: int | None = None):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or not -INT64 <= v < INT64:
            return "an integer"
        if low is not None and v < low:
            return f"an integer >= {low}"
        return None

    return check


def _number(v):
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not math.isfinite(v)):
        return "a finite number"
    return None


def _text(limit: int = MAX_TEXT):
    def check(v):
        return None if isinstance(v, str) and len(v) <= limit else f"a string of at most {limit} characters"

    return check


def _actor_id(v):
    if not isinstance(v, str) or not 0 < len(v) <= MAX_ID or not v.isprintable():
        return f"a printable actor id of 1-{MAX_ID} characters"
    return None


def _bool(v):
    return None if isinstance(v, bool) else "true or false"


def _stats(v):
    """A heartbeat's stats: a small map of names to numbers (NaN too: the metrics file writes it as null), short
    texts, booleans or null. A heartbeat that fails this is dropped, so its actor soon counts as lost."""
    if not isinstance(v, dict) or len(v) > MAX_STATS:
        return f"a map of at most {MAX_STATS} entries"
    for key, value in v.items():
        if not isinstance(key, str) or len(key) > MAX_ID:
            return "a map with short text keys"
        if value is not None and not isinstance(value, bool | float) and _int()(value) and _text(200)(value):
            return f"a map of numbers, booleans or short texts (entry '{key}' is {type(value).__name__})"
    return None


def _layout(v):
    """A shared-memory weights layout: [[name, dtype, shape, offset], ...] (checked in depth by the reader)."""
    if not isinstance(v, list) or len(v) > MAX_LAYOUT:
        return f"a list of at most {MAX_LAYOUT} array entries"
    for entry in v:
        if (
            not isinstance(entry, list)
            or len(entry) != 4
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], str)
            or not isinstance(entry[2], list)
            or _int(0)(entry[3])
            or any(_int(0)(s) for s in entry[2])
        ):
            return "a list of [name, dtype, shape, offset] entries"
    return None


# kind → {field: (check, required)}
_ACK = {
    "incarnation": (_int(), True),
    "session": (_int(), True),
    "acked": (_int(0), True),
    "received": (_int(0), False),
}
SCHEMAS: dict[str, dict[str, tuple]] = {
    # actor → learner, data channel
    "steps": {
        "actor": (_actor_id, True),
        "session": (_int(), True),
        "seq": (_int(1), True),
        "token": (_text(64), True),
        "policy_version": (_int(), False),
    },
    # actor → learner, ctrl channel
    "hello": {
        "actor": (_actor_id, True),
        "session": (_int(), True),
        "token": (_text(64), True),
        "first_unacked": (_int(1), True),
        "config_hash": (_text(), True),
        "env_spec": (_text(MAX_SPEC), False),
    },  # the actor env's spaces (robo_rl.envs.spec), JSON
    "heartbeat": {"actor": (_actor_id, True), "stats": (_stats, False)},
    "bye": {"actor": (_actor_id, True), "reason": (_text(), False)},
    # learner → actor, ctrl channel (and weights/stop, which also go there)
    "welcome": _ACK,
    "ack": _ACK,
    "refused": {"reason": (_text(), True)},
    "rejected": {"session": (_int(), True), "seq": (_int(1), True), "reason": (_text(), True)},
    # learner → actor, weights channel
    "weights": {"version": (_int(0), True), "incarnation": (_int(), True)},
    "weights_shm": {
        "version": (_int(0), True),
        "incarnation": (_int(), True),
        "path": (_text(), True),
        "nbytes": (_int(0), True),
        "layout": (_layout, True),
    },
    "status": {
        "incarnation": (_int(), True),
        "env_steps": (_int(0), True),
        "updates": (_int(0), True),
        "allowed_env_steps": (_number, True),
        # the learner's health for the GUI (robo_rl/gui), refreshed every logger.log_every_s
        **{
            k: (_number, False)
            for k in (
                "updates_per_s",
                "realised_utd",
                "staleness_versions",
                "actors_alive",
                "buffer_online",
                "buffer_prior",
                "buffer_interventions",
            )
        },
    },
    "stop": {"reason": (_text(), True), "hold": (_bool, False)},
}

# what each side accepts on each channel
DATA_KINDS = ("steps",)
CTRL_KINDS = ("hello", "heartbeat", "bye")
ACTOR_CTRL_KINDS = ("welcome", "ack", "refused", "rejected", "weights", "stop")
ACTOR_SUB_KINDS = ("weights", "weights_shm", "status", "stop")


def check_meta(kind: str, meta: dict, accepted: tuple[str, ...], schemas: dict | None = None) -> None:
    """Raise MessageError unless `kind` is one of `accepted` and its meta fields have the types `schemas` (by
    default the transport's `SCHEMAS`) lists."""
    if kind not in accepted:
        raise InvalidMessage(f"wrong kind '{kind[:40]}' (this channel takes {', '.join(accepted)})")
    for name, (check, required) in (SCHEMAS if schemas is None else schemas)[kind].items():
        if name not in meta:
            if required:
                raise InvalidMessage(f"'{kind}' lacks its '{name}' field")
            continue
        problem = check(meta[name])
        if problem:
            raise InvalidMessage(f"'{kind}' field '{name}' must be {problem}, got {type(meta[name]).__name__}")
