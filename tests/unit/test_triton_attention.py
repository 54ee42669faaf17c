"""The Triton decode kernel against the torch path, in Triton's interpreter on the CPU."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

pytest.importorskip("triton")

from common.model.attention import decode_attention  # noqa: E402
from common.model.attention_metadata import AttentionMetadata  # noqa: E402
from common.model.kv_cache import PagedKVCache  # noqa: E402
from common.model.config import parse_model_config  # noqa: E402
from common.model.triton_attention import decode_attention_triton  # noqa: E402


def _case(heads: int, kv_heads: int, block_size: int, lens: list[int], seed: int = 0,  # type: ignore[no-untyped-def]
          head_dim: int = 16):
    gen = torch.Generator().manual_seed(seed)
    model = parse_model_config({"vocab_size": 10, "hidden_size": heads * head_dim, "intermediate_size": 8,
                                "num_hidden_layers": 2, "num_attention_heads": heads,
                                "num_key_value_heads": kv_heads, "head_dim": head_dim})
    widths = [-(-n // block_size) for n in lens]
    cache = PagedKVCache(model, sum(widths) + 3, block_size, torch.float32, torch.device("cpu"))
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen))
    order = torch.randperm(cache.num_blocks, generator=gen).tolist()  # shuffled, non-consecutive blocks
    tables, at = [], 0
    for w in widths:
        tables.append(order[at:at + w] + [0] * (max(widths) - w))
        at += w
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), (), 0,
                             torch.tensor(tables), torch.tensor(lens))
    q = torch.randn(len(lens), heads, head_dim, generator=gen)
    return q, cache, meta


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2), (6, 2)], ids=["mha", "gqa-4", "gqa-3-padded"])
@pytest.mark.parametrize("block_size", [8, 16])
def test_triton_decode_matches_torch_with_shuffled_blocks(heads, kv_heads, block_size):
    q, cache, meta = _case(heads, kv_heads, block_size, lens=[1, 5, block_size, 3 * block_size + 2])
    for layer in (0, 1):
        expected = decode_attention(q, cache, layer, meta, 0.25, None)
        assert torch.allclose(decode_attention_triton(q, cache, layer, meta, 0.25, None), expected, atol=1e-5)


def test_triton_decode_matches_torch_with_a_sliding_window():
    q, cache, meta = _case(8, 2, 8, lens=[3, 20, 41], seed=1)
    expected = decode_attention(q, cache, 1, meta, 0.25, 12)
    assert torch.allclose(decode_attention_triton(q, cache, 1, meta, 0.25, 12), expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_decode_on_a_half_precision_cache_matches_float32_math_up_to_output_rounding(dtype):
    q, cache, meta = _case(8, 2, 8, lens=[1, 5, 8, 26], seed=2)
    cache.data = cache.data.to(dtype)
    got = decode_attention_triton(q.to(dtype), cache, 1, meta, 0.25, None)
    reference = copy.copy(cache)
    reference.data = cache.data.float()  # the same rounded K/V, attended in float32
    expected = decode_attention(q.to(dtype).float(), reference, 1, meta, 0.25, None)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), expected, atol=torch.finfo(dtype).eps * 4)


@pytest.mark.parametrize("head_dim, block_size", [(24, 8), (16, 12)])
def test_triton_decode_rejects_sizes_that_are_not_powers_of_two(head_dim, block_size):
    q, cache, meta = _case(4, 2, block_size, lens=[3], head_dim=head_dim)
    with pytest.raises(ValueError, match="power-of-two"):
        decode_attention_triton(q, cache, 0, meta, 0.25, None)


def test_engine_with_the_triton_backend_matches_the_torch_backend():
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.engine.sampling_params import SamplingParams

    prompts = [[1, 2, 3], list(range(20, 45))]
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    torch_out = LLMEngine(EngineConfig(num_kv_blocks=16, attention_backend="torch")).generate(prompts, params)
    triton_out = LLMEngine(EngineConfig(num_kv_blocks=16, attention_backend="triton")).generate(prompts, params)
    assert triton_out == torch_out
