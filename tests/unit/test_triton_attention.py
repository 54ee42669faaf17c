"""The Triton attention kernels against the torch path, in Triton's interpreter on the CPU."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

pytest.importorskip("triton")

from common.kernels.decode_attention import num_splits, paged_decode  # noqa: E402
from common.kernels.prefill_attention import PackedPrefill, prefill_tiles  # noqa: E402
from common.model.attention import decode_attention, paged_attention  # noqa: E402
from common.model.attention_metadata import AttentionMetadata, PrefillChunk  # noqa: E402
from common.model.kv_cache import PagedKVCache  # noqa: E402
from common.model.config import parse_model_config  # noqa: E402
from common.model.triton_attention import decode_attention_triton, paged_attention_triton  # noqa: E402


def _cache(heads: int, kv_heads: int, head_dim: int, block_size: int, blocks: int, gen: torch.Generator):
    model = parse_model_config({"vocab_size": 10, "hidden_size": heads * head_dim, "intermediate_size": 8,
                                "num_hidden_layers": 2, "num_attention_heads": heads,
                                "num_key_value_heads": kv_heads, "head_dim": head_dim})
    cache = PagedKVCache(model, blocks, block_size, torch.float32, torch.device("cpu"))
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen))
    return cache


def _tables(lens: list[int], block_size: int, num_blocks: int, gen: torch.Generator) -> list[list[int]]:
    """Shuffled, non-consecutive blocks for each context."""
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables, at = [], 0
    for n in lens:
        width = -(-n // block_size)
        tables.append(order[at:at + width])
        at += width
    return tables


def _decode_case(heads: int, kv_heads: int, block_size: int, lens: list[int], seed: int = 0, head_dim: int = 16):
    gen = torch.Generator().manual_seed(seed)
    cache = _cache(heads, kv_heads, head_dim, block_size, sum(-(-n // block_size) for n in lens) + 3, gen)
    tables = _tables(lens, block_size, cache.num_blocks, gen)
    width = max(len(t) for t in tables)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), (), 0,
                             padded, torch.tensor(lens), decode_splits=num_splits(len(lens), kv_heads, 16, max(lens)))
    return torch.randn(len(lens), heads, head_dim, generator=gen), cache, meta


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2), (6, 2)], ids=["mha", "gqa-4", "gqa-3-padded"])
@pytest.mark.parametrize("block_size", [8, 16])
def test_triton_decode_matches_torch_with_shuffled_blocks(heads, kv_heads, block_size):
    q, cache, meta = _decode_case(heads, kv_heads, block_size, lens=[1, 5, block_size, 3 * block_size + 2])
    for layer in (0, 1):
        expected = decode_attention(q, cache, layer, meta, 0.25, None)
        assert torch.allclose(decode_attention_triton(q, cache, layer, meta, 0.25, None), expected, atol=1e-5)


@pytest.mark.parametrize("window", [None, 12])
@pytest.mark.parametrize("splits", [1, 3, 8])
def test_any_number_of_splits_covers_every_context(window, splits):
    """Contexts cut into 1, 3 or 8 parts of 16-token tiles (some parts empty), with and without a window."""
    q, cache, meta = _decode_case(8, 2, 8, lens=[3, 16, 17, 41, 70], seed=3)
    expected = decode_attention(q, cache, 1, meta, 0.25, window)
    got = paged_decode(q, cache.data, 1, meta.decode_block_tables, meta.decode_context_lens, 8, 0.25, window,
                       splits=splits, tile=16)
    assert torch.allclose(got, expected, atol=1e-5)


def test_split_counts_fill_a_gpu_without_splits_shorter_than_a_minimum():
    target = 1056  # an H100: 132 multiprocessors, 8 programs each
    assert num_splits(1, 8, target) == 32 and num_splits(32, 8, target) == 5 and num_splits(256, 8, target) == 1
    assert num_splits(1, 8, target, max_context=300) == 3 and num_splits(1, 8, target, max_context=10) == 1


def test_split_context_decode_gives_zeros_for_padding_rows_and_ignores_splits_past_a_context():
    q, cache, meta = _decode_case(4, 2, 8, lens=[9, 30], seed=4)
    lens = torch.tensor([9, 0])  # row 1 is a padding row of a CUDA-graph bucket
    got = paged_decode(q, cache.data, 0, meta.decode_block_tables, lens, 8, 0.25, None, splits=8, tile=16)
    padded_meta = AttentionMetadata(meta.slot_blocks, meta.slot_offsets, (), 0, meta.decode_block_tables[:1],
                                    lens[:1])
    assert torch.allclose(got[0:1], decode_attention(q[:1], cache, 0, padded_meta, 0.25, None), atol=1e-5)
    assert torch.equal(got[1], torch.zeros_like(got[1]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_decode_on_a_half_precision_cache_matches_float32_math_up_to_output_rounding(dtype):
    q, cache, meta = _decode_case(8, 2, 8, lens=[1, 5, 8, 26], seed=2)
    cache.data = cache.data.to(dtype)
    got = decode_attention_triton(q.to(dtype), cache, 1, meta, 0.25, None)
    reference = copy.copy(cache)
    reference.data = cache.data.float()  # the same rounded K/V, attended in float32
    expected = decode_attention(q.to(dtype).float(), reference, 1, meta, 0.25, None)
    assert got.dtype == dtype
    # probabilities are rounded to the cache's dtype before they weigh V (as flash attention does)
    assert torch.allclose(got.float(), expected, atol=torch.finfo(dtype).eps * 8)


@pytest.mark.parametrize("head_dim, block_size", [(24, 8), (16, 12)])
def test_triton_decode_handles_sizes_that_are_not_powers_of_two(head_dim, block_size):
    q, cache, meta = _decode_case(4, 2, block_size, lens=[3, 29], head_dim=head_dim)
    expected = decode_attention(q, cache, 0, meta, 0.25, None)
    assert torch.allclose(decode_attention_triton(q, cache, 0, meta, 0.25, None), expected, atol=1e-5)


def _mixed_step(chunks: list[tuple[int, int]], decode_lens: list[int], block_size: int, seed: int,
                heads: int = 8, kv_heads: int = 2, head_dim: int = 16):
    """A packed step: prefill chunks (query rows, cached tokens before them), then decodes. Returns
    q/k/v, a cache holding every earlier token, and the torch and Triton metadata for it."""
    gen = torch.Generator().manual_seed(seed)
    contexts = [start + n for n, start in chunks] + decode_lens
    cache = _cache(heads, kv_heads, head_dim, block_size, sum(-(-c // block_size) for c in contexts) + 2, gen)
    tables = _tables(contexts, block_size, cache.num_blocks, gen)
    positions = [p for (n, start) in chunks for p in range(start, start + n)] + [c - 1 for c in decode_lens]
    owners = [i for i, (n, _) in enumerate(chunks) for _ in range(n)] + [len(chunks) + i for i in range(len(decode_lens))]
    slot_blocks = torch.tensor([tables[o][p // block_size] for o, p in zip(owners, positions)])
    slot_offsets = torch.tensor([p % block_size for p in positions])
    width = max(len(t) for t in tables)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    rows, torch_chunks, row = len(positions), [], 0
    for i, (n, start) in enumerate(chunks):
        torch_chunks.append(PrefillChunk(row, n, start, padded[i, : -(-(start + n) // block_size)]))
        row += n
    decode_tables = padded[len(chunks):] if decode_lens else torch.zeros(0, width, dtype=torch.long)
    common = dict(slot_blocks=slot_blocks, slot_offsets=slot_offsets, num_prefill_rows=row,
                  decode_block_tables=decode_tables, decode_context_lens=torch.tensor(decode_lens, dtype=torch.long))
    torch_meta = AttentionMetadata(prefills=tuple(torch_chunks), **common)
    starts = [sum(n for n, _ in chunks[:i]) for i in range(len(chunks))]
    # 16-row tiles: the interpreter's cost grows with the tile
    packed = PackedPrefill(prefill_tiles([n for n, _ in chunks], block_m=16),
                           torch.tensor([(r, n, s) for r, (n, s) in zip(starts, chunks)]), padded[: len(chunks)],
                           block_m=16)
    triton_meta = AttentionMetadata(prefills=(), packed=packed, decode_splits=2,
                                    **common)
    q, k, v = (torch.randn(rows, h, head_dim, generator=gen) for h in (heads, kv_heads, kv_heads))
    return q, k, v, cache, torch_meta, triton_meta


@pytest.mark.parametrize("window", [None, 10])
def test_one_prefill_launch_matches_per_chunk_sdpa_for_fresh_and_continued_chunks(window):
    q, k, v, cache, torch_meta, triton_meta = _mixed_step([(20, 0), (7, 13), (1, 40), (33, 5)], [9, 26],
                                                          block_size=8, seed=5)
    triton_cache = copy.deepcopy(cache)
    expected = paged_attention(q, k, v, cache, 1, torch_meta, 0.3, window)
    got = paged_attention_triton(q, k, v, triton_cache, 1, triton_meta, 0.3, window)
    assert torch.equal(triton_cache.data, cache.data), "the new K/V land in the same slots"
    assert torch.allclose(got, expected, atol=1e-5)


def test_prefill_kernel_with_gqa_groups_of_three_and_an_odd_head_dim():
    q, k, v, cache, torch_meta, triton_meta = _mixed_step([(18, 0), (5, 30)], [], block_size=16, seed=6,
                                                          heads=6, kv_heads=2, head_dim=24)
    triton_cache = copy.deepcopy(cache)
    expected = paged_attention(q, k, v, cache, 0, torch_meta, 0.2, None)
    got = paged_attention_triton(q, k, v, triton_cache, 0, triton_meta, 0.2, None)
    assert torch.allclose(got, expected, atol=1e-5)


def test_engine_with_the_triton_backend_matches_the_torch_backend():
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.model.sampling_params import SamplingParams

    prompts = [[1, 2, 3], list(range(20, 45))]
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    torch_out = LLMEngine(EngineConfig(num_kv_blocks=16, attention_backend="torch")).generate(prompts, params)
    triton_out = LLMEngine(EngineConfig(num_kv_blocks=16, attention_backend="triton")).generate(prompts, params)
    assert triton_out == torch_out
