"""Causal prefill attention by the C++ kernel (``prefill_attention.cpp``)."""

from __future__ import annotations

import torch

from common.cpu_kernels import build
from common.model.packed_linear import ROW_GRAIN

# The query rows of a block: 256 bytes of scores per key and query head (128 rows in bfloat16, 64 in
# float32); chosen by measurement: docs/decisions.md, 'CPU prefill attention: query block size'.
QUERY_BLOCK_BYTES = 256
# The GEMM dimensions that vary with a prompt's length are padded to multiples of this (1: none):
# oneDNN JIT-compiles a kernel for every new shape; the linears' grain (``packed_linear.ROW_GRAIN``).
SHAPE_GRAIN = ROW_GRAIN


def prefill_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float,
                      tiles: bool = True) -> torch.Tensor:
    """``q [n, heads, d]``: the last ``n`` positions of a context whose ``keys``/``values`` are
    ``[kv_heads, context, d]``; query ``i`` sees keys ``0 .. context - n + i``. Returns ``[n, heads, d]``.
    ``tiles``: float32's products by the kernel's own register tiles where the head dimension is
    whole vectors (``tile_gemm.h``), else by torch's GEMMs (bfloat16's always: oneDNN's are faster)."""
    return build.load().prefill_attention(q, keys, values, scale, QUERY_BLOCK_BYTES // q.element_size(),
                                          SHAPE_GRAIN, tiles)
