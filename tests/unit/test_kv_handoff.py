"""Prefill in one engine, decode in another: the engines' side of disaggregation, in-process."""

from __future__ import annotations

import torch

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.model.sampling_params import SamplingParams
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


def test_the_next_turn_copies_only_the_blocks_the_decode_engine_does_not_hold(tmp_path):
    from common.engine.prefix_cache import chain_hashes
    from common.model.location import ensure_model
    from tests.checkpoints import reference_greedy

    model = ensure_model("tiny")
    greedy = SamplingParams(max_tokens=12, ignore_eos=True)
    prefill = LLMEngine(EngineConfig(model=str(model), num_kv_blocks=64))
    decode = LLMEngine(EngineConfig(model=str(model), num_kv_blocks=64))
    first = random_prompts([70], seed=12)[0]
    answer = _hand_off(prefill, decode, "t1", first, greedy) + [t for o in _drain(decode) for t in o.new_token_ids]
    second = first + answer + random_prompts([20], seed=13)[0]  # 102 tokens: 6 full blocks
    hashes = chain_hashes(second, 16, decode.prefix_salt)
    lease = decode.reserve("t2", len(second), greedy.max_tokens, prefix_hashes=hashes)
    assert lease is not None
    # turn 1 left 70 + 11 tokens of KV on the decode engine: 5 full blocks, the 5th holding answer tokens
    assert lease.cached == 5 and decode.leases.reserved_blocks("t2", lease.lease_id) == set(lease.block_ids[5:])
    prefill.add_request("t2", second, greedy, prefill_only=True)
    (out,) = _drain(prefill)
    n_blocks = -(-len(second) // 16)
    held_before = decode.cache.data[torch.tensor(lease.block_ids[:5])].clone()
    src, dst = torch.tensor(out.kv_block_ids[5:n_blocks]), torch.tensor(lease.block_ids[5:n_blocks])
    decode.cache.data[dst] = prefill.cache.data[src]  # only the blocks it lacks
    prefill.release_held("t2")
    decode.commit("t2", lease.lease_id, second, out.new_token_ids[0], greedy)
    tokens = [out.new_token_ids[0]] + [t for o in _drain(decode) for t in o.new_token_ids]
    assert tokens == reference_greedy(model, [second], [12])[0]
    assert torch.equal(decode.cache.data[torch.tensor(lease.block_ids[:5])], held_before), "shared blocks untouched"
    for engine in (prefill, decode):
        engine.check_integrity()
        assert engine.pool.num_free == engine.pool.num_blocks
