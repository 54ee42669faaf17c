"""What the attention of one forward needs to know about the packed batch.

Tokens are packed with every prefill chunk first, then one token per decoding request::

    rows: [ chunk A (q_len_A) | chunk B (q_len_B) | dec 0 | dec 1 | ... | dec n-1 ]

The torch path reads ``prefills`` (one SDPA call per chunk) and, on the CPU, the dense decode
``stage``; the Triton path reads ``packed`` (every chunk in one launch) and splits each decode
context ``decode_splits`` ways. Everything here is a device tensor or a host number known
before the step: building it never waits for the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from common.kernels.prefill_attention import PackedPrefill
    from common.model.dense_decode_cache import DecodeStage, StagePlan


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    row_start: int  # first row of this chunk in the packed batch
    query_len: int
    context_start: int  # position of the chunk's first token; tokens before it are cached
    block_ids: torch.Tensor  # [blocks covering context_start + query_len], int64

    @property
    def context_len(self) -> int:
        return self.context_start + self.query_len


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    slot_blocks: torch.Tensor  # [rows] block id each row's K/V is written to (negative: padding, no write)
    slot_offsets: torch.Tensor  # [rows] offset inside that block
    prefills: tuple[PrefillChunk, ...]
    num_prefill_rows: int
    decode_block_tables: torch.Tensor  # [decodes, max_blocks] int64, padded with 0
    decode_context_lens: torch.Tensor  # [decodes] int64, including the token being decoded (0: padding)
    stage: tuple[DecodeStage, StagePlan] | None = None  # CPU path: decode over the dense stage
    packed: PackedPrefill | None = None  # Triton path: the prefill chunks for one launch
    decode_splits: int = 1  # Triton path: programs per decode context (flash-decoding)

    @property
    def num_decodes(self) -> int:
        return int(self.decode_context_lens.shape[0])
