"""The message kinds of each channel and the fields of their `meta`, checked before any field is used.

A message that decodes (see `codec.py`) is still only bytes a stranger chose: every field that the
receiving side reads is checked here for its type and range, so a handler never meets a list where it
expects a map, a negative sequence number, or bytes in a heartbeat's stats. Fields a kind does not list
are ignored (a newer sender may add some); a listed field that is required and missing, or of the
wrong type, makes the message a counted drop with the reason.
"""

from __future__ import annotations

import json
import math
import re

from robo_rl.transport.errors import MessageError


class InvalidMessage(MessageError):
    """A well-formed message of a kind this channel does not take, or whose fields have the wrong types."""


MAX_TEXT = 1000  # characters in a reason or hash
MAX_ID = 128  # characters in an actor id
MAX_STATS = 64  # entries in a heartbeat's stats
MAX_LAYOUT = 10_000  # arrays in a shared-memory weights notice
MAX_SPEC = 20_000  # characters of an env spec in a hello
MAX_SPEC_DEPTH = 4  # nesting of an env spec's JSON: its map, extras, an extra, the extra's shape
MAX_SPEC_SIZE = 2**20  # a spec's dimensions (state, action, an extra's axis) and image sides
SPEC_DTYPES = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64")
)
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


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _json_depth(text: str) -> int:
    """How deep a JSON text's arrays and maps nest, counted before parsing (json.loads recurses per level)."""
    depth = deepest = 0
    for ch in re.sub(r"[^\[\]{}]", "", _JSON_STRING.sub('""', text)):
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_SPEC_DEPTH:
            break
    return deepest


def _no_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _size(v, low: int = 0) -> bool:
    return not _int(low)(v) and v <= MAX_SPEC_SIZE


def _image_size(hw) -> bool:
    return isinstance(hw, list) and len(hw) == 2 and all(_size(n, 1) for n in hw)


def _extra(entry) -> bool:
    """An extra's [shape, dtype name], as `EnvSpec.to_json` writes it."""
    if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], list) or len(entry[0]) > 8:
        return False
    return isinstance(entry[1], str) and entry[1] in SPEC_DTYPES and all(_size(n) for n in entry[0])


def _env_spec(v):
    """An actor's env spec (`robo_rl.envs.spec.EnvSpec.to_json` as JSON text): parsed only when shallow, with finite
    numbers, and each field of the type and range the learner builds its networks from."""
    if not isinstance(v, str) or len(v) > MAX_SPEC:
        return f"a JSON text of at most {MAX_SPEC} characters"
    if _json_depth(v) > MAX_SPEC_DEPTH:
        return f"an env spec nested at most {MAX_SPEC_DEPTH} levels deep"
    try:
        spec = json.loads(v, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as e:  # a JSONDecodeError is a ValueError
        return f"an env spec in JSON with finite numbers ({str(e)[:80]})"
    if not isinstance(spec, dict):
        return "an env spec: a JSON map"
    problem = _spec_problem(spec)
    return f"an env spec whose {problem}" if problem else None


def _spec_problem(spec: dict) -> str | None:
    """The first field of an env spec map with the wrong type or range, named, or None."""
    if any(not _size(spec[k]) for k in ("state_dim", "action_dim") if k in spec):
        return f"state_dim and action_dim are integers in [0, {MAX_SPEC_SIZE}]"
    if "version" in spec and _int()(spec["version"]):
        return "version is an integer"
    if "control_hz" in spec and (_number(spec["control_hz"]) or spec["control_hz"] <= 0):
        return "control_hz is a positive number"
    cameras = spec.get("cameras", {})
    if not isinstance(cameras, dict) or not all(_image_size(hw) for hw in cameras.values()):
        return f"cameras map names to [height, width] in [1, {MAX_SPEC_SIZE}]"
    for key in ("state_names", "action_names"):
        names = spec.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return f"{key} is a list of strings"
    extras = spec.get("extras", {})
    if not isinstance(extras, dict) or not all(_extra(e) for e in extras.values()):
        return "extras map names to [shape, a plain numeric dtype]"
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
        "env_spec": (_env_spec, False),
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
