"""The learner's matrix-product precision: float32, or bfloat16 mixed precision where the hardware does it natively.

Mixed precision here means `torch.autocast`: matrix products and convolutions run in bfloat16 with float32
accumulation, while weights, optimiser state, LayerNorm statistics, losses and every network's *output layer* stay
float32 (`policies.mlp.full_precision`), so Q-values and action means keep float32 resolution (on the CPU the critic
ensemble's LayerNorm writes its output in bfloat16 for the next product: `policies.mlp.EnsembleLayerNorm`). On a CPU
with AVX512-BF16 (or AMX) a 256×256 product is 2-4× faster in bfloat16 (2× measured on 2026-11-29's VM); a CPU
without it emulates bfloat16 and is slower, so `auto` picks bfloat16 only where it is native (CUDA with bf16
support, x86 CPUs advertising avx512_bf16/amx_bf16).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

PRECISIONS = ("auto", "float32", "bfloat16")


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (x86 avx512_bf16 or amx_bf16 in /proc/cpuinfo)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(name: str, device: str | torch.device = "cpu") -> torch.dtype:
    """`auto` | `float32` | `bfloat16` → the dtype the learner's matrix products run in on `device`."""
    if name not in PRECISIONS:
        raise ValueError(f"algo.precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if kind == "cpu":
        return torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    return torch.float32


def autocast(dtype: torch.dtype, device: str | torch.device = "cpu"):
    """A context in which matrix products run in `dtype` (nothing changes for float32)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
