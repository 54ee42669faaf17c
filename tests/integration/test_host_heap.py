"""A CPU engine's large buffers come from glibc's heap, not from fresh mappings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Allocates and frees a 16 MB tensor, then reports the bytes glibc holds in mmapped chunks while a
# second one is alive. In a fresh process glibc maps anything over 128 KB on its own.
PROBE = """
import ctypes, sys
import torch
from common.model.host_heap import keep_large_buffers_on_heap
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert keep_large_buffers_on_heap()
before = libc.mallinfo2().hblkhd
held = torch.empty(16 << 20, dtype=torch.uint8)
held.fill_(1)
print(libc.mallinfo2().hblkhd - before)
"""


def mapped_bytes(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_large_buffers_stay_on_the_heap_once_the_thresholds_are_raised() -> None:
    assert mapped_bytes("default") >= 16 << 20  # the baseline: mapped on its own
    assert mapped_bytes("keep") < 1 << 20
