"""The fused layer kernels (norm, residual add + norm, RoPE, SiLU·mul, cache write) against the
torch path, in Triton's interpreter on the CPU."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

pytest.importorskip("triton")

from common.kernels.activation import silu_mul as silu_mul_triton  # noqa: E402
from common.kernels.cache_write import write_kv  # noqa: E402
from common.kernels.norm import add_rms_norm as add_rms_norm_triton, rms_norm as rms_norm_triton  # noqa: E402
from common.kernels.rope import apply_rope_  # noqa: E402
from common.model.config import RopeConfig, parse_model_config  # noqa: E402
from common.model.kv_cache import PagedKVCache  # noqa: E402
from common.model.ops import add_rms_norm, rms_norm, silu_mul  # noqa: E402
from common.model.rope import RotaryTable  # noqa: E402

GEN = torch.Generator().manual_seed(0)


def _within_one_ulp(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Triton's interpreter truncates float32 -> bfloat16 where a GPU rounds to nearest, so on the
    CPU a half-precision result may sit one unit in the last place from torch's (the GPU suite
    checks these kernels' rounding exactly)."""
    ulp = torch.finfo(expected.dtype).eps * expected.float().abs().clamp(min=torch.finfo(expected.dtype).tiny)
    return bool(((got.float() - expected.float()).abs() <= ulp + 1e-30).all())


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN).to(dtype)


@pytest.mark.parametrize("width", [64, 100])
def test_rms_norm_matches_torch(width):
    x, w = _randn(5, width), _randn(width)
    assert torch.allclose(rms_norm_triton(x, w, 1e-5), rms_norm(x, w, 1e-5), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_updates_the_residual_in_place_and_normalises_the_sum(dtype):
    delta, residual, w = _randn(7, 96, dtype=dtype), _randn(7, 96, dtype=dtype), _randn(96, dtype=dtype)
    expected_residual = residual.clone()
    expected = add_rms_norm(delta, expected_residual, w, 1e-6)
    got = add_rms_norm_triton(delta, residual, w, 1e-6)
    if dtype == torch.float32:
        assert torch.equal(residual, expected_residual), "the residual sum is rounded as torch rounds it"
        assert torch.allclose(got, expected, atol=1e-5)
    else:
        assert _within_one_ulp(residual, expected_residual)
        assert torch.allclose(got.float(), expected.float(), atol=4 * torch.finfo(dtype).eps * 4)


def test_rms_norm_accepts_rows_with_a_stride():
    base, w = _randn(4, 160), _randn(64)
    rows = base[:, 32:96]  # a view: row stride 160
    assert torch.allclose(rms_norm_triton(rows, w, 1e-5), rms_norm(rows.contiguous(), w, 1e-5), atol=1e-5)


@pytest.mark.parametrize("rope", [RopeConfig(), RopeConfig(theta=500000.0, rope_type="llama3", factor=8.0,
                                                            original_max_position_embeddings=64)])
def test_rope_rotates_q_and_k_in_place_like_the_torch_path_on_views_of_the_fused_projection(rope):
    heads, kv_heads, d, tokens = 6, 2, 16, 9
    table = RotaryTable(rope, d, 256, torch.device("cpu"))
    positions = torch.tensor([0, 1, 5, 17, 30, 31, 100, 200, 255])
    qkv = _randn(tokens, (heads + 2 * kv_heads) * d)
    q, k, _ = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q, k = q.view(tokens, heads, d), k.view(tokens, kv_heads, d)
    cos, sin = table.lookup(positions, torch.float32)
    expected_q, expected_k = RotaryTable.apply(q, cos, sin), RotaryTable.apply(k, cos, sin)
    got_q, got_k = apply_rope_(q, k, positions, table.cos, table.sin)
    assert got_q.data_ptr() == q.data_ptr() and got_k.data_ptr() == k.data_ptr()
    assert torch.allclose(q, expected_q, atol=1e-5) and torch.allclose(k, expected_k, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_matches_torch(dtype):
    gate_up = _randn(3, 2 * 1100, dtype=dtype)  # wider than one program's block
    expected, got = silu_mul(gate_up), silu_mul_triton(gate_up)
    if dtype == torch.float32:
        assert torch.allclose(got, expected, atol=1e-6)
    else:  # SiLU is rounded before the product, as torch rounds it: at most one rounding apart
        assert torch.allclose(got.float(), expected.float(), rtol=2 * torch.finfo(dtype).eps)


def test_cache_write_puts_each_row_at_its_slot_and_skips_padding_rows():
    model = parse_model_config({"vocab_size": 10, "hidden_size": 48, "intermediate_size": 8, "num_hidden_layers": 3,
                                "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 12})
    cache = PagedKVCache(model, 6, 4, torch.float32, torch.device("cpu"))
    expected = PagedKVCache(model, 6, 4, torch.float32, torch.device("cpu"))
    blocks, offsets = torch.tensor([5, 0, -1, 2, 5]), torch.tensor([3, 0, 1, 2, 0])
    kv = _randn(5, 2 * 3 * 12).view(5, 2, 3, 12)  # k and v interleaved: strided views
    k, v = kv[:, 0], kv[:, 1]
    write_kv(cache.data, 1, blocks, offsets, k, v)
    real = blocks >= 0
    expected.write(1, blocks[real], offsets[real], k[real], v[real])
    assert torch.equal(cache.data, expected.data)
