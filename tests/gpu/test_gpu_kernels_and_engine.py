"""GPU checks (skipped without CUDA): the Triton kernel at real shapes, engine output on the GPU."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _case(heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, lens: list[int]):  # type: ignore[no-untyped-def]
    from common.model.attention_metadata import AttentionMetadata
    from common.model.kv_cache import PagedKVCache
    from common.model.config import parse_model_config

    model = parse_model_config({"vocab_size": 10, "hidden_size": heads * head_dim, "intermediate_size": 8,
                                "num_hidden_layers": 2, "num_attention_heads": heads,
                                "num_key_value_heads": kv_heads, "head_dim": head_dim})
    widths = [-(-n // 16) for n in lens]
    cache = PagedKVCache(model, sum(widths) + 8, 16, dtype, torch.device("cuda"))
    cache.data.normal_()
    order = torch.randperm(cache.num_blocks).tolist()
    tables, at = [], 0
    for w in widths:
        tables.append(order[at:at + w] + [0] * (max(widths) - w))
        at += w
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long, device="cuda"),
                             torch.zeros(0, dtype=torch.long, device="cuda"), (), 0,
                             torch.tensor(tables, device="cuda"), torch.tensor(lens, device="cuda"))
    return torch.randn(len(lens), heads, head_dim, device="cuda", dtype=dtype), cache, meta


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_triton_decode_matches_torch_on_gpu(dtype, atol, head_dim):
    from common.model.attention import decode_attention
    from common.model.triton_attention import decode_attention_triton

    lens = [1 + (i * 61) % 2000 for i in range(32)]
    q, cache, meta = _case(32, 8, head_dim, dtype, lens)
    expected = decode_attention(q, cache, 1, meta, head_dim**-0.5, None).float()
    got = decode_attention_triton(q, cache, 1, meta, head_dim**-0.5, None).float()
    assert torch.allclose(got, expected, atol=atol, rtol=atol)


def _prompts() -> list[list[int]]:
    from tests.checkpoints import random_prompts

    return random_prompts([1, 7, 30, 64, 100, 170, 250, 300], seed=21)


def _engine_vs_transformers(dtype: str, backend: str) -> tuple[list[list[int]], list[list[int]]]:
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.model.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(device="cuda", dtype=dtype, num_kv_blocks=512, attention_backend=backend))
    prompts = _prompts()
    ours = engine.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True))
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(engine.model_dir, dtype=getattr(torch, dtype)).cuda().eval()
    hf.generation_config.eos_token_id = None
    refs = []
    for p in prompts:
        ids = torch.tensor([p], device="cuda")
        refs.append(hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                pad_token_id=0)[0, len(p):].tolist())
    return ours, refs


def test_float32_engine_on_gpu_matches_transformers_exactly():
    ours, refs = _engine_vs_transformers("float32", "triton")
    assert ours == refs


def _first_token_logits_float32(model_dir: str, prompts: list[list[int]]) -> list[torch.Tensor]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        return [hf(torch.tensor([p], device="cuda")).logits[0, -1].float().cpu() for p in prompts]


def test_bfloat16_engine_on_gpu_tracks_transformers():
    """bfloat16 rounding may break a near-tie of the logits either way, in transformers as in the
    engine (their kernels round differently), so a first token that differs from transformers' bfloat16 one
    must be a near-tie in transformers' float32 logits: within a few bfloat16 roundings
    (8 * 2^-8) of the largest logit's magnitude from the top."""
    from common.model.location import resolve_model_dir
    from common.model.presets import DEFAULT_PRESET

    ours, refs = _engine_vs_transformers("bfloat16", "triton")
    prompts = _prompts()
    logits = _first_token_logits_float32(resolve_model_dir(None, DEFAULT_PRESET), prompts)
    for i, (o, r, z) in enumerate(zip(ours, refs, logits)):
        if o[0] != r[0]:
            gap, tol = (z.max() - z[o[0]]).item(), 8 * 2**-8 * z.abs().max().item()
            assert gap <= tol, f"prompt {i}: first token {o[0]} against {r[0]}, {gap:.4f} below the top (> {tol:.4f})"
    common = [next((i for i, (a, b) in enumerate(zip(o, r)) if a != b), len(o)) for o, r in zip(ours, refs)]
    assert sum(common) / len(common) >= 8, f"common prefixes too short: {common}"


