"""The CPU's blocked prefill attention (bfloat16 torch path, the C++ kernel in both dtypes) against a
float64 brute force."""

from __future__ import annotations

import pytest
import torch

from common.model import attention, cpu_prefill_attention
from common.model.attention_metadata import AttentionMetadata, PrefillChunk
from common.model.config import ModelConfig, RopeConfig
from common.model.kv_cache import PagedKVCache


def brute_force(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """Query ``i`` (position ``context − rows + i``) against keys ``0 ..`` its position, in float64."""
    rows, heads, _ = q.shape
    kv_heads, context = keys.shape[0], keys.shape[1]
    out = torch.empty(rows, heads, q.shape[2], dtype=torch.float64)
    for i in range(rows):
        seen = context - rows + i + 1
        for h in range(heads):
            kv = h // (heads // kv_heads)
            scores = (keys[kv, :seen].double() @ q[i, h].double()) * scale
            out[i, h] = torch.softmax(scores, 0) @ values[kv, :seen].double()
    return out


SHAPES = [(1, 1, 4, 4), (37, 37, 6, 2), (128, 128, 9, 3), (300, 300, 9, 3), (129, 400, 4, 1), (200, 457, 8, 8)]


@pytest.mark.parametrize("path", ["torch", "cpu kernel"])
@pytest.mark.parametrize("rows,context,heads,kv_heads", SHAPES)
def test_blocked_attention_matches_brute_force_in_bfloat16(rows: int, context: int, heads: int, kv_heads: int,
                                                           path: str) -> None:
    """The torch path's blocked GEMMs, and the CPU backend's kernel that runs them in C++."""
    gen = torch.Generator().manual_seed(rows * 1000 + context)
    q = torch.randn(rows, heads, 64, generator=gen).bfloat16()
    keys = torch.randn(kv_heads, context, 64, generator=gen).bfloat16()
    values = torch.randn(kv_heads, context, 64, generator=gen).bfloat16()
    scale = 64 ** -0.5
    if path == "cpu kernel":
        from common.cpu_kernels.prefill_attention import prefill_attention

        got = prefill_attention(q, keys.transpose(0, 1).contiguous().transpose(0, 1), values, scale)  # strided keys
    else:
        got = cpu_prefill_attention.blocked_causal_attention(q, keys, values, scale)
    want = brute_force(q, keys, values, scale)
    # bfloat16 rounds scores and probabilities (as eager attention does): a few 1e-2 at most;
    # a query shown one key too many or too few is off by ~0.1 or more
    assert (got.double() - want).abs().max().item() < 3e-2
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], keys[None], values[None], scale=scale, enable_gqa=True,
        attn_mask=torch.ones(rows, context, dtype=torch.bool).tril(context - rows))[0].transpose(0, 1)
    assert (got.double() - want).abs().mean() <= 2 * (sdpa.double() - want).abs().mean()


def test_bfloat16_prefill_chunks_on_cpu_take_the_blocked_path_also_after_cached_tokens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = ModelConfig(model_type="llama", vocab_size=32, hidden_size=128, intermediate_size=256, num_layers=1,
                         num_heads=4, num_kv_heads=2, head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-6,
                         rope=RopeConfig(), sliding_windows=(None,))
    cache = PagedKVCache(config, num_blocks=20, block_size=16, dtype=torch.bfloat16, device=torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    first, second = 150, 90  # the second chunk reads the first's K/V from the cache
    q, k, v = (torch.randn(first + second, n, 32, generator=gen).bfloat16() for n in (4, 2, 2))
    calls: list[int] = []
    real = cpu_prefill_attention.blocked_causal_attention
    monkeypatch.setattr(cpu_prefill_attention, "blocked_causal_attention",
                        lambda q_, k_, v_, s: calls.append(k_.shape[1]) or real(q_, k_, v_, s))
    blocks = torch.arange(-(-(first + second) // 16))
    outs = []
    for start, length in ((0, first), (first, second)):
        positions = torch.arange(start, start + length)
        meta = AttentionMetadata(blocks[positions // 16], positions % 16,
                                 (PrefillChunk(0, length, start, blocks),), length,
                                 torch.empty(0, 0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
        rows = slice(start, start + length)
        outs.append(attention.paged_attention(q[rows], k[rows], v[rows], cache, 0, meta, 32 ** -0.5, None))
    assert calls == [first, first + second]
    want = brute_force(q, k.transpose(0, 1), v.transpose(0, 1), 32 ** -0.5)
    assert (torch.cat(outs).double() - want).abs().max().item() < 3e-2


@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("rows,context,heads,kv_heads", SHAPES)
@pytest.mark.parametrize("dim", [64, 128, 40])
def test_the_cpu_prefill_kernel_matches_brute_force_in_float32(rows: int, context: int, heads: int, kv_heads: int,
                                                              dim: int, tiles: bool) -> None:
    """float32, where the torch path runs SDPA: the kernel's blocks to float32 rounding, by its own
    register tiles (``tiles``; a head of 40 dimensions, not whole vectors, takes the GEMMs) and by
    torch's GEMMs."""
    from common.cpu_kernels.prefill_attention import prefill_attention

    gen = torch.Generator().manual_seed(rows + context + dim)
    q, keys, values = (torch.randn(*shape, dim, generator=gen) for shape in ((rows, heads), (kv_heads, context),
                                                                             (kv_heads, context)))
    got = prefill_attention(q, keys, values, dim ** -0.5, tiles)
    torch.testing.assert_close(got.double(), brute_force(q, keys, values, dim ** -0.5), rtol=2e-6, atol=2e-6)
