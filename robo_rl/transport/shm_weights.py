"""Policy weights through shared memory, for actors on the learner's own machine.

Pushing a 10M-parameter policy over loopback TCP costs 40 MB per actor per update. Instead the learner
writes each version once into one of two files in /dev/shm (version v into slot v % 2) and publishes only
a small notice; a local actor loads the weights straight from the mapping. Each slot starts with a stamp:
-1 while the learner writes, the version once complete; a reader checks it before and after loading, so
a half-written or overwritten copy is never used. Remote actors keep the TCP path.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm")
ALIGN = 64  # bytes; each array starts on a cache line
STAMP_WRITING = -1


def shm_available() -> bool:
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK)


def _layout(arrays: dict[str, np.ndarray]) -> tuple[list, int]:
    layout, offset = [], ALIGN  # the first cache line holds the stamp
    for name, a in arrays.items():
        layout.append([name, a.dtype.str, list(a.shape), offset])
        offset += -(-a.nbytes // ALIGN) * ALIGN
    return layout, offset


class SharedWeightsWriter:
    """The learner's side: two slots, written alternately; `close` removes them."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._maps: dict[int, np.memmap] = {}

    def write(self, version: int, arrays: dict[str, np.ndarray]) -> dict:
        """Copy `arrays` into slot version % 2 and return the notice that tells actors where they are."""
        layout, nbytes = _layout(arrays)
        slot = version % 2
        path = SHM_DIR / f"robo_rl_{self.prefix}_{slot}.weights"
        mm = self._maps.get(slot)
        if mm is None or mm.shape[0] != nbytes:
            mm = self._maps[slot] = np.memmap(path, np.uint8, mode="w+", shape=(nbytes,))
        stamp = mm[:8].view(np.int64)
        stamp[0] = STAMP_WRITING
        for (_, _, _, offset), a in zip(layout, arrays.values(), strict=True):
            mm[offset : offset + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        stamp[0] = version
        return {"version": version, "path": str(path), "nbytes": nbytes, "layout": layout}

    def close(self) -> None:
        for mm in self._maps.values():
            Path(mm.filename).unlink(missing_ok=True)
        self._maps.clear()


def check_notice(notice: dict) -> None:
    """A notice names one of the learner's slot files and arrays that lie inside it (it came over the network)."""
    from robo_rl.transport.codec import ALLOWED_DTYPES

    path = Path(notice["path"])
    if path.parent != SHM_DIR or not re.fullmatch(r"robo_rl_\w+_[01]\.weights", path.name):
        raise ValueError(f"weights notice names {str(path)[:100]}, not a robo_rl weights slot in {SHM_DIR}")
    if not path.is_file() or path.stat().st_size < notice["nbytes"]:
        raise ValueError(f"weights slot {path} is missing or shorter than the {notice['nbytes']} bytes announced")
    for name, dtype, shape, offset in notice["layout"]:
        if dtype not in ALLOWED_DTYPES or offset < ALIGN:
            raise ValueError(f"weights notice entry '{name[:100]}' has dtype {dtype[:20]} at offset {offset}")
        if offset + np.dtype(dtype).itemsize * math.prod(shape) > notice["nbytes"]:
            raise ValueError(f"weights notice entry '{name[:100]}' ends past the slot's {notice['nbytes']} bytes")


class SharedWeightsReader:
    """The actor's side: zero-copy views of a notice's slot, and a check that they are still that version."""

    def __init__(self) -> None:
        self._maps: dict[str, np.memmap] = {}

    def arrays(self, notice: dict) -> dict[str, np.ndarray] | None:
        """Views of the weights the notice announces, or None if that slot no longer holds its version.
        Raises ValueError for a notice that points outside the learner's slots or past the slot's end."""
        path = notice["path"]
        check_notice(notice)
        mm = self._maps.get(path)
        if mm is None or mm.shape[0] != notice["nbytes"]:
            mm = self._maps[path] = np.memmap(path, np.uint8, mode="r", shape=(notice["nbytes"],))
        if not self.still_valid(notice):
            return None
        out = {}
        for name, dtype, shape, offset in notice["layout"]:
            dt = np.dtype(dtype)
            out[name] = mm[offset : offset + dt.itemsize * math.prod(shape)].view(dt).reshape(shape)
        return out

    def still_valid(self, notice: dict) -> bool:
        return int(self._maps[notice["path"]][:8].view(np.int64)[0]) == notice["version"]
