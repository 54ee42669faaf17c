"""Keep a CPU forward's large activations on the C heap instead of fresh OS mappings.

glibc serves an allocation above its mmap threshold with a mapping of its own and unmaps it when it
is freed, and gives the heap's free top back to the OS past its trim threshold. A prefill's
activations (a 4,096-row bfloat16 batch of SmolLM2 is 4.7 MB a tensor, its float32 norms twice that)
are allocated and freed a few times a layer, so each would be mapped again and its pages faulted in
on first write, a measurable share of a CPU prefill and most of the norms' and products' time
(docs/decisions.md, 'Host heap thresholds'). Raising both thresholds once keeps those buffers in the
heap and reused; the price is that a worker's resident memory stays at its high-water mark, which is
what a serving process runs at anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest allowed on 64-bit hosts
TRIM_THRESHOLD_BYTES = 1 << 30

_applied: bool | None = None


def keep_large_buffers_on_heap() -> bool:
    """Sets glibc's thresholds for this process (once); False where the C library is not glibc."""
    global _applied
    if _applied is None:
        _applied = _set_thresholds()
    return _applied


def _set_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
