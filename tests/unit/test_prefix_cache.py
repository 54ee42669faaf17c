"""Prefix caching: block hashes, the pool's parked blocks, and greedy output token-identical to
transformers with cache hits (whole blocks, a hit ending mid-prompt, a preempted request's own
blocks, eviction under pressure, chunked prefill, both memory policies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.engine.block_pool import BlockPool
from common.engine.prefix_cache import PrefixIndex, chain_hashes, model_salt
from common.model.sampling_params import SamplingParams
from common.model.location import ensure_model
from tests.checkpoints import random_prompts, reference_greedy
from tests.engine_helpers import checked_engine, run_staggered

B = 16  # the engine's default block size


def test_equal_prefixes_have_equal_hashes_and_one_changed_token_changes_every_later_one():
    a = list(range(100))
    b = a[:40] + [999] + a[41:]
    ha, hb = chain_hashes(a, B, salt=1), chain_hashes(b, B, salt=1)
    assert len(ha) == 100 // B
    assert ha[:2] == hb[:2], "blocks 0 and 1 hold the same tokens after the same prefix"
    assert all(x != y for x, y in zip(ha[2:], hb[2:])), "block 2 differs, and so does everything after it"
    assert chain_hashes(a, B, salt=2)[0] != ha[0], "another model's blocks never match"
    assert chain_hashes(a, B, salt=1, known=ha[:3]) == ha, "continuing from known hashes"


def test_a_named_block_is_parked_taken_back_and_evicted_last_parked_last():
    index = PrefixIndex()
    pool = BlockPool(4, index)
    first, second = pool.allocate(2), pool.allocate(1)
    assert first is not None and second is not None
    index.add(first[0], 10)
    index.add(first[1], 11)
    index.add(second[0], 12)
    pool.free(second)
    pool.free(first)  # parked in the order freed: block of 12, then 11, 10 (reversed)
    assert pool.num_free == 4 and len(index.parked) == 3
    pool.check_integrity()
    assert index.lookup([10, 11, 99]) == first
    pool.share([first[0]])  # a prompt with that prefix takes it back
    assert pool.refcount(first[0]) == 1 and first[0] not in index.parked
    taken = pool.allocate(2)  # one blank block, then the least recently parked
    assert taken is not None and second[0] in taken
    assert index.lookup([12]) == [], "an evicted block's hash names nothing"
    assert index.drain_changes() == ([10, 11], [12]), "net changes: 12 came and went"
    pool.free(taken)
    pool.free([first[0]])
    pool.check_integrity()


def test_changes_overflowing_a_digest_ask_for_a_snapshot():
    from common.engine import prefix_cache

    index = PrefixIndex()
    for h in range(prefix_cache.DIGEST_MAX + 1):
        index.add(h, h + 1000)
    assert index.drain_changes() is None
    assert len(index.snapshot()) == prefix_cache.DIGEST_MAX
    index.add(10**6, 5)
    assert index.drain_changes() == ([5], [])


@pytest.fixture(scope="module")
def default_model() -> Path:
    return ensure_model("tiny")


def _hits(engine) -> int:  # type: ignore[no-untyped-def]
    return engine.pool.prefix_index.hits


def _run_in_turn(engine, prompts: list[list[int]], max_tokens: list[int]) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """One request after another (each finishes before the next), integrity after every step."""
    return [run_staggered(engine, [p], [n], [0])[0] for p, n in zip(prompts, max_tokens)]


@pytest.mark.parametrize("memory_policy", ["guaranteed_no_evict", "max_utilization"])
def test_a_conversation_turn_reuses_the_last_one_and_answers_as_transformers(default_model, memory_policy):
    first = random_prompts([70], seed=3)[0]
    answer = reference_greedy(default_model, [first], [20])[0]
    second = first + answer + random_prompts([25], seed=4)[0]  # the history resent, then a new message
    mid = first[:40] + random_prompts([30], seed=5)[0]  # shares 2.5 blocks: the hit ends mid-prompt
    exact = second[:96]  # 6 full blocks, all cached: the last token is still computed
    prompts, max_tokens = [first, second, mid, exact], [20, 12, 9, 7]
    reference = reference_greedy(default_model, prompts, max_tokens)
    with checked_engine(default_model, num_kv_blocks=64, memory_policy=memory_policy) as engine:
        hits = [0]
        outputs = []
        for p, n in zip(prompts, max_tokens):
            before = _hits(engine)
            outputs.append(_run_in_turn(engine, [p], [n])[0])
            hits.append(_hits(engine) - before)
        assert outputs == reference
    # the first turn's prompt blocks (4 full of 70 tokens) and its answer's (90 computed -> 5)
    assert hits[1:] == [0, 5 * B, 2 * B, 5 * B], hits


def test_uncached_output_is_the_same_and_nothing_is_hit(default_model):
    prompts = [random_prompts([50], seed=6)[0]] * 2
    reference = reference_greedy(default_model, prompts, [10, 10])
    with checked_engine(default_model, num_kv_blocks=64, enable_prefix_caching=False) as engine:
        assert _run_in_turn(engine, prompts, [10, 10]) == reference
        assert engine.pool.prefix_index is None


def test_a_preempted_request_finds_its_own_blocks_again(default_model):
    # Random prompts share no prefix: every hit is a preempted request taking back its blocks.
    lengths, max_tokens = [120, 90, 150, 60, 110], [40, 30, 25, 45, 35]
    prompts = random_prompts(lengths, seed=7)
    reference = reference_greedy(default_model, prompts, max_tokens)
    with checked_engine(default_model, num_kv_blocks=26, memory_policy="max_utilization") as engine:
        preempted = []
        original = engine.scheduler._preempt

        def counting(request):  # type: ignore[no-untyped-def]
            preempted.append(request.request_id)
            original(request)

        engine.scheduler._preempt = counting  # type: ignore[method-assign]
        assert run_staggered(engine, prompts, max_tokens, [0, 0, 1, 2, 3]) == reference
    assert preempted, "the pool was meant to force preemption"
    assert _hits(engine) > 0, "a preempted request's parked blocks were meant to be found again"


def test_eviction_under_pressure_forgets_old_prefixes_and_stays_exact(default_model):
    prompts = random_prompts([100] * 6, seed=8)
    again = [prompts[0], prompts[5]]  # the oldest was evicted by then, the newest not
    reference = reference_greedy(default_model, prompts + again, [8] * 8)
    with checked_engine(default_model, num_kv_blocks=20) as engine:
        outputs = _run_in_turn(engine, prompts, [8] * 6)
        before = _hits(engine)
        outputs.append(_run_in_turn(engine, [again[0]], [8])[0])
        evicted_hit = _hits(engine) - before
        before = _hits(engine)
        outputs.append(_run_in_turn(engine, [again[1]], [8])[0])
        kept_hit = _hits(engine) - before
        assert outputs == reference
        assert len(engine.pool.prefix_index) <= 20
    assert evicted_hit == 0 and kept_hit == 6 * B


def test_hits_with_prompts_chunked_across_steps_and_requests_running_together(default_model):
    base = random_prompts([64], seed=9)[0]
    prompts = [base + tail for tail in random_prompts([40, 70, 5, 100], seed=10)] + [base]
    max_tokens = [12, 7, 20, 9, 5]
    reference = reference_greedy(default_model, prompts, max_tokens)
    with checked_engine(default_model, num_kv_blocks=128, max_num_tokens=48, max_batch_size=3) as engine:
        outputs = _run_in_turn(engine, prompts[:1], max_tokens[:1])
        outputs += run_staggered(engine, prompts[1:], max_tokens[1:], [0, 0, 2, 5])
        assert outputs == reference
        assert _hits(engine) >= 4 * 3 * B  # the shared 64 tokens (4 blocks), 3 of the 4 hits whole at least


def test_a_prefill_only_request_leaves_its_prompt_cached_once_released(default_model):
    prompt = random_prompts([80], seed=11)[0]
    with checked_engine(default_model, num_kv_blocks=32) as engine:
        engine.add_request("held", prompt, SamplingParams(max_tokens=1), prefill_only=True)
        while engine.has_unfinished_requests():
            engine.step()
        assert engine.release_held("held")
        assert len(engine.pool.prefix_index.parked) == 5
        before = _hits(engine)
        _run_in_turn(engine, [prompt], [3])
        assert _hits(engine) - before == 4 * B  # 4 of 5 blocks: the last token is computed again
