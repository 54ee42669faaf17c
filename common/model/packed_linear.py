"""Linears on weights prepacked for oneDNN: the CPU's fast linears.

``F.linear`` on a CPU hands the BLAS each weight as a plain row-major matrix on every call. At a
decode step's few rows (one per request) that call is poor: the weight streams through the cache
in a layout the kernel must re-block each time. oneDNN, given the weight reordered once into its
own blocked layout (what inductor's weight freezing does), runs the same products faster, in
float32 and, on CPUs with AVX512-BF16 or AMX, in bfloat16 (where ``F.linear`` is slower still).

For many rows (a prefill) which one wins depends on the CPU: on some the plain call is faster past
a few dozen rows, on others the packed call is faster at every size. So
the engine measures both once on the model's own weights (``prefill_rows_packed``) and a call
with more than ``max_rows`` rows keeps ``F.linear`` where that measurement says so. Both layouts
stay in memory: one more copy of the linear weights.

The products are the same dot products, summed in another order; the exactness tests against
transformers run this path (it is the CPU default) and the plain one (``enforce_eager``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

MAX_ROWS = 64  # rows a call may have and still use the packed weight, unless measured otherwise
# A call with more rows than MAX_ROWS (a prefill's) runs on rows padded to a multiple of this.
# oneDNN builds (JIT-compiles) a kernel for every new input shape and keeps about a thousand, so
# prompts of every length would keep a serving worker compiling; padded, a few dozen shapes cover the
# lengths of a model's context, for at most ROW_GRAIN - 1 rows of extra work a call.
ROW_GRAIN = 16
ROWS_HINT = 8  # the batch oneDNN picks its blocking for
PROBE_ROWS = 256  # a prefill-sized call, for deciding which layout serves many rows


def packed_linear_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """float32 on a CPU with oneDNN, and bfloat16 where oneDNN has bfloat16 kernels."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight")):
        return False
    if dtype == torch.bfloat16:
        return bool(ops._is_mkldnn_bf16_supported())
    return dtype == torch.float32


class PackedLinear:
    """A drop-in for ``F.linear(x, w, b)`` that uses a prepacked copy of ``w`` when it has one
    and ``x`` has at most ``max_rows`` rows (None: any number)."""

    def __init__(self, weights: Iterable[torch.Tensor], max_rows: int | None = MAX_ROWS,
                 rows_hint: int = ROWS_HINT, row_grain: int = ROW_GRAIN) -> None:
        self.max_rows = max_rows
        self.row_grain = row_grain  # calls of more than MAX_ROWS rows run on a multiple of it
        # keyed by the weight's identity; the weight itself is kept so the key is never reused
        self._packed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        with torch.inference_mode():
            for w in weights:
                if id(w) not in self._packed:
                    self._packed[id(w)] = (w, torch.ops.mkldnn._reorder_linear_weight(w, rows_hint))

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows > MAX_ROWS and rows % self.row_grain:
            grown = F.pad(x.reshape(rows, x.shape[-1]), (0, 0, 0, -rows % self.row_grain))  # zero rows
            return self._call(grown, grown.shape[0], w, b)[:rows].reshape(*x.shape[:-1], w.shape[0])
        return self._call(x, rows, w, b)

    def _call(self, x: torch.Tensor, rows: int, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        entry = self._packed.get(id(w))
        if entry is None or rows == 0 or (self.max_rows is not None and rows > self.max_rows):
            return F.linear(x, w, b)
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), entry[1], b, "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])

    @property
    def num_packed(self) -> int:
        return len(self._packed)


def prefill_rows_packed(weights: Sequence[torch.Tensor], rows: int = PROBE_ROWS, repeats: int = 3) -> bool:
    """Whether the packed layout is at least as fast as ``F.linear`` for a ``rows``-row call on
    ``weights`` (one layer's, say): the best of ``repeats`` interleaved timings of each."""
    packed = PackedLinear(weights, max_rows=None)
    inputs = [torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights]

    def timed(linear: object) -> float:
        started = time.perf_counter()
        for x, w in zip(inputs, weights):
            linear(x, w, None)  # type: ignore[operator]
        return time.perf_counter() - started

    with torch.inference_mode():
        timed(packed), timed(F.linear)  # first calls pay for oneDNN's primitive creation
        plain = fast = float("inf")
        for _ in range(repeats):
            plain = min(plain, timed(F.linear))
            fast = min(fast, timed(packed))
    return fast <= plain
