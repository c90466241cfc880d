"""The policy server's messages (`robo-rl policy serve`, robo_rl/serving/, and its client policies/remote.py): one
definition that both sides encode and check with, so the two cannot drift apart.

A message is a ZeroMQ multipart. Frame 0 is a msgpack header

    {"schema": SCHEMA_VERSION, "kind": str, "id": int, "meta": map, "arrays": [[name, shape], ...]}

and frames 1..n are the arrays' raw bytes in C order. The dtype is not sent: the schema below fixes it by the array's
name, so only float32 and uint8 arrays of the listed names and ranks can arrive, and nothing is ever unpickled.

    client -> server   info     what is served (sizes, cameras, noise, guide)
                       chunk    state f4[D], image/<camera> u1[H, W, 3]; optional noise f4[C, W]; optional
                                guide/actions f4[L, A] and guide/weights f4[L] with meta guide_delay; optional
                                meta instruction
    server -> client   info     meta: its name, version, sizes, cameras, noise shape, whether a guide steers it;
                                arrays action_low/action_high, state_mean/state_std where it kept them
                       chunk    chunk f4[C, A]; meta inference_ms, policy, version
                       error    meta reason (a request it cannot answer, named)

Every reply carries its request's id (-1 when the request's id could not be read), so a client can drop an answer
to a request it gave up on. This is not the actor/learner wire (robo_rl/transport/codec.py): its client is a policy,
and policies import no robo_rl, so this protocol lives here, beside the client, and the server imports it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import msgpack
import numpy as np

SCHEMA_VERSION = 1
MAX_HEADER_BYTES = 64 * 1024
MAX_ARRAYS = 64  # a request carries a state, a few cameras, a noise and a guide
MAX_ELEMENTS = 1 << 26  # in one array: a 4096 x 4096 RGB frame fits, a forged size does not
MAX_TEXT = 2000  # characters of an instruction, a name or a reason
MAX_ID = 2**63 - 1


class WireError(ValueError):
    """A message that cannot be accepted; the text names the reason."""


class Message(NamedTuple):
    kind: str
    id: int
    meta: dict
    arrays: dict[str, np.ndarray]


# --- the fields of `meta`: each check returns what the value must be, or None when it is fine ---------------------
def _text(v):
    return None if isinstance(v, str) and len(v) <= MAX_TEXT else f"a string of at most {MAX_TEXT} characters"


def _count(low: int):
    def check(v):
        ok = isinstance(v, int) and not isinstance(v, bool) and low <= v <= MAX_ID
        return None if ok else f"an integer >= {low}"

    return check


def _optional(check):
    return lambda v: None if v is None else check(v)


def _ms(v):
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return None if ok else "a finite number of milliseconds >= 0"


def _bool(v):
    return None if isinstance(v, bool) else "true or false"


def _pair(v):
    return None if isinstance(v, list) and len(v) == 2 and not any(_count(1)(n) for n in v) else "two sizes >= 1"


def _cameras(v):
    if not isinstance(v, dict) or len(v) > MAX_ARRAYS:
        return f"a map of at most {MAX_ARRAYS} camera names to [height, width]"
    if any(not isinstance(k, str) or not 0 < len(k) <= 100 or _pair(hw) for k, hw in v.items()):
        return "a map of camera names to [height, width]"
    return None


# kind -> {field: (check, required)}; fields a kind does not list are ignored (a newer side may add some)
REQUESTS = {
    "info": {},
    "chunk": {"instruction": (_text, False), "guide_delay": (_count(0), False)},
}
REPLIES = {
    "info": {
        "policy": (_text, True),
        "version": (_text, True),
        "state_dim": (_count(0), True),  # 0: the policy reads no state
        "action_dim": (_count(1), True),
        "chunk_size": (_count(1), True),
        "execute_steps": (_optional(_count(1)), False),
        "cameras": (_cameras, True),
        "noise_shape": (_optional(_pair), True),  # null: it takes no initial noise
        "guided": (_bool, True),  # a guide steers its sampling (else the server blends the chunk with it)
        "task": (_optional(_text), False),  # the instruction it uses where a request has none
    },
    "chunk": {"inference_ms": (_ms, True), "policy": (_text, True), "version": (_text, True)},
    "error": {"reason": (_text, True)},
}

# array name (or name prefix ending in "/") -> (dtype, rank), per kind
F4, U1 = np.dtype("<f4"), np.dtype("u1")
ARRAYS = {
    ("request", "info"): {},
    ("request", "chunk"): {
        "state": (F4, 1),
        "image/": (U1, 3),
        "noise": (F4, 2),
        "guide/actions": (F4, 2),
        "guide/weights": (F4, 1),
    },
    ("reply", "info"): {"action_low": (F4, 1), "action_high": (F4, 1), "state_mean": (F4, 1), "state_std": (F4, 1)},
    ("reply", "chunk"): {"chunk": (F4, 2)},
    ("reply", "error"): {},
}


def _array_type(side: str, kind: str, name: str) -> tuple[np.dtype, int] | None:
    table = ARRAYS[(side, kind)]
    if name in table:
        return table[name]
    prefix = name.split("/", 1)[0] + "/"
    return table.get(prefix) if "/" in name and len(name) > len(prefix) else None


def encode(side: str, kind: str, message_id: int, meta: dict | None = None, arrays: dict | None = None) -> list:
    """The frames of one message; each array cast to its schema dtype (a name the schema lacks is a bug here)."""
    frames_arrays = {}
    for name, a in (arrays or {}).items():
        spec = _array_type(side, kind, name)
        if spec is None:
            raise ValueError(f"'{kind}' {side}s carry no array '{name}'")
        frames_arrays[name] = np.ascontiguousarray(a, dtype=spec[0])
    header = {
        "schema": SCHEMA_VERSION,
        "kind": kind,
        "id": int(message_id),
        "meta": meta or {},
        "arrays": [[name, list(a.shape)] for name, a in frames_arrays.items()],
    }
    return [msgpack.packb(header, use_bin_type=True)] + [memoryview(a).cast("B") for a in frames_arrays.values()]


def decode(frames: list, side: str) -> Message:
    """A received message of `side` ("request" or "reply"), every field checked before use: one-line WireError
    naming the first problem. Arrays view the received frames (read-only, no copy)."""
    kinds = REQUESTS if side == "request" else REPLIES
    if not frames:
        raise WireError("empty message")
    head = memoryview(frames[0])
    if head.nbytes > MAX_HEADER_BYTES:
        raise WireError(f"header of {head.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several types for garbage
        raise WireError(f"header is not valid msgpack ({type(e).__name__})") from None
    if not isinstance(header, dict) or not {"schema", "kind", "id", "meta", "arrays"} <= header.keys():
        raise WireError("header is not a map with schema/kind/id/meta/arrays")
    if header["schema"] != SCHEMA_VERSION:
        raise WireError(f"schema version {str(header['schema'])[:20]} received, this side speaks {SCHEMA_VERSION}")
    kind, meta, specs = header["kind"], header["meta"], header["arrays"]
    if kind not in kinds:
        raise WireError(f"unknown {side} kind '{str(kind)[:40]}' (one of {', '.join(kinds)})")
    if _count(0)(header["id"]) and header["id"] != -1:
        raise WireError("'id' is not an integer >= 0")
    if not isinstance(meta, dict):
        raise WireError(f"'meta' is a {type(meta).__name__}, not a map")
    for name, (check, required) in kinds[kind].items():
        if name not in meta:
            if required:
                raise WireError(f"'{kind}' lacks its '{name}' field")
        elif problem := check(meta[name]):
            raise WireError(f"'{kind}' field '{name}' must be {problem}")
    if not isinstance(specs, list) or len(specs) != len(frames) - 1 or len(specs) > MAX_ARRAYS:
        raise WireError(f"header lists arrays that do not match the message's {len(frames) - 1} data frames")
    arrays = {}
    for spec, frame in zip(specs, frames[1:], strict=True):
        name, dtype, shape = _checked_spec(side, kind, spec)
        if name in arrays:
            raise WireError(f"array '{name}' appears twice")
        buf = memoryview(frame)
        if buf.nbytes != dtype.itemsize * math.prod(shape):
            raise WireError(f"array '{name}' declares {list(shape)} {dtype.name} but carries {buf.nbytes} bytes")
        arrays[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return Message(kind, header["id"], meta, arrays)


def _checked_spec(side: str, kind: str, spec) -> tuple[str, np.dtype, tuple[int, ...]]:
    if not isinstance(spec, list) or len(spec) != 2 or not isinstance(spec[0], str) or len(spec[0]) > 200:
        raise WireError("an array spec is not [name, shape]")
    name, shape = spec
    expected = _array_type(side, kind, name)
    if expected is None:
        raise WireError(f"'{kind}' {side}s carry no array '{name[:60]}'")
    dtype, rank = expected
    if not isinstance(shape, list) or len(shape) != rank or any(_count(0)(s) for s in shape):
        raise WireError(f"array '{name}' must have {rank} non-negative sizes")
    if math.prod(shape) > MAX_ELEMENTS:
        raise WireError(f"array '{name}' of {list(shape)} exceeds {MAX_ELEMENTS} elements")
    return name, dtype, tuple(shape)


def message_id(frames: list) -> int:
    """The id of a message that may not decode (an error answer still reaches the client that is waiting for it),
    or -1 when not even that can be read."""
    try:
        head = memoryview(frames[0])
        if head.nbytes > MAX_HEADER_BYTES:
            return -1
        message_id = msgpack.unpackb(head, raw=False, strict_map_key=True)["id"]
    except Exception:  # anything a stranger's bytes may raise: there is no id to answer to
        return -1
    return message_id if isinstance(message_id, int) and not _count(0)(message_id) else -1
