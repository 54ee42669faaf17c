"""Reads a ``ScheduledBatch``, runs the forward, returns sampled tokens. Owns no request state.

A step's inputs are built on the host from the batch's plain numbers and reach the device in
one copy (``common.model.staging``); nothing waits for the device until the sampled tokens are
read back. A decode-only batch that a captured CUDA graph covers replays it
(``common.model.decode_graphs``) instead of launching the forward op by op.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from common.model.batch import ScheduledBatch, ScheduledSeq
from common.model.batch import blocks_for
from common.model.attention_metadata import AttentionMetadata, PrefillChunk
from common.model.decode_graphs import DecodeGraphs
from common.model.dense_decode_cache import DecodeStage
from common.model.kv_cache import PagedKVCache
from common.model.llama import LlamaModel
from common.model.grammar import Grammars
from common.model.logprobs import prompt_logprobs
from common.model.token_logprobs import StepLogprobs, TokenLogprobs
from common.model.sampler import Sampler
from common.model.staging import Staging, pad_rows


_NO_TABLES = torch.empty(1, 0, dtype=torch.int64)  # a decode on the dense stage reads no block table


@dataclass(frozen=True, slots=True)
class HostStep:
    """The step's inputs on the host, int64; rows packed prefill chunks first, then decodes."""

    input_ids: torch.Tensor  # [rows]
    positions: torch.Tensor  # [rows]
    tables: torch.Tensor  # [seqs, longest block table]
    slot_blocks: torch.Tensor  # [rows]
    slot_offsets: torch.Tensor  # [rows]
    logits_rows: torch.Tensor  # [sampled seqs + scored rows]: each sampled one's last row, then prompt rows scored

    @classmethod
    def build(cls, seqs: list[ScheduledSeq], block_size: int) -> HostStep:
        lengths = torch.tensor([len(s.token_ids) for s in seqs], dtype=torch.int64)
        ends = lengths.cumsum(0)
        owner = torch.repeat_interleave(torch.arange(len(seqs)), lengths)
        starts = torch.tensor([s.start_pos for s in seqs], dtype=torch.int64)
        positions = starts[owner] + torch.arange(int(ends[-1])) - (ends - lengths)[owner]
        tables = pad_rows([s.block_ids for s in seqs])
        rows = [int(end) - 1 for seq, end in zip(seqs, ends) if seq.sample]
        # then the rows scoring their prompt's next tokens (``ScheduledSeq.prompt_targets``), chunk by chunk
        rows += [int(end - length) + i for seq, end, length in zip(seqs, ends, lengths)
                 for i in range(len(seq.prompt_targets))]
        return cls(torch.tensor([t for s in seqs for t in s.token_ids], dtype=torch.int64), positions, tables,
                   tables[owner, positions // block_size], positions % block_size,
                   torch.tensor(rows, dtype=torch.int64))


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: PagedKVCache, sampler: Sampler,
                 stage: DecodeStage | None = None, graphs: DecodeGraphs | None = None,
                 grammars: Grammars | None = None) -> None:
        """``stage``: the dense decode KV copy used by the torch attention path (None: read the pool);
        ``graphs``: captured decode steps (None: every step runs eagerly); ``grammars``: the
        matchers of structured requests (None: a request asking for structured output fails)."""
        self.model = model
        self.cache = cache
        self.sampler = sampler
        self.stage = stage
        self.graphs = graphs
        self.grammars = grammars if grammars is not None else Grammars(_no_tokenizer, model.config.vocab_size, ())
        self.device = model.device
        self.triton = model.ops.name == "triton"
        self.staging = Staging(self.device)
        self._target_programs = 0
        self.logprobs = StepLogprobs()  # the last step's, of the requests asking for them
        if self.triton:
            from common.kernels.decode_attention import target_programs

            self._target_programs = target_programs(self.device)

    def execute(self, batch: ScheduledBatch) -> dict[str, int]:
        """Returns ``{request_id: token}`` for every sequence with ``sample`` set."""
        prefills = [s for s in batch.seqs if not s.is_decode]
        decodes = [s for s in batch.seqs if s.is_decode]
        sampled = [s for s in prefills + decodes if s.sample]
        scored = [s for s in prefills + decodes if s.prompt_targets]  # asking for prompt logprobs
        if not prefills and not scored and self.graphs is not None and self.graphs.covers(len(decodes)):
            logits = self._sampled_rows(self.graphs.run(decodes), decodes, sampled)
        elif not prefills and not scored and self.stage is not None:
            logits = self._sampled_rows(self._decode_on_stage(decodes, batch.resting), decodes, sampled)
        else:
            logits = self._forward(prefills, decodes, batch.resting)
        prompt: dict[str, list[TokenLogprobs]] = {}
        if scored:
            found = prompt_logprobs(logits[len(sampled):], [s.prompt_targets for s in scored],
                                    [s.params.prompt_logprobs or 0 for s in scored])
            prompt = {s.request_id: entries for s, entries in zip(scored, found)}
            logits = logits[:len(sampled)]
        tokens, logprobs = self.sampler.with_logprobs(self.grammars.masked(logits, sampled), sampled, raw=logits)
        self.grammars.accepted(sampled, tokens)
        self.logprobs = StepLogprobs({seq.request_id: lp for seq, lp in zip(sampled, logprobs) if lp is not None}, prompt)
        return {seq.request_id: token for seq, token in zip(sampled, tokens)}

    def _sampled_rows(self, logits: torch.Tensor, decodes: list[ScheduledSeq],
                      sampled: list[ScheduledSeq]) -> torch.Tensor:
        """The rows of a decode-only step's logits that sample (a one-token prompt chunk that is not
        its prompt's last does not)."""
        if len(sampled) == len(decodes):
            return logits
        return logits[torch.tensor([i for i, s in enumerate(decodes) if s.sample], device=self.device)]

    def _decode_on_stage(self, decodes: list[ScheduledSeq], resting: tuple[int, ...] = ()) -> torch.Tensor:
        """A decode-only step on the CPU's dense stage, its inputs one tensor of plain numbers: the
        stage reads no block tables, and a decode step is short enough that building
        ``HostStep``'s is a noticeable share of it."""
        bs = self.cache.block_size
        positions = [s.start_pos for s in decodes]
        fields = torch.tensor([[s.token_ids[0] for s in decodes], positions,
                               [s.block_ids[p // bs] for s, p in zip(decodes, positions)],
                               [p % bs for p in positions], [p + 1 for p in positions]], dtype=torch.int64)
        ids, pos, slot_blocks, slot_offsets, lens = fields.unbind(0)
        meta = AttentionMetadata(slot_blocks=slot_blocks, slot_offsets=slot_offsets, prefills=(), num_prefill_rows=0,
                                 decode_block_tables=_NO_TABLES.expand(len(decodes), 0), decode_context_lens=lens,
                                 stage=self._stage_plan(decodes, resting))
        return self.model.forward(ids, pos, self.cache, meta, None)

    def _forward(self, prefills: list[ScheduledSeq], decodes: list[ScheduledSeq],
                 resting: tuple[int, ...] = ()) -> torch.Tensor:
        host = HostStep.build(prefills + decodes, self.cache.block_size)
        decode_lens = torch.tensor([s.start_pos + 1 for s in decodes], dtype=torch.int64)
        max_ctx = max((s.start_pos + 1 for s in decodes), default=0)
        decode_tables = host.tables[len(prefills):, : blocks_for(max_ctx, self.cache.block_size)]
        extra = self._prefill_tiles(prefills) if self.triton and prefills else ()
        ids, positions, tables, slot_blocks, slot_offsets, rows, d_tables, d_lens, *packed = self.staging.to_device(
            host.input_ids, host.positions, host.tables, host.slot_blocks, host.slot_offsets, host.logits_rows,
            decode_tables, decode_lens, *extra)
        meta = AttentionMetadata(
            slot_blocks=slot_blocks, slot_offsets=slot_offsets, prefills=self._chunks(prefills, tables),
            num_prefill_rows=sum(len(s.token_ids) for s in prefills), decode_block_tables=d_tables,
            decode_context_lens=d_lens, stage=self._stage_plan(decodes, resting),
            packed=self._packed(packed, tables, len(prefills)), decode_splits=self._splits(len(decodes), max_ctx))
        return self.model.forward(ids, positions, self.cache, meta, rows)

    def _chunks(self, prefills: list[ScheduledSeq], tables: torch.Tensor) -> tuple[PrefillChunk, ...]:
        if self.triton:
            return ()
        chunks, row = [], 0
        for i, seq in enumerate(prefills):
            n_blocks = blocks_for(seq.start_pos + len(seq.token_ids), self.cache.block_size)
            chunks.append(PrefillChunk(row, len(seq.token_ids), seq.start_pos, tables[i, :n_blocks]))
            row += len(seq.token_ids)
        return tuple(chunks)

    @staticmethod
    def _prefill_tiles(prefills: list[ScheduledSeq]) -> tuple[torch.Tensor, torch.Tensor]:
        from common.kernels.prefill_attention import prefill_tiles

        lens = [len(s.token_ids) for s in prefills]
        row_starts = [0, *itertools.accumulate(lens)][:-1]
        chunks = torch.tensor([(r, n, s.start_pos) for r, n, s in zip(row_starts, lens, prefills)], dtype=torch.int64)
        return prefill_tiles(lens), chunks

    @staticmethod
    def _packed(packed: list[torch.Tensor], tables: torch.Tensor, num_prefills: int):  # type: ignore[no-untyped-def]
        if not packed:
            return None
        from common.kernels.prefill_attention import PackedPrefill

        return PackedPrefill(packed[0], packed[1], tables[:num_prefills])

    def _splits(self, batch: int, max_ctx: int) -> int:
        if not self.triton or not batch:
            return 1
        from common.kernels.decode_attention import num_splits

        return num_splits(batch, self.model.config.num_kv_heads, self._target_programs, max_ctx)

    def _stage_plan(self, decodes: list[ScheduledSeq], resting: tuple[int, ...] = ()):  # type: ignore[no-untyped-def]
        if self.stage is None or not decodes:
            return None
        return self.stage, self.stage.plan([s.uid for s in decodes], [s.start_pos + 1 for s in decodes],
                                           [s.block_ids for s in decodes], keep=resting)


def _no_tokenizer() -> None:
    raise ValueError("structured output needs the model's tokenizer, and this runner was given none")
