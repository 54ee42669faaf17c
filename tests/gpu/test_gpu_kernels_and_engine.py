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


def _engine_vs_transformers(dtype: str, backend: str) -> tuple[list[list[int]], list[list[int]]]:
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.engine.sampling_params import SamplingParams
    from tests.checkpoints import random_prompts

    engine = LLMEngine(EngineConfig(device="cuda", dtype=dtype, num_kv_blocks=512, attention_backend=backend))
    prompts = random_prompts([1, 7, 30, 64, 100, 170, 250, 300], seed=21)
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


def test_bfloat16_engine_on_gpu_tracks_transformers():
    ours, refs = _engine_vs_transformers("bfloat16", "triton")
    assert all(o[0] == r[0] for o, r in zip(ours, refs)), "first tokens differ"
    common = [next((i for i, (a, b) in enumerate(zip(o, r)) if a != b), len(o)) for o, r in zip(ours, refs)]
    assert sum(common) / len(common) >= 8, f"common prefixes too short: {common}"
