"""The CPU's dense decode stage attends as the pool does, while its allocation grows and shrinks
with the longest context it holds."""

from __future__ import annotations

import torch

from common.model.attention import decode_attention
from common.model.attention_metadata import AttentionMetadata
from common.model.config import parse_model_config
from common.model.dense_decode_cache import (MAX_LONG_ROWS, SECOND_STAGE_CALLS, SHRINK_SLACK, WIDTH_STEP, DecodeStage,
                                           allocation, long_rows, slot_allocation)
from common.model.kv_cache import PagedKVCache

BLOCK = 16


def _cache(gen: torch.Generator, dtype: torch.dtype = torch.float32) -> PagedKVCache:
    model = parse_model_config({"vocab_size": 10, "hidden_size": 6 * 16, "intermediate_size": 8,
                                "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
                                "head_dim": 16})
    cache = PagedKVCache(model, 96, BLOCK, dtype, torch.device("cpu"))
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen))
    return cache


def _step(stage: DecodeStage, cache: PagedKVCache, uids: list[int], lens: list[int], tables: dict[int, list[int]],
          gen: torch.Generator, keep: tuple[int, ...] = (), plans: list | None = None  # type: ignore[type-arg]
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of every request in ``uids`` at context ``lens`` (its new token included):
    the new K/V go to the pool first (as ``paged_attention`` does), then both paths attend."""
    layer, n = 1, len(uids)
    q = torch.randn(n, 6, 16, generator=gen).to(cache.data.dtype)
    k = torch.randn(n, 2, 16, generator=gen).to(cache.data.dtype)
    v = torch.randn(n, 2, 16, generator=gen).to(cache.data.dtype)
    slots = [tables[u][(length - 1) // BLOCK] for u, length in zip(uids, lens)]
    cache.write(layer, torch.tensor(slots), torch.tensor([(length - 1) % BLOCK for length in lens]), k, v)
    width = max(-(-length // BLOCK) for length in lens)
    block_tables = torch.tensor([tables[u][:width] + [0] * (width - len(tables[u][:width])) for u in uids])
    meta = AttentionMetadata(slot_blocks=torch.tensor(slots), slot_offsets=torch.zeros(n, dtype=torch.int64),
                             prefills=(), num_prefill_rows=0, decode_block_tables=block_tables,
                             decode_context_lens=torch.tensor(lens))
    plan = stage.plan(uids, lens, [tables[u] for u in uids], keep=keep)
    if plans is not None:
        plans.append(plan)
    return stage.attend(q, k, v, layer, plan, 0.25, None), decode_attention(q, cache, layer, meta, 0.25, None)


def test_the_stage_attends_as_the_pool_while_its_width_follows_the_longest_context():
    gen = torch.Generator().manual_seed(0)
    cache = _cache(gen)
    tables = {u: list(range(u * 24, u * 24 + 24)) for u in range(4)}  # 384 positions each
    stage = DecodeStage(cache, max_slots=4, split=False)  # one stage: the long context sets its width
    lens = {0: 20, 1: 300, 2: 5}
    widths = []
    for _ in range(3):  # the long request makes the allocation grow past 300
        got, expected = _step(stage, cache, list(lens), list(lens.values()), tables, gen)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        widths.append(stage.width)
        lens = {u: n + 1 for u, n in lens.items()}
    assert max(lens.values()) <= widths[-1] <= allocation(max(lens.values()))
    del lens[1]  # it finished: the others' contexts leave most of the allocation unused
    lens[3] = 40  # a newcomer is filled from the pool
    got, expected = _step(stage, cache, list(lens), list(lens.values()), tables, gen)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert stage.width == WIDTH_STEP < widths[-1] - SHRINK_SLACK  # shrunk to what the contexts need


def test_a_bfloat16_stage_attends_as_the_pool_to_bfloat16_rounding():
    gen = torch.Generator().manual_seed(1)
    cache = _cache(gen, torch.bfloat16)
    tables = {u: list(range(u * 24, u * 24 + 24)) for u in range(3)}
    stage = DecodeStage(cache, max_slots=3)
    got, expected = _step(stage, cache, [0, 1, 2], [7, 130, 64], tables, gen)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected.float(), rtol=0.02, atol=0.02)


def _eleven_short_and_one_long(seed: int) -> tuple[torch.Generator, PagedKVCache, dict[int, list[int]], DecodeStage,
                                                   dict[int, int]]:
    """Eleven short contexts and one (request 11) that alone would set the whole stage's width."""
    gen = torch.Generator().manual_seed(seed)
    cache = _cache(gen)
    tables = {u: [2 * u, 2 * u + 1] for u in range(11)}  # 32 positions each
    tables[11] = list(range(22, 62))  # 640 positions
    lens = {**{u: 9 + u for u in range(11)}, 11: 600}
    return gen, cache, tables, DecodeStage(cache, max_slots=12), lens


def test_the_longest_contexts_go_to_the_second_stage_and_attend_as_the_pool():
    gen, cache, tables, stage, lens = _eleven_short_and_one_long(2)
    for _ in range(3):
        got, expected = _step(stage, cache, list(lens), list(lens.values()), tables, gen)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert stage.width == WIDTH_STEP  # the short ones' width, not the long one's
        assert stage.long is not None and stage.long.width == allocation(600) == 768  # 600 and a quarter
        lens = {u: n + 1 for u, n in lens.items()}
    del lens[11]  # it finished: the second stage lets go
    got, expected = _step(stage, cache, list(lens), list(lens.values()), tables, gen)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert stage.long.width == WIDTH_STEP and not stage.long._slot_of


def test_long_rows_minimise_what_both_stages_attend():
    def cost(lens: list[int], long: set[int]) -> int:
        padded = [-(-n // WIDTH_STEP) * WIDTH_STEP for n in lens]
        short = [p for i, p in enumerate(padded) if i not in long]
        second = len(long) * max(padded[i] for i in long) + SECOND_STAGE_CALLS if long else 0
        return len(short) * max(short) + second

    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        n = int(torch.randint(1, 12, (1,), generator=gen))
        lens = [int(x) for x in torch.randint(1, 4000, (n,), generator=gen)]
        chosen = set(long_rows(lens))
        assert len(chosen) <= min(MAX_LONG_ROWS, n - 1)
        # brute force over every set of the longest k (a set of rows that is not the longest k costs more)
        order = sorted(range(n), key=lambda i: -lens[i])
        best = min(cost(lens, set(order[:k])) for k in range(min(MAX_LONG_ROWS, n - 1) + 1))
        assert cost(lens, chosen) == best
    assert long_rows([300] * 19 + [3500]) == [19]
    assert long_rows([460] * 20) == []


def test_a_request_held_back_a_step_keeps_its_slot_and_attends_as_the_pool_when_back():
    """Credit batching runs loose requests every few steps; a held-back request's context stays
    in the stage (no copy from the pool when it returns), even where it alone sets the width."""
    gen = torch.Generator().manual_seed(3)
    cache = _cache(gen)
    tables = {u: list(range(u * 24, u * 24 + 24)) for u in range(3)}
    stage = DecodeStage(cache, max_slots=4, split=False)
    lens = {0: 30, 1: 300, 2: 12}
    plans: list = []  # type: ignore[type-arg]
    _step(stage, cache, list(lens), list(lens.values()), tables, gen, plans=plans)  # all three: filled once
    assert len(plans[-1].fills) == 3
    width = stage.width
    for _ in range(3):  # only 0 runs; 1 (the longest) and 2 rest
        lens[0] += 1
        got, expected = _step(stage, cache, [0], [lens[0]], tables, gen, keep=(1, 2), plans=plans)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert not plans[-1].fills and stage.width == width  # the resting 300 tokens keep the allocation
    lens = {u: n + 1 for u, n in lens.items()}  # all three run again
    got, expected = _step(stage, cache, list(lens), list(lens.values()), tables, gen, plans=plans)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert not plans[-1].fills  # nothing copied back
    lens[0] += 1
    _step(stage, cache, [0], [lens[0]], tables, gen, plans=plans)  # not kept: 1 and 2 lose their slots
    lens = {u: n + 1 for u, n in lens.items()}
    _step(stage, cache, list(lens), list(lens.values()), tables, gen, plans=plans)
    assert len(plans[-1].fills) == 2


def test_a_growing_context_reallocates_the_stage_once_per_quarter_not_every_step():
    gen = torch.Generator().manual_seed(4)
    cache = _cache(gen)
    tables = {0: list(range(0, 48)), 1: list(range(48, 96))}  # 768 positions each
    stage = DecodeStage(cache, max_slots=2, split=False)
    widths = []
    length = 300
    while length < 700:  # the long request grows by 400 tokens
        got, expected = _step(stage, cache, [0, 1], [length, 10], tables, gen)
        widths.append(stage.width)
        length += 1
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    changes = sum(a != b for a, b in zip(widths, widths[1:]))
    assert changes <= 3 and all(w >= 300 for w in widths)  # grown WIDTH_STEP at a time: 6 reallocations


def test_under_credit_batching_a_long_context_stays_on_the_second_stage_and_nothing_is_copied_again():
    """Credit batching holds different requests back in alternate steps; deciding the longest
    contexts over the held-back ones too keeps each context on one stage, filled once."""
    gen, cache, tables, stage, lens = _eleven_short_and_one_long(5)
    plans: list = []  # type: ignore[type-arg]
    everyone = tuple(lens)
    for step in range(6):
        # all; then the long one alone; then the short ones alone; ... (each held back in turn)
        running = everyone if step == 0 else ((11,) if step % 2 else tuple(range(11)))
        resting = tuple(u for u in everyone if u not in running)
        got, expected = _step(stage, cache, list(running), [lens[u] for u in running], tables, gen, keep=resting,
                              plans=plans)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert stage.width == WIDTH_STEP and stage.long is not None and 11 in stage.long._slot_of
        fills = len(plans[-1].fills) + (len(plans[-1].split[2].fills) if plans[-1].split else 0)
        assert fills == (12 if step == 0 else 0)
        for u in running:
            lens[u] += 1


def test_the_allocation_holds_the_occupied_slots_not_the_largest_batch():
    """A stage allocated for every decode a worker allows made each reallocation a long pause
    with a dozen running. Slots are held as they are occupied."""
    gen = torch.Generator().manual_seed(6)
    cache = _cache(gen)
    tables = {u: [2 * u, 2 * u + 1] for u in range(40)}  # 32 positions each
    stage = DecodeStage(cache, max_slots=256, split=False)
    lens = {u: 5 + u % 20 for u in range(40)}
    held = []
    for n in (3, 9, 17, 40, 12):  # the batch grows, then most requests finish
        got, expected = _step(stage, cache, list(range(n)), [lens[u] for u in range(n)], tables, gen)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        held.append(stage.slots_held)
        assert stage.keys[0].shape[0] == stage.slots_held >= n
        for u in range(n):
            lens[u] += 1
    assert held[:4] == [slot_allocation(n, 256) for n in (3, 9, 17, 40)] and max(held) < 64
    assert [slot_allocation(n, 256) for n in (0, 3, 8, 9, 200, 256)] == [8, 8, 16, 16, 256, 256]
