"""Prefill in one engine, decode in another: the engines' side of disaggregation, in-process."""

from __future__ import annotations

import torch

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.sampling_params import SamplingParams
from tests.checkpoints import random_prompts


def _drain(engine: LLMEngine) -> list:  # type: ignore[type-arg]
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    return outputs


def _hand_off(prefill: LLMEngine, decode: LLMEngine, rid: str, prompt: list[int], params: SamplingParams) -> list[int]:
    lease = decode.reserve(rid, len(prompt), params.max_tokens)
    assert lease is not None
    prefill.add_request(rid, prompt, params, prefill_only=True)
    (out,) = _drain(prefill)
    assert out.finish_reason == "prefilled"
    n_blocks = -(-len(prompt) // prefill.config.block_size)
    src = torch.tensor(out.kv_block_ids[:n_blocks])
    dst = torch.tensor(lease.block_ids[:n_blocks])
    decode.cache.data[dst] = prefill.cache.data[src]  # what a transport does across processes
    prefill.release_held(rid)
    decode.commit(rid, lease.lease_id, prompt, out.new_token_ids[0], params)
    return [out.new_token_ids[0]]


def test_decode_after_a_kv_hand_off_matches_a_single_engine():
    prompts = random_prompts([3, 40, 77, 130], seed=8)
    greedy = SamplingParams(max_tokens=15, ignore_eos=True)
    seeded = SamplingParams(max_tokens=15, temperature=0.8, seed=5, ignore_eos=True)
    single = LLMEngine(EngineConfig(num_kv_blocks=128))
    expected = single.generate(prompts, [greedy, seeded, greedy, seeded])
    prefill = LLMEngine(EngineConfig(num_kv_blocks=64))
    decode = LLMEngine(EngineConfig(num_kv_blocks=96))
    firsts = {f"r{i}": _hand_off(prefill, decode, f"r{i}", p, [greedy, seeded, greedy, seeded][i])
              for i, p in enumerate(prompts)}
    for out in _drain(decode):
        firsts[out.request_id] += out.new_token_ids
    assert [firsts[f"r{i}"] for i in range(len(prompts))] == expected
    for engine in (prefill, decode):
        engine.check_integrity()
        assert engine.pool.num_free == engine.pool.num_blocks


def test_held_prefill_blocks_count_as_used_until_released():
    prefill = LLMEngine(EngineConfig(num_kv_blocks=16))
    prefill.add_request("a", list(range(40)), SamplingParams(max_tokens=8), prefill_only=True)
    (out,) = _drain(prefill)
    assert len(out.kv_block_ids) == 3 and prefill.pool.num_free == 13
    prefill.check_integrity()
    assert prefill.release_held("a") and prefill.pool.num_free == 16


def test_prefill_only_request_that_samples_eos_ends_with_stop():
    prefill = LLMEngine(EngineConfig(num_kv_blocks=16))
    prompt = random_prompts([12], seed=9)[0]
    first = prefill.generate([prompt], SamplingParams(max_tokens=1))[0][0]
    prefill.add_request("a", prompt, SamplingParams(max_tokens=8, stop_token_ids=(first,)), prefill_only=True)
    (out,) = _drain(prefill)
    assert out.finish_reason == "stop"
    prefill.release_held("a")
    prefill.check_integrity()
