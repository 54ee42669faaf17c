"""Linears on weights prepacked for oneDNN: the CPU's fast decode step.

``F.linear`` on a CPU hands the BLAS each weight as a plain row-major matrix on every call. At a
decode step's few rows (one per request) that call is poor: the weight streams through the cache
in a layout the kernel must re-block each time. oneDNN, given the weight reordered once into its
own blocked layout (what inductor's weight freezing does), runs the same products faster; on the
2-core machine this project is tested on, SmolLM2-135M in float32 decoded 1.3× faster at batch 1,
1.6× at 8 and 1.2× at 32 (``bench/engine.py``). For many rows (a prefill) the plain call is as fast
or faster, so a call with more than ``max_rows`` rows keeps it, and both layouts stay in memory:
one more copy of the linear weights.

The products are the same float32 dot products, summed in another order; the exactness tests
against transformers run this path (it is the CPU default) and the plain one (``enforce_eager``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

MAX_ROWS = 64  # rows a call may have and still use the packed weight: a decode step's batch
ROWS_HINT = 8  # the batch oneDNN picks its blocking for


def packed_linear_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """float32 on a CPU with oneDNN (other dtypes: the plain path, not measured here)."""
    return (device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise") and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class PackedLinear:
    """A drop-in for ``F.linear(x, w, b)`` that uses a prepacked copy of ``w`` when it has one
    and ``x`` has at most ``max_rows`` rows."""

    def __init__(self, weights: Iterable[torch.Tensor], max_rows: int = MAX_ROWS, rows_hint: int = ROWS_HINT) -> None:
        self.max_rows = max_rows
        # keyed by the weight's identity; the weight itself is kept so the key is never reused
        self._packed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        with torch.inference_mode():
            for w in weights:
                if id(w) not in self._packed:
                    self._packed[id(w)] = (w, torch.ops.mkldnn._reorder_linear_weight(w, rows_hint))

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        entry = self._packed.get(id(w))
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if entry is None or not 0 < rows <= self.max_rows:
            return F.linear(x, w, b)
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), entry[1], b, "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])

    @property
    def num_packed(self) -> int:
        return len(self._packed)
