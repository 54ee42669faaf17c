"""The CPU backend's C++ decode attention (``common/cpu_kernels``) against attention computed by its
definition in float64, and the decode stage on the kernel against the pool."""

from __future__ import annotations

import pytest
import torch

from common.cpu_kernels.decode_attention import dense_decode_attention, unsupported
from common.model.attention import decode_attention
from common.model.attention_metadata import AttentionMetadata
from common.model.config import parse_model_config
from common.model.dense_decode_cache import DecodeStage
from common.model.kv_cache import PagedKVCache


def brute_force(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slots: list[int], lens: list[int],
                scale: float, window: int | None) -> torch.Tensor:
    """Row by row, head by head: softmax(q·Kᵀ·scale)·V over the row's positions, in float64."""
    batch, heads, dim = q.shape
    group = heads // keys.shape[1]
    out = torch.zeros(batch, heads, dim, dtype=torch.float64)
    for b, (slot, length) in enumerate(zip(slots, lens)):
        start = max(0, length - window) if window else 0
        for h in range(heads):
            k = keys[slot, h // group, start:length].double()
            v = values[slot, h // group, start:length].double()
            weights = torch.softmax(k @ q[b, h].double() * scale, dim=0)
            out[b, h] = weights @ v
    return out


CASES = [  # heads, kv_heads, head_dim, width, lens, window
    (9, 3, 64, 640, [1, 15, 16, 17, 300, 640], None),
    (4, 1, 128, 128, [33, 128, 2], None),
    (8, 8, 64, 256, [200, 64, 250], 37),
    (6, 2, 256, 64, [64, 1, 40], 16),
    (8, 4, 32, 128, [100, 3], None),
    (4, 2, 96, 64, [50, 64], None),
]


@pytest.mark.parametrize("heads,kv_heads,dim,width,lens,window", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_is_softmax_attention_over_each_rows_own_positions(heads, kv_heads, dim, width, lens, window,
                                                                      dtype):
    gen = torch.Generator().manual_seed(len(lens) * dim + heads)
    slots = list(range(len(lens) + 2))[::-1][: len(lens)]  # rows in other slots than their index
    keys = torch.randn(len(lens) + 2, kv_heads, width, dim, generator=gen).to(dtype)
    values = torch.randn(len(lens) + 2, kv_heads, width, dim, generator=gen).to(dtype)
    q = torch.randn(len(lens), heads, dim, generator=gen).to(dtype)
    for s, length in zip(slots, lens):  # what lies past a row's context must not matter
        keys[s, :, length:] = 1e4
        values[s, :, length:] = float("nan")
    got = dense_decode_attention(q, keys, values, torch.tensor(slots), torch.tensor(lens), dim**-0.5, window)
    expected = brute_force(q, keys, values, slots, lens, dim**-0.5, window)
    assert got.dtype == dtype
    tolerance = 2e-6 if dtype == torch.float32 else 8e-3  # bfloat16: the output's own rounding
    torch.testing.assert_close(got.double(), expected, rtol=tolerance, atol=tolerance)


def test_a_padding_row_attends_nothing_and_yields_zeros():
    keys = torch.randn(2, 1, 64, 64)
    got = dense_decode_attention(torch.randn(2, 2, 64), keys, keys.clone(), torch.tensor([0, 1]),
                                 torch.tensor([5, 0]), 0.125, None)
    assert got[1].abs().sum() == 0 and got[0].abs().sum() > 0


@pytest.mark.parametrize("change,message", [
    (lambda a: {**a, "lens": torch.tensor([65])}, "past the width"),
    (lambda a: {**a, "slots": torch.tensor([3])}, "slot out of range"),
    (lambda a: {**a, "keys": torch.randn(2, 1, 40, 64), "values": torch.randn(2, 1, 40, 64)}, "multiple of 16"),
    (lambda a: {**a, "q": a["q"].double()}, "one dtype"),
])
def test_input_the_kernel_cannot_read_is_refused_with_a_reason(change, message):
    args = {"q": torch.randn(1, 2, 64), "keys": torch.randn(2, 1, 64, 64), "values": torch.randn(2, 1, 64, 64),
            "slots": torch.tensor([1]), "lens": torch.tensor([10])}
    args = change(args)
    with pytest.raises(RuntimeError, match=message):
        dense_decode_attention(args["q"], args["keys"], args["values"], args["slots"], args["lens"], 0.125, None)


def test_what_the_kernel_does_not_cover_is_named():
    assert unsupported(64, torch.bfloat16) is None and unsupported(128, torch.float32) is None
    assert "head_dim 80" in (unsupported(80, torch.float32) or "") and unsupported(32, torch.float32) is None
    assert "float16" in (unsupported(64, torch.float16) or "")


def _step_on_both(stage: DecodeStage, cache: PagedKVCache, tables: dict[int, list[int]], lens: dict[int, int],
                  gen: torch.Generator, heads: int) -> None:
    """One decode step of the requests ``lens`` (id -> context, its new token included) with 16-token
    blocks: the new K/V written to the pool's layer 1, then the stage on the kernel attends as the pool does."""
    uids, ctx = list(lens), list(lens.values())
    n, kv_heads, dim = len(uids), cache.num_kv_heads, cache.data.shape[-1]
    q, k, v = (torch.randn(n, h, dim, generator=gen) for h in (heads, kv_heads, kv_heads))
    blocks = torch.tensor([tables[u][(c - 1) // 16] for u, c in zip(uids, ctx)])
    cache.write(1, blocks, torch.tensor([(c - 1) % 16 for c in ctx]), k, v)
    width = max(-(-c // 16) for c in ctx)
    meta = AttentionMetadata(slot_blocks=blocks, slot_offsets=torch.zeros(n, dtype=torch.int64), prefills=(),
                             num_prefill_rows=0, decode_block_tables=torch.tensor([tables[u][:width] for u in uids]),
                             decode_context_lens=torch.tensor(ctx))
    got = stage.attend(q, k, v, 1, stage.plan(uids, ctx, [tables[u] for u in uids]), 0.125, None)
    torch.testing.assert_close(got, decode_attention(q, cache, 1, meta, 0.125, None), rtol=1e-5, atol=1e-5)


def test_the_stage_on_the_kernel_attends_as_the_pool_while_contexts_grow_and_requests_change():
    model = parse_model_config({"vocab_size": 10, "hidden_size": 6 * 64, "intermediate_size": 8,
                                "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2})
    gen = torch.Generator().manual_seed(4)
    cache = PagedKVCache(model, 96, 16, torch.float32, torch.device("cpu"))
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen))
    stage = DecodeStage(cache, max_slots=4, kernel=True)
    assert stage.long is None  # the kernel reads each row's own positions: no second stage
    tables = {u: list(range(u * 24, u * 24 + 24)) for u in range(4)}
    lens = {0: 20, 1: 300, 2: 5}
    for step in range(4):
        if step == 2:
            del lens[1]
            lens[3] = 40  # a newcomer, filled from the pool
        _step_on_both(stage, cache, tables, lens, gen, heads=6)
        lens = {u: c + 1 for u, c in lens.items()}


def test_the_kernel_stage_never_reallocates_for_a_growing_batch_and_reads_nothing_it_did_not_write():
    """Its allocation is left uninitialised (here: NaN everywhere, as fresh memory may hold
    anything), with a row for every slot: a batch growing from 3 to 40 attends as the pool does in
    the very same tensors."""
    model = parse_model_config({"vocab_size": 10, "hidden_size": 4 * 32, "intermediate_size": 8,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})
    gen = torch.Generator().manual_seed(9)
    cache = PagedKVCache(model, 40 * 16, 16, torch.float32, torch.device("cpu"))
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen))
    stage = DecodeStage(cache, max_slots=64, kernel=True)
    for tensor in stage.keys + stage.values:
        tensor.fill_(float("nan"))
    allocated = [t.data_ptr() for t in stage.keys + stage.values]
    tables = {u: list(range(u * 16, u * 16 + 16)) for u in range(40)}  # 256 positions each
    lens = {u: 150 + 7 * u % 90 for u in range(40)}  # never a whole number of the kernel's rows
    for n in (3, 9, 17, 40, 12):
        _step_on_both(stage, cache, tables, {u: lens[u] for u in range(n)}, gen, heads=4)
        assert [t.data_ptr() for t in stage.keys + stage.values] == allocated, f"reallocated at a batch of {n}"
        lens = {u: c + 1 for u, c in lens.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 300])
def test_the_cpu_norms_and_rope_compute_what_the_torch_ops_compute(dtype, rows):
    """RoPE bit for bit in both dtypes, the norms bit for bit in bfloat16 and to float32 rounding
    in float32 (their sum of squares runs in another order); the residual is updated in place."""
    from common.cpu_kernels.layer_ops import CpuRotary, add_rms_norm, rms_norm
    from common.model import ops
    from common.model.config import RopeConfig
    from common.model.rope import RotaryTable

    gen = torch.Generator().manual_seed(rows)
    width = 3 * 16 + 8  # a row that is not a whole number of vectors
    x, delta, weight = (torch.randn(n, width, generator=gen).to(dtype) for n in (rows, rows, 1))
    weight = weight[0]
    exact = dict(rtol=0, atol=0) if dtype == torch.bfloat16 else dict(rtol=3e-7, atol=1e-6)
    torch.testing.assert_close(rms_norm(x, weight, 1e-5), ops.rms_norm(x, weight, 1e-5), **exact)
    ours, theirs = x.clone(), x.clone()
    torch.testing.assert_close(add_rms_norm(delta, ours, weight, 1e-6), ops.add_rms_norm(delta, theirs, weight, 1e-6),
                               **exact)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    table = RotaryTable(RopeConfig(theta=10000.0), 64, 4096, torch.device("cpu"))
    positions = torch.randint(0, 4096, (rows,), generator=gen)
    qkv = torch.randn(rows, 14 * 64, generator=gen).to(dtype)
    q, k = qkv[:, : 9 * 64].view(rows, 9, 64), qkv[:, 9 * 64: 12 * 64].view(rows, 3, 64)
    expected = ops.TorchRotary(table, positions, dtype).apply(q, k)
    got = CpuRotary(table, positions, dtype).apply(q, k)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert got[0].data_ptr() == q.data_ptr()  # rotated in place
