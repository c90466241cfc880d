"""Message codec: a msgpack header plus one raw frame per array. No pickle, ever.

Frame 0 is the header `{"v": protocol version, "kind": str, "meta": dict, "arrays": [[name, dtype, shape]]}`;
frames 1..n are the arrays' bytes, decoded with `np.frombuffer` (no copy).
"""

from __future__ import annotations

import math

import msgpack
import numpy as np

from robo_rl.transport.errors import MessageError
from robo_rl.transport.messages import check_meta

# Only plain numeric dtypes may cross the wire (an object dtype would be a pickle in disguise).
ALLOWED_DTYPES = {np.dtype(t).str for t in ("u1", "i1", "i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "?")}
MAX_HEADER_BYTES = 1 << 20
MAX_ARRAYS = 1024  # arrays in one message (a policy's state dict has a few hundred at most)
MAX_NDIM = 8
MAX_DIM = 2**40  # elements along one axis; the frame's byte count is the real bound
# The wire protocol's version (the step record's layout has its own, `schema.SCHEMA_VERSION`): 2 added the
# per-session token, and checked meta fields; 3 step batches with a task code and their own instructions.
PROTOCOL_VERSION = 3


def encode(kind: str, meta: dict | None = None, arrays: dict[str, np.ndarray] | None = None) -> list:
    arrays = arrays or {}
    contiguous = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    header = {
        "v": PROTOCOL_VERSION,
        "kind": kind,
        "meta": meta or {},
        "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in contiguous.items()],
    }
    return [msgpack.packb(header, use_bin_type=True)] + [memoryview(a).cast("B") for a in contiguous.values()]


def decode(frames: list, accepted: tuple[str, ...] | None = None) -> tuple[str, dict, dict[str, np.ndarray]]:
    """Parse a multipart message; raise MessageError naming what is wrong. Every structural field is checked
    before use (the header a map, names strings, shapes non-negative with a bounded product); with
    `accepted`, the kind must be one of those and its meta fields are checked too (see `messages.py`)."""
    if not frames:
        raise MessageError("empty message")
    head = memoryview(frames[0])
    if head.nbytes > MAX_HEADER_BYTES:
        raise MessageError(f"header of {head.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several types for garbage
        raise MessageError(f"header is not valid msgpack ({type(e).__name__})") from None
    if not isinstance(header, dict) or not {"v", "kind", "meta", "arrays"} <= header.keys():
        raise MessageError("header is not a map with v/kind/meta/arrays")
    if header["v"] != PROTOCOL_VERSION:
        raise MessageError(f"schema version {str(header['v'])[:20]} received, this process speaks {PROTOCOL_VERSION}")
    kind, meta, specs = header["kind"], header["meta"], header["arrays"]
    if not isinstance(kind, str) or len(kind) > 64:
        raise MessageError("header 'kind' is not a short string")
    if not isinstance(meta, dict):
        raise MessageError(f"header 'meta' is a {type(meta).__name__}, not a map")
    if not isinstance(specs, list) or len(specs) != len(frames) - 1:
        raise MessageError(
            f"header lists {len(specs) if isinstance(specs, list) else '?'} arrays, "
            f"message has {len(frames) - 1} data frames"
        )
    if len(specs) > MAX_ARRAYS:
        raise MessageError(f"{len(specs)} arrays exceed the limit of {MAX_ARRAYS}")
    if accepted is not None:
        check_meta(kind, meta, accepted)
    arrays = {}
    for spec, frame in zip(specs, frames[1:], strict=True):
        name, dt, shape = _array_spec(spec)
        if name in arrays:
            raise MessageError(f"array '{name}' appears twice")
        buf = memoryview(frame)
        if buf.nbytes != dt.itemsize * math.prod(shape):
            raise MessageError(f"array '{name}' declares {list(shape)} {dt} but carries {buf.nbytes} bytes")
        arrays[name] = np.frombuffer(buf, dtype=dt).reshape(shape)
    return kind, meta, arrays


def _array_spec(spec) -> tuple[str, np.dtype, tuple[int, ...]]:
    """[name, dtype, shape] → (name, dtype, shape), each checked: a short string name, an allowed plain
    dtype, a shape of at most MAX_NDIM non-negative integers (bounded, so no product can overflow)."""
    if not isinstance(spec, list) or len(spec) != 3:
        raise MessageError("an array spec is not [name, dtype, shape]")
    name, dtype, shape = spec
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise MessageError("an array name is not a string of 1-200 characters")
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
        raise MessageError(f"array '{name}' has disallowed dtype {str(dtype)[:20]}")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        raise MessageError(f"array '{name}' has a shape that is not a list of at most {MAX_NDIM} sizes")
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_DIM:
            raise MessageError(f"array '{name}' has a size that is not an integer in [0, {MAX_DIM}]")
    return name, np.dtype(dtype), tuple(shape)


def state_dict_to_arrays(state: dict) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def arrays_to_state_dict(arrays: dict[str, np.ndarray]) -> dict:
    """Tensors viewing the received buffers, without a copy: only for `load_state_dict`, which copies them."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the buffers are read-only; nothing writes through them
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
