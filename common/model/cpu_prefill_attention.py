"""Causal prefill attention on a CPU in bfloat16: batched GEMMs over blocks of query rows.

torch's CPU SDPA kernel computes a bfloat16 prompt's attention at a fraction of the FLOP rate that
the same products reach as oneDNN batched GEMMs, and attention is a large share of a bfloat16
prefill (docs/decisions.md, 'CPU prefill attention as batched GEMMs'). Here the queries go in blocks
of ``QUERY_BLOCK`` rows; a block attends to every key up to its last row, and only its own keys (the
block on the diagonal) need the causal mask:

    keys   0 ................................ end
    block  [      no mask needed      | ◣ diagonal ]

Per KV head, the query heads of its group are stacked as the rows of one GEMM, so grouped-query
attention reads K and V as they are. The arithmetic is that of the reference models' eager
attention: scores scaled and rounded to bfloat16, softmax computed in float32 and rounded back,
then the product with V. Float32 keeps SDPA (its result is what float32 exactness is checked
against), as do sliding windows. The CPU backend runs the same arithmetic as a C++ kernel
(``common/cpu_kernels/prefill_attention.cpp``: the blocks in parallel, one pass of mask and softmax),
in float32 too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

PrefillKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]  # (q, keys, values, scale)
QUERY_BLOCK = 128  # rows per block: larger wastes more of the diagonal, smaller makes thin GEMMs


def applies(q: torch.Tensor, window: int | None) -> bool:
    return q.device.type == "cpu" and q.dtype == torch.bfloat16 and window is None


def blocked_causal_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """``q [n, heads, d]``: the last ``n`` positions of a context whose ``keys``/``values`` are
    ``[kv_heads, context, d]`` (any strides); returns ``[n, heads, d]``. Query ``i`` sees keys
    ``0 .. context - n + i``."""
    rows, heads, dim = q.shape
    kv_heads, context = keys.shape[0], keys.shape[1]
    group = heads // kv_heads
    first = context - rows  # position of the first query
    keys_t = keys.transpose(1, 2)  # [kv_heads, d, context]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous, whatever q's strides
    out_grouped = out.view(rows, kv_heads, group, dim)
    for start in range(0, rows, QUERY_BLOCK):
        n = min(QUERY_BLOCK, rows - start)
        end = first + start + n  # keys this block sees
        block = q[start:start + n].reshape(n, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(kv_heads, group * n, dim)
        scores = torch.empty(kv_heads, group * n, end, dtype=q.dtype, device=q.device)
        torch.baddbmm(scores, block, keys_t[:, :, :end], beta=0, alpha=scale, out=scores)
        scores.view(kv_heads, group, n, end)[..., end - n:].add_(_hidden(n, q.dtype, q.device))
        probs = torch.softmax(scores, dim=-1)  # float32 inside, rounded to bfloat16 once
        mixed = torch.bmm(probs, values[:, :end])  # [kv_heads, group * n, d]
        out_grouped[start:start + n] = mixed.view(kv_heads, group, n, dim).permute(2, 0, 1, 3)
    return out


_HIDDEN: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _hidden(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[n, n]``: −inf above the diagonal (a query's later keys), 0 elsewhere; added to scores."""
    key = (n, dtype, device)
    if key not in _HIDDEN:
        upper = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
        _HIDDEN[key] = torch.zeros(n, n, dtype=dtype, device=device).masked_fill_(upper, float("-inf"))
    return _HIDDEN[key]