def test_split_context_decode_matches_torch_at_long_contexts_on_gpu():
    from common.kernels.decode_attention import num_splits, paged_decode, target_programs
    from common.model.attention import decode_attention

    for lens in ([600] * 32, [8000]):
        q, cache, meta = _case(32, 8, 128, torch.bfloat16, lens)
        splits = num_splits(len(lens), 8, target_programs(q.device), max(lens))
        got = paged_decode(q, cache.data, 1, meta.decode_block_tables, meta.decode_context_lens, 16, 128**-0.5,
                           None, splits)
        expected = decode_attention(q, cache, 1, meta, 128**-0.5, None)
        assert torch.allclose(got.float(), expected.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_layer_kernels_round_as_torch_does_on_gpu(dtype):
    """On the GPU float32 -> half conversions round to nearest, as torch's do (the CPU
    interpreter truncates, so only here is the rounding checked).

    SiLU's float32 value differs from torch's by a few float32 ulps (Triton's exp and division
    are the fast approximate ones), which float16's 11-bit mantissa shows: on an H100 some float16
    elements differed where bfloat16's were all equal. So bfloat16 must match exactly and float16
    within two float16 ulps (a one-ulp SiLU difference carried through the product)."""
    from common.kernels.activation import silu_mul as silu_mul_triton
    from common.kernels.norm import add_rms_norm as add_rms_norm_triton
    from common.model.ops import add_rms_norm, silu_mul

    gate_up = torch.randn(64, 2 * 8192, device="cuda", dtype=dtype)
    got, expected = silu_mul_triton(gate_up), silu_mul(gate_up)
    if dtype == torch.bfloat16:
        assert torch.equal(got, expected)
    else:
        tiny = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps  # the subnormal step
        assert torch.allclose(got.float(), expected.float(), rtol=2 * torch.finfo(dtype).eps, atol=2 * tiny)
    delta, residual = (torch.randn(64, 2048, device="cuda", dtype=dtype) for _ in range(2))
    w = torch.randn(2048, device="cuda", dtype=dtype)
    expected_residual = residual.clone()
    expected = add_rms_norm(delta, expected_residual, w, 1e-5)
    got = add_rms_norm_triton(delta, residual, w, 1e-5)
    assert torch.equal(residual, expected_residual)
    assert torch.allclose(got.float(), expected.float(), atol=4 * torch.finfo(dtype).eps * expected.abs().max().item())


def test_cuda_graph_decode_equals_eager_token_for_token_in_float32():
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from tests.checkpoints import random_prompts
    from tests.engine_helpers import run_staggered

    prompts = random_prompts([1, 7, 30, 64, 100, 170, 250, 300, 9, 44], seed=22)
    max_tokens, joins = [24, 5, 17, 30, 8, 12, 20, 3, 28, 16], [0, 0, 1, 1, 2, 5, 9, 9, 14, 20]
    results = {}
    for eager in (True, False):
        engine = LLMEngine(EngineConfig(device="cuda", dtype="float32", num_kv_blocks=512, max_batch_size=16,
                                        enforce_eager=eager))
        assert (engine.runner.graphs is None) == eager
        results[eager] = run_staggered(engine, prompts, max_tokens, joins)
    assert results[False] == results[True]


def test_one_launch_prefill_matches_sdpa_on_gpu_for_long_and_continued_chunks():
    import copy

    from common.kernels.prefill_attention import PackedPrefill, prefill_tiles
    from common.model.attention import paged_attention
    from common.model.attention_metadata import AttentionMetadata, PrefillChunk
    from common.model.triton_attention import paged_attention_triton

    chunks = [(1400, 0), (700, 700), (37, 5)]  # (query rows, cached tokens before them)
    q_rows = sum(n for n, _ in chunks)
    _, cache, _ = _case(32, 8, 128, torch.bfloat16, [s + n for n, s in chunks])
    widths = [-(-(s + n) // 16) for n, s in chunks]
    order = torch.randperm(cache.num_blocks).tolist()
    rows, at = [], 0
    for w in widths:
        rows.append(order[at:at + w] + [0] * (max(widths) - w))
        at += w
    tables = torch.tensor(rows, device="cuda")
    positions = torch.cat([torch.arange(s, s + n) for n, s in chunks]).cuda()
    owner = torch.repeat_interleave(torch.arange(len(chunks)), torch.tensor([n for n, _ in chunks])).cuda()
    slot_blocks, slot_offsets = tables[owner, positions // 16], positions % 16
    starts = [0, chunks[0][0], chunks[0][0] + chunks[1][0]]
    torch_meta = AttentionMetadata(slot_blocks, slot_offsets, tuple(
        PrefillChunk(r, n, s, tables[i, : widths[i]]) for i, (r, (n, s)) in enumerate(zip(starts, chunks))), q_rows,
        torch.zeros(0, 1, dtype=torch.long, device="cuda"), torch.zeros(0, dtype=torch.long, device="cuda"))
    packed = PackedPrefill(prefill_tiles([n for n, _ in chunks]).cuda(),
                           torch.tensor([(r, n, s) for r, (n, s) in zip(starts, chunks)], device="cuda"), tables)
    triton_meta = AttentionMetadata(slot_blocks, slot_offsets, (), q_rows, torch_meta.decode_block_tables,
                                    torch_meta.decode_context_lens, packed=packed)
    q, k, v = (torch.randn(q_rows, h, 128, device="cuda", dtype=torch.bfloat16) for h in (32, 8, 8))
    triton_cache = copy.deepcopy(cache)
    expected = paged_attention(q, k, v, cache, 1, torch_meta, 128**-0.5, None)
    got = paged_attention_triton(q, k, v, triton_cache, 1, triton_meta, 128**-0.5, None)
    assert torch.equal(triton_cache.data, cache.data)
    assert torch.allclose(got.float(), expected.float(), atol=2e-2, rtol=2e-2)
