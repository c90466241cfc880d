"""Keep the memory a training step frees in the process's heap, so the next step does not fault it in again.

A learner update allocates and frees dozens of activation tensors of a few hundred kB each. With glibc's default
settings the heap's free top is handed back to the kernel after such a step (trim threshold 128 kB), and the next
step touches fresh pages: a few hundred page faults per state-based SAC update here, 0.5 ms of system time of ~11.
Raising the trim threshold and fixing the mmap threshold (so those blocks come from the heap, not a fresh mapping
each) keeps them mapped; the cost is that up to `TRIM_BYTES` of freed memory stays with the process.
"""

from __future__ import annotations

import ctypes
import functools
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
TRIM_BYTES = 128 << 20  # freed heap memory the process may keep
MMAP_BYTES = 32 << 20  # blocks above this still get their own mapping (glibc's ceiling for the dynamic threshold)


@functools.cache
def keep_freed_memory() -> bool:
    """Set both thresholds once per process (Linux with glibc; elsewhere nothing changes). Returns whether set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another C library
        return False
    # both or neither: a fixed trim threshold alone turns off glibc's adaptive mmap threshold, and every block of a
    # few hundred kB would then be mapped and unmapped at each use (ten times the faults)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
