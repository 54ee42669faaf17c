"""A persistent, contiguous copy of the decoding requests' KV for the CPU attention path.

Gathering every request's blocks out of the paged pool on every step copies the whole
batch's context each time; on a CPU that copy, not the arithmetic, is the cost of decode.
The stage keeps each decoding request's K/V in a slot of a dense buffer::

    keys[layer][slot, kv_head, position, head_dim]   (values alike)

A request's slot is filled from the pool once (when it starts decoding, or after it was preempted,
or when the batch moved on without it) and from then on receives only its new token per step,
written beside the pool write. A request credit batching holds back for a step (``keep``) keeps its
slot: it decodes again a step or two later, and copying its whole context back then would make
credit-batched steps far longer than steps of every request (docs/decisions.md, 'Dense decode stage:
slots kept across held-back steps'). The pool stays the source of truth (KV transfer and preemption
read it); the stage is a cache the runner may drop at any time.

Attention reads every position the stage holds, ``[: rows, :, : width]`` with ``width`` the
whole allocation, masked past each slot's context: a batch of whole matrices, which the matmul
takes as they are. A narrower slice would make it copy every key and value first (in bfloat16,
a large share of decode attention's time). So the allocation follows the longest context: it grows
to ``GROWTH`` past it (in steps of ``WIDTH_STEP`` positions) and shrinks when it holds
``SHRINK_SLACK`` more than that. A reallocation allocates and copies the stage, a pause of every
decoding request: grown one step at a time, a long prompt's growing context would reallocate it
every ``WIDTH_STEP`` tokens, and under long-tailed load those pauses add up to a sizeable share
of a decode worker's time. Rows likewise, where the allocation is zeroed (the matmuls' stage): it
holds ``GROWTH`` more slots than are occupied (in steps of ``ROW_STEP``, at most ``max_slots``),
not the batch size the worker allows (64 by default): allocated for all of those whatever runs,
the reallocations left under long-tailed load still pause decoding for long (docs/decisions.md,
'Dense decode stage: growth').

Attended whole, one long context makes every row of the step cost its length: one long request
among many short ones makes a step cost several times a batch of the same total context spread
evenly (docs/decisions.md, 'Dense decode stage: a second stage for the longest contexts'). So the
few longest contexts may go to a second, narrow stage of their own (``long_rows`` decides when
that costs less than widening every row to them), attended whole beside the first; the cost
model's step at the batch's mean length then holds for long-tailed batches too.
With ``kernel`` set (the ``cpu`` attention backend) the stage's attention is the C++ kernel
(``common.cpu_kernels.decode_attention``): it reads only each row's own positions, so a long
context costs only itself and the second stage is not kept. Nor does it need the allocation
zeroed (no position past a row's context enters its softmax or its sum), so the kernel's stage
is allocated uninitialised with a row for every slot the worker allows: memory never written
costs neither time nor pages, and a growing batch never reallocates. What a reallocation costs
is mostly the fresh pages it touches (the OS zeroes a page at its first touch): a stage grown
as the batch grows pauses every decoding request, under load for as long as a tight TPOT SLO's
whole budget for many tokens (docs/decisions.md, 'Dense decode stage: the kernel's stage allocated
whole'). Only a wider context reallocates it, copying the occupied rows.
The Triton path on GPUs reads the pool directly and has no stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

import torch

from common.cpu_kernels.decode_attention import dense_decode_attention
from common.model.kv_cache import PagedKVCache


WIDTH_STEP = 64  # the allocation is a multiple of this many positions
ROW_STEP = 8  # and of this many slots
GROWTH = 0.25  # an allocation holds this share more positions than the longest context needs
SHRINK_SLACK = 128  # unused positions past that share that make the allocation shrink
MAX_LONG_ROWS = 4  # rows of the second stage, for the longest contexts
# the second stage's own calls, in positions of the first's; chosen by measurement: docs/decisions.md,
# 'Dense decode stage: a second stage for the longest contexts'
SECOND_STAGE_CALLS = 4096


@dataclass(frozen=True, slots=True)
class StagePlan:
    slots: torch.Tensor  # [decodes] slot of each decode row
    positions: torch.Tensor  # [decodes] position of each row's new token
    fills: tuple[tuple[int, torch.Tensor, int], ...]  # (slot, block table, tokens to copy from the pool)
    rows: int  # slots 0..rows-1 take part in the attention batch
    width: int  # positions 0..width-1 are attended (masked per row): the whole allocation
    identity: bool  # decode row i sits in slot i: no scatter/gather needed
    hidden: torch.Tensor  # [rows, width] True past each slot's context (full attention)
    # with the longest contexts on the second stage: the decode rows on each, and that stage's plan
    split: tuple[torch.Tensor, torch.Tensor, StagePlan] | None = None


class DecodeStage:
    def __init__(self, cache: PagedKVCache, max_slots: int, initial_width: int = 256, split: bool = True,
                 kernel: bool = False) -> None:
        """``kernel``: attend with the C++ kernel (which needs no second stage) instead of torch's matmuls."""
        self.cache = cache
        self.kernel = kernel
        # the second stage, for the few longest contexts (``long_rows``); it has none of its own
        split = split and not kernel and max_slots > 1
        self.long = DecodeStage(cache, MAX_LONG_ROWS, WIDTH_STEP, split=False) if split else None
        self.max_slots = max_slots
        self.width = 0
        self.slots_held = 0  # slots the allocation holds: at least every occupied one
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        # Keyed by Request.uid, never by request id: a reused id must not find the old KV.
        self._slot_of: dict[int, int] = {}
        self._length: dict[int, int] = {}  # tokens of each request present in its slot
        self._fit(initial_width)

    def plan(self, request_ids: list[int], context_lens: list[int], block_tables: list[list[int]],
             keep: Collection[int] = ()) -> StagePlan:
        """Assigns slots for this step's decodes, the few longest perhaps excepted (``long_rows``);
        requests absent from the stage this step lose their slots, but those in ``keep`` (held back
        this step). Which contexts are the longest is decided over the held-back requests too, so
        that credit batching, which holds different requests back in alternate steps, does not
        move a long context from one stage to the other and back (copying it each time)."""
        if self.long is None:
            return self._plan(request_ids, context_lens, block_tables, keep)
        scheduled = set(request_ids)
        resting = {r: n for r in keep if r not in scheduled
                   and (n := self._length.get(r, self.long._length.get(r))) is not None}
        ids, lens = request_ids + list(resting), context_lens + list(resting.values())
        on_long = {ids[i] for i in long_rows(lens)}
        if not on_long:
            self.long.release()
            return self._plan(request_ids, context_lens, block_tables, keep)
        long = [i for i, r in enumerate(request_ids) if r in on_long]
        short = [i for i, r in enumerate(request_ids) if r not in on_long]
        plan = self._plan([request_ids[i] for i in short], [context_lens[i] for i in short],
                          [block_tables[i] for i in short], [r for r in resting if r not in on_long])
        if not long:  # the long contexts all rest this step: the second stage keeps them untouched
            return plan
        long_plan = self.long._plan([request_ids[i] for i in long], [context_lens[i] for i in long],
                                    [block_tables[i] for i in long], [r for r in resting if r in on_long])
        return dataclasses.replace(plan, split=(torch.tensor(short, dtype=torch.int64),
                                                torch.tensor(long, dtype=torch.int64), long_plan))

    def release(self) -> None:
        """Drops every slot, and the allocation down to its least."""
        self._slot_of.clear()
        self._length.clear()
        if self.width > WIDTH_STEP:
            self.keys, self.values, self.width, self.slots_held = [], [], 0, 0
            self._fit(1)

    def _plan(self, request_ids: list[int], context_lens: list[int], block_tables: list[list[int]],
              keep: Collection[int] = ()) -> StagePlan:
        scheduled = set(request_ids)
        if len(self._slot_of) != len(request_ids) or not all(r in self._slot_of for r in request_ids):
            present = scheduled.union(keep)
            for gone in [r for r in self._slot_of if r not in present]:
                del self._slot_of[gone], self._length[gone]
        kept = [self._length[r] for r in keep if r in self._length and r not in scheduled]
        if not request_ids:  # every request here rests this step (the others run on the second stage)
            self._fit(max(kept, default=1))
            return StagePlan(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), (), 0,
                             self.width, True, torch.zeros(0, self.width, dtype=torch.bool))
        fills, free = [], None
        for rid, ctx, table in zip(request_ids, context_lens, block_tables):
            if rid not in self._slot_of:
                if free is None:
                    free = sorted(set(range(self.max_slots)) - set(self._slot_of.values()), reverse=True)
                self._slot_of[rid] = free.pop()
            if self._length.get(rid) != ctx - 1:  # new, or out of step with the pool: refill
                fills.append((self._slot_of[rid], torch.tensor(table), ctx - 1))
            self._length[rid] = ctx
        self._fit(max(context_lens + kept))  # a kept context must survive a reallocation
        slots = [self._slot_of[r] for r in request_ids]
        rows, width = max(slots) + 1, self.width
        lens = [0] * rows
        for slot, ctx in zip(slots, context_lens):
            lens[slot] = ctx
        numbers = torch.tensor([slots, [c - 1 for c in context_lens]], dtype=torch.int64)
        hidden = self._positions[None, :] >= torch.tensor(lens, dtype=torch.int64)[:, None]  # arange(self.width)
        return StagePlan(numbers[0], numbers[1], tuple(fills), rows, width, slots == list(range(rows)), hidden)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, plan: StagePlan,
               scale: float, window: int | None) -> torch.Tensor:
        """Decode attention for ``q [decodes, heads, d]`` whose new ``k``/``v`` are ``[decodes, kv_heads, d]``
        (already written to the pool)."""
        if plan.split is None:
            return self._attend_staged(q, k, v, layer, plan, scale, window)
        assert self.long is not None
        short, long, long_plan = plan.split
        out = torch.empty_like(q)
        out[short] = self._attend_staged(q[short], k[short], v[short], layer, plan, scale, window)
        out[long] = self.long._attend_staged(q[long], k[long], v[long], layer, long_plan, scale, window)
        return out

    def _attend_staged(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, plan: StagePlan,
                       scale: float, window: int | None) -> torch.Tensor:
        keys, values = self.keys[layer], self.values[layer]
        for slot, table, length in plan.fills:
            if length:
                keys[slot, :, :length] = self.cache.gather(layer, 0, table[None])[0, :, :length]
                values[slot, :, :length] = self.cache.gather(layer, 1, table[None])[0, :, :length]
        keys[plan.slots, :, plan.positions] = k
        values[plan.slots, :, plan.positions] = v
        if self.kernel:
            return dense_decode_attention(q, keys, values, plan.slots, plan.positions + 1, scale, window)
        batch, heads, d = q.shape
        kv_heads = keys.shape[1]
        grouped = q.view(batch, kv_heads, heads // kv_heads, d) * scale  # scale the small side
        if not plan.identity:
            scattered = grouped.new_zeros(plan.rows, *grouped.shape[1:])
            scattered[plan.slots] = grouped
            grouped = scattered
        k_rows, v_rows = keys[: plan.rows, :, : plan.width], values[: plan.rows, :, : plan.width]
        scores = torch.matmul(grouped, k_rows.transpose(2, 3))  # [rows, kvh, g, width]
        scores.masked_fill_(self._mask(plan, window)[:, None, None, :], float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v_rows)
        return (out if plan.identity else out[plan.slots]).reshape(batch, heads, d)

    @staticmethod
    def _mask(plan: StagePlan, window: int | None) -> torch.Tensor:
        if window is None:
            return plan.hidden
        lens = (~plan.hidden).sum(dim=1, keepdim=True)
        return plan.hidden | ((lens - 1) - torch.arange(plan.width)[None, :] >= window)

    def _fit(self, needed: int) -> None:
        """Reallocates when ``needed`` positions or the occupied slots do not fit, or the positions
        leave ``SHRINK_SLACK`` more unused than ``allocation`` would; every occupied slot's context
        (at most ``needed``) is kept."""
        rows = max(self._slot_of.values(), default=-1) + 1  # slots past the last occupied hold nothing
        if needed <= self.width <= allocation(needed) + SHRINK_SLACK and rows <= self.slots_held:
            return
        width = allocation(needed)
        slots = self.max_slots if self.kernel else slot_allocation(rows, self.max_slots)
        data, kept, copied = self.cache.data, min(width, self.width), min(rows, self.slots_held)
        shape = (slots, self.cache.num_kv_heads, width, data.shape[-1])
        # The matmuls need zeros: a masked position's value still enters them with weight 0. The
        # kernel reads no position past a row's context, so its memory is touched only as written.
        new = data.new_empty if self.kernel else data.new_zeros
        keys = [new(shape) for _ in range(self.cache.num_layers)]
        values = [new(shape) for _ in range(self.cache.num_layers)]
        for old, new in zip(self.keys + self.values, keys + values):
            new[:copied, :, :kept] = old[:copied, :, :kept]
        self.keys, self.values, self.width, self.slots_held = keys, values, width, slots
        self._positions = torch.arange(width)


def long_rows(context_lens: list[int]) -> list[int]:
    """The rows (at most ``MAX_LONG_ROWS``, never all) for the second stage: the count of the
    longest contexts that minimises what both stages attend, rows × width each."""
    n = len(context_lens)
    order = sorted(range(n), key=lambda i: -context_lens[i])
    widths = [padded(context_lens[i]) for i in order]
    costs = [(n - k) * widths[k] + (k * widths[0] + SECOND_STAGE_CALLS if k else 0)
             for k in range(min(MAX_LONG_ROWS, n - 1) + 1)]
    return sorted(order[:costs.index(min(costs))])


def allocation(needed: int) -> int:
    """The positions an allocation for a longest context of ``needed`` holds."""
    return padded(max(needed, 1) + int(needed * GROWTH))


def slot_allocation(occupied: int, max_slots: int) -> int:
    """The slots an allocation for ``occupied`` slots holds (at least one step, at most ``max_slots``)."""
    grown = max(occupied, 1) + int(occupied * GROWTH)
    return min(max_slots, -(-grown // ROW_STEP) * ROW_STEP)


def padded(positions: int) -> int:
    """``positions`` rounded up to the stage's allocation step."""
    return -(-positions // WIDTH_STEP) * WIDTH_STEP
