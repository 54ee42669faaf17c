"""Reads a ``ScheduledBatch``, runs the forward, returns sampled tokens. Owns no request state."""

from __future__ import annotations

import torch

from common.model.attention_metadata import AttentionMetadata, PrefillChunk
from common.engine.batch import ScheduledBatch, ScheduledSeq
from common.engine.block_pool import blocks_for
from common.model.dense_decode_cache import DecodeStage
from common.model.kv_cache import PagedKVCache
from common.model.llama import LlamaModel
from common.model.sampler import Sampler


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: PagedKVCache, sampler: Sampler,
                 stage: DecodeStage | None = None) -> None:
        """``stage``: the dense decode KV copy used by the torch attention path (None: read the pool)."""
        self.model = model
        self.cache = cache
        self.sampler = sampler
        self.stage = stage
        self.device = model.device

    def execute(self, batch: ScheduledBatch) -> dict[str, int]:
        """Returns ``{request_id: token}`` for every sequence with ``sample`` set."""
        prefills = [s for s in batch.seqs if not s.is_decode]
        decodes = [s for s in batch.seqs if s.is_decode]
        ordered = prefills + decodes
        input_ids, positions = self._tokens_and_positions(ordered)
        meta = self._metadata(prefills, decodes, positions)
        rows, sampled_seqs = self._logits_rows(ordered)
        logits = self.model.forward(input_ids, positions, self.cache, meta, rows)
        tokens = self.sampler(logits, sampled_seqs)
        return {seq.request_id: token for seq, token in zip(sampled_seqs, tokens)}

    def _tokens_and_positions(self, seqs: list[ScheduledSeq]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [t for s in seqs for t in s.token_ids]
        positions = [p for s in seqs for p in range(s.start_pos, s.start_pos + len(s.token_ids))]
        return (torch.tensor(ids, dtype=torch.int64, device=self.device),
                torch.tensor(positions, dtype=torch.int64, device=self.device))

    def _metadata(self, prefills: list[ScheduledSeq], decodes: list[ScheduledSeq],
                  positions: torch.Tensor) -> AttentionMetadata:
        bs = self.cache.block_size
        tables = [s.block_ids for s in prefills + decodes]
        lengths = [len(s.token_ids) for s in prefills + decodes]
        owner = torch.repeat_interleave(torch.arange(len(tables)), torch.tensor(lengths))
        padded = _pad_tables(tables)
        slot_blocks = padded[owner, positions.cpu() // bs].to(self.device)
        chunks, row = [], 0
        for seq, table in zip(prefills, padded):
            n_blocks = blocks_for(seq.start_pos + len(seq.token_ids), bs)
            chunks.append(PrefillChunk(row, len(seq.token_ids), seq.start_pos, table[:n_blocks].to(self.device)))
            row += len(seq.token_ids)
        decode_lens = [s.start_pos + 1 for s in decodes]
        max_ctx = max(decode_lens, default=0)
        stage = None
        if self.stage is not None and decodes:
            stage = (self.stage, self.stage.plan([s.uid for s in decodes], decode_lens,
                                                 [s.block_ids for s in decodes]))
        return AttentionMetadata(
            slot_blocks=slot_blocks,
            slot_offsets=positions % bs,
            prefills=tuple(chunks),
            num_prefill_rows=row,
            decode_block_tables=padded[len(prefills):, : blocks_for(max_ctx, bs)].to(self.device),
            decode_context_lens=torch.tensor(decode_lens, dtype=torch.int64, device=self.device),
            stage=stage,
        )

    def _logits_rows(self, seqs: list[ScheduledSeq]) -> tuple[torch.Tensor, list[ScheduledSeq]]:
        rows, sampled, end = [], [], 0
        for seq in seqs:
            end += len(seq.token_ids)
            if seq.sample:
                rows.append(end - 1)
                sampled.append(seq)
        return torch.tensor(rows, dtype=torch.int64, device=self.device), sampled


def _pad_tables(tables: list[list[int]]) -> torch.Tensor:
    width = max((len(t) for t in tables), default=0)
    return torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int64).reshape(len(tables), width)
