"""Seeded sampling through the whole engine, and request validation."""

from __future__ import annotations

import pytest

from common.model.sampling_params import SamplingParams
from tests.checkpoints import random_prompts
from tests.engine_helpers import checked_engine

SEEDED = SamplingParams(max_tokens=20, temperature=0.9, top_k=50, top_p=0.95, seed=1234, ignore_eos=True)


def _run(engine, requests):  # type: ignore[no-untyped-def]
    outputs: dict[str, list[int]] = {rid: [] for rid, _, _ in requests}
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
    while engine.has_unfinished_requests():
        for out in engine.step():
            outputs[out.request_id].extend(out.new_token_ids)
    return outputs


def test_seeded_sampling_repeats_across_runs_and_batch_compositions():
    target, *others = random_prompts([40, 5, 90, 13], seed=4)
    with checked_engine(num_kv_blocks=128) as engine:
        alone = _run(engine, [("t", target, SEEDED)])["t"]
        again = _run(engine, [("t", target, SEEDED)])["t"]
        crowd = [(f"o{i}", p, SamplingParams(max_tokens=30, temperature=1.0, seed=i)) for i, p in enumerate(others)]
        in_batch = _run(engine, [*crowd[:2], ("t", target, SEEDED), crowd[2]])["t"]
    assert alone == again == in_batch
    assert len(set(alone)) > 3, "sampling at temperature 0.9 should not be constant"


def test_different_seeds_give_different_tokens():
    prompt = random_prompts([30], seed=5)[0]
    with checked_engine(num_kv_blocks=64) as engine:
        a = _run(engine, [("a", prompt, SEEDED)])["a"]
        b = _run(engine, [("b", prompt, SamplingParams(max_tokens=20, temperature=0.9, seed=99, ignore_eos=True))])["b"]
    assert a != b


def test_stop_token_ends_the_request_with_reason_stop():
    prompt = random_prompts([10], seed=6)[0]
    with checked_engine(num_kv_blocks=64) as engine:
        free_run = _run(engine, [("a", prompt, SamplingParams(max_tokens=12, ignore_eos=True))])["a"]
        stop_at = free_run[4]
        first = free_run.index(stop_at)
        engine.add_request("b", prompt, SamplingParams(max_tokens=12, stop_token_ids=(stop_at,)))
        outs = []
        while engine.has_unfinished_requests():
            outs += engine.step()
    assert [t for o in outs for t in o.new_token_ids] == free_run[: first + 1]
    assert outs[-1].finish_reason == "stop"


def test_max_tokens_ends_the_request_with_reason_length():
    with checked_engine(num_kv_blocks=64) as engine:
        engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
        outs = []
        while engine.has_unfinished_requests():
            outs += engine.step()
    assert sum(len(o.new_token_ids) for o in outs) == 3 and outs[-1].finish_reason == "length"


@pytest.mark.parametrize(
    "prompt, params, message",
    [
        ([], SamplingParams(), "prompt is empty"),
        ([1] * 4000, SamplingParams(max_tokens=200), "exceeds the model's limit"),
        ([999], SamplingParams(), "prompt token ids"),
    ],
)
def test_requests_that_cannot_be_served_are_refused_with_a_reason(prompt, params, message):
    with checked_engine(num_kv_blocks=512) as engine:
        with pytest.raises(ValueError, match=message):
            engine.add_request("x", prompt, params)


def test_abort_frees_the_requests_blocks_at_the_next_step():
    with checked_engine(num_kv_blocks=64) as engine:
        engine.add_request("a", list(range(100)), SamplingParams(max_tokens=50, ignore_eos=True))
        engine.step()
        assert engine.pool.num_free < engine.pool.num_blocks
        assert engine.abort_request("a")
        outs = engine.step()
        assert [(o.request_id, o.finish_reason) for o in outs] == [("a", "abort")]
        assert engine.pool.num_free == engine.pool.num_blocks
        assert not engine.abort_request("a")


def test_pool_size_follows_the_memory_fraction():
    from common.engine.config import EngineConfig
    from common.model.kv_cache import PagedKVCache
    from common.engine.kv_memory import free_memory_bytes, num_kv_blocks
    from common.model.config import load_model_config
    from common.model.location import ensure_model
    import torch

    model = load_model_config(ensure_model("tiny"))
    per_block = PagedKVCache.bytes_per_block(model, 16, torch.float32)
    blocks = num_kv_blocks(EngineConfig(kv_cache_memory_fraction=0.01), model, torch.device("cpu"))
    expected = free_memory_bytes(torch.device("cpu")) * 0.01 / per_block
    assert abs(blocks - expected) / expected < 0.05
    assert num_kv_blocks(EngineConfig(num_kv_blocks=7, kv_cache_memory_fraction=0.5), model,
                         torch.device("cpu")) == 7


def test_bfloat16_engine_on_cpu_agrees_with_float32_on_first_tokens():
    prompts = random_prompts([5, 40, 120], seed=13)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    with checked_engine(num_kv_blocks=64) as fp32, checked_engine(num_kv_blocks=64, dtype="bfloat16") as bf16:
        full, half = fp32.generate(prompts, params), bf16.generate(prompts, params)
    assert [o[0] for o in half] == [o[0] for o in full]
