"""Message codec: a msgpack header plus one raw frame per array. No pickle, ever.

Frame 0 is the header `{"v": schema version, "kind": str, "meta": dict, "arrays": [[name, dtype, shape]]}`;
frames 1..n are the arrays' bytes, decoded with `np.frombuffer` (no copy).
"""

from __future__ import annotations

import msgpack
import numpy as np

from robo_rl.schema import SCHEMA_VERSION

# Only plain numeric dtypes may cross the wire (an object dtype would be a pickle in disguise).
ALLOWED_DTYPES = {np.dtype(t).str for t in ("u1", "i1", "i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "?")}
MAX_HEADER_BYTES = 1 << 20


class MessageError(ValueError):
    """A message that cannot be accepted; the text names the reason."""


def encode(kind: str, meta: dict | None = None, arrays: dict[str, np.ndarray] | None = None) -> list:
    arrays = arrays or {}
    contiguous = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    header = {
        "v": SCHEMA_VERSION,
        "kind": kind,
        "meta": meta or {},
        "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in contiguous.items()],
    }
    return [msgpack.packb(header, use_bin_type=True)] + [memoryview(a).cast("B") for a in contiguous.values()]


def decode(frames: list) -> tuple[str, dict, dict[str, np.ndarray]]:
    """Parse a multipart message; raise MessageError naming what is wrong."""
    if not frames:
        raise MessageError("empty message")
    head = frames[0]
    if len(head) > MAX_HEADER_BYTES:
        raise MessageError(f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(bytes(head), raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several types for garbage
        raise MessageError(f"header is not valid msgpack ({type(e).__name__})") from None
    if not isinstance(header, dict) or not {"v", "kind", "meta", "arrays"} <= header.keys():
        raise MessageError("header lacks v/kind/meta/arrays")
    if header["v"] != SCHEMA_VERSION:
        raise MessageError(f"schema version {header['v']} received, this process speaks {SCHEMA_VERSION}")
    specs = header["arrays"]
    if not isinstance(specs, list) or len(specs) != len(frames) - 1:
        raise MessageError(f"header lists {len(specs) if isinstance(specs, list) else '?'} arrays, "
                           f"message has {len(frames) - 1} data frames")  # fmt: skip
    arrays = {}
    for spec, frame in zip(specs, frames[1:], strict=True):
        try:
            name, dtype, shape = spec
            dt = np.dtype(dtype)
            shape = tuple(int(s) for s in shape)
        except Exception:
            raise MessageError(f"bad array spec {spec!r}") from None
        if dt.str not in ALLOWED_DTYPES:
            raise MessageError(f"array '{name}' has disallowed dtype {dtype}")
        buf = memoryview(frame)
        if buf.nbytes != dt.itemsize * int(np.prod(shape)):
            raise MessageError(f"array '{name}' declares {shape} {dt} but carries {buf.nbytes} bytes")
        arrays[name] = np.frombuffer(buf, dtype=dt).reshape(shape)
    return str(header["kind"]), header["meta"], arrays


def state_dict_to_arrays(state: dict) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def arrays_to_state_dict(arrays: dict[str, np.ndarray]) -> dict:
    """Tensors viewing the received buffers, without a copy: only for `load_state_dict`, which copies them."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the buffers are read-only; nothing writes through them
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
