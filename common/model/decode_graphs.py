"""Decode steps captured as CUDA graphs, one per batch-size bucket, replayed over static buffers.

A decode step launches hundreds of small kernels; on a GPU the launches, not the arithmetic,
set its time. Capturing the whole decode forward (every layer, the cache write, the attention,
the logits) once per bucket and replaying it costs one launch per step. A graph reads fixed
addresses, so its inputs live in static buffers that each step fills and pads to the bucket::

    ids | positions | slot blocks | slot offsets | context lens | block tables [bucket, max blocks]
    └── rows 0..n-1: the batch; rows n..bucket-1: padding (slot block −1: no cache write;
        context 0: attention writes zeros) ──────────────────────────────────────────────┘

The buffers sit in one tensor, mirrored in pinned host memory, so a step's inputs reach the
device in one copy. Attention splits every context into a number of parts fixed per bucket at
capture (``num_splits`` of the bucket: enough programs to fill the GPU whatever the contexts).

``capture=False`` runs the same padded body eagerly on the same buffers: what the CPU does in
tests (the Triton kernels under the interpreter), where there is nothing to capture.
"""

from __future__ import annotations

import torch

from common.model.batch import ScheduledSeq
from common.model.batch import blocks_for
from common.model.attention_metadata import AttentionMetadata
from common.model.kv_cache import PagedKVCache
from common.model.llama import LlamaModel
from common.model.staging import pad_rows

FIELDS = 5  # ids, positions, slot blocks, slot offsets, context lens


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to 64, then every 16; always ending at ``max_batch``."""
    sizes = [b for b in (1, 2, 4) if b < max_batch] + list(range(8, min(max_batch, 64) + 1, 8))
    sizes += list(range(80, max_batch + 1, 16))
    return sorted({*sizes, max_batch})


def bucket_for(n: int, buckets: list[int]) -> int | None:
    """The smallest bucket holding ``n`` rows; None when ``n`` is past the largest."""
    return next((b for b in buckets if b >= n), None)


class StaticDecodeInputs:
    def __init__(self, max_batch: int, max_blocks: int, device: torch.device) -> None:
        self.max_batch, self.max_blocks = max_batch, max_blocks
        size = max_batch * (FIELDS + max_blocks)
        self.host = torch.zeros(size, dtype=torch.int64, pin_memory=device.type == "cuda")
        self.device_buffer = torch.zeros(size, dtype=torch.int64, device=device)
        self.fields_host = self.host[: FIELDS * max_batch].view(FIELDS, max_batch)
        self.tables_host = self.host[FIELDS * max_batch:].view(max_batch, max_blocks)
        fields = self.device_buffer[: FIELDS * max_batch].view(FIELDS, max_batch)
        self.ids, self.positions, self.slot_blocks, self.slot_offsets, self.context_lens = fields.unbind(0)
        self.tables = self.device_buffer[FIELDS * max_batch:].view(max_batch, max_blocks)
        self.logits_rows = torch.arange(max_batch, dtype=torch.int64, device=device)

    def fill(self, seqs: list[ScheduledSeq], bucket: int, block_size: int) -> None:
        """Writes the batch into rows ``0..len(seqs)-1``, padding up to ``bucket``, and copies the
        rows a ``bucket``-sized step reads to the device (without waiting for it)."""
        n = len(seqs)
        positions = [s.start_pos for s in seqs]
        rows = [[s.token_ids[0] for s in seqs], positions,
                [s.block_ids[p // block_size] for s, p in zip(seqs, positions)],
                [p % block_size for p in positions], [p + 1 for p in positions]]
        self.fields_host[:, :n] = torch.tensor(rows, dtype=torch.int64)
        self.fields_host[:, n:bucket] = torch.tensor([0, 0, -1, 0, 0], dtype=torch.int64)[:, None]
        width = max(blocks_for(p + 1, block_size) for p in positions)
        self.tables_host[:n, :width] = pad_rows([s.block_ids[:width] for s in seqs], width)
        used = FIELDS * self.max_batch + bucket * self.max_blocks
        self.device_buffer[:used].copy_(self.host[:used], non_blocking=True)

    def fill_padding(self, bucket: int) -> None:
        """Every row padding: what warm-up and capture run on (no cache write, no context)."""
        self.fields_host[:, :bucket] = torch.tensor([0, 0, -1, 0, 0], dtype=torch.int64)[:, None]
        used = FIELDS * self.max_batch + bucket * self.max_blocks
        self.device_buffer[:used].copy_(self.host[:used], non_blocking=True)

    def metadata(self, bucket: int, splits: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_blocks=self.slot_blocks[:bucket], slot_offsets=self.slot_offsets[:bucket], prefills=(),
            num_prefill_rows=0, decode_block_tables=self.tables[:bucket], decode_context_lens=self.context_lens[:bucket],
            decode_splits=splits)


class DecodeGraphs:
    def __init__(self, model: LlamaModel, cache: PagedKVCache, max_batch: int, max_model_len: int,
                 capture: bool) -> None:
        from common.kernels.decode_attention import num_splits, target_programs

        self.model, self.cache = model, cache
        self.buckets = batch_buckets(max_batch)
        target = target_programs(model.device)
        self.splits = {b: num_splits(b, model.config.num_kv_heads, target) for b in self.buckets}
        self.inputs = StaticDecodeInputs(max_batch, blocks_for(max_model_len, cache.block_size), model.device)
        self.capture = capture
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, torch.Tensor] = {}

    def covers(self, n: int) -> bool:
        return 0 < n <= self.buckets[-1]

    def run(self, seqs: list[ScheduledSeq]) -> torch.Tensor:
        """Float32 logits ``[len(seqs), vocab]`` of one decode step over ``seqs``."""
        bucket = bucket_for(len(seqs), self.buckets)
        assert bucket is not None, "covers() is checked first"
        self.inputs.fill(seqs, bucket, self.cache.block_size)
        if bucket in self._graphs:
            self._graphs[bucket].replay()
            return self._logits[bucket][: len(seqs)]
        return self._body(bucket)[: len(seqs)]

    def _body(self, bucket: int) -> torch.Tensor:
        inputs = self.inputs
        return self.model.forward(inputs.ids[:bucket], inputs.positions[:bucket], self.cache,
                                  inputs.metadata(bucket, self.splits[bucket]), inputs.logits_rows[:bucket])

    def capture_all(self) -> None:
        """Captures every bucket, largest first, all in one memory pool (each smaller graph reuses
        the larger ones' memory). Each bucket runs once eagerly first, so kernels are compiled and
        libraries initialised outside the capture. Padding rows only: the cache is never written."""
        if not self.capture:
            return
        pool = None
        for bucket in reversed(self.buckets):
            self.inputs.fill_padding(bucket)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._body(bucket)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._logits[bucket] = self._body(bucket)
            pool = graph.pool()
            self._graphs[bucket] = graph
        torch.cuda.synchronize()


CAPTURE_MEMORY_MARGIN = 1.25  # graph pools hold more than one eager step's peak (per-graph fragments)


def capture_memory_bytes(model: LlamaModel, block_size: int, max_batch: int, max_model_len: int) -> int:
    """Device bytes the captured graphs will hold, measured before the KV pool is sized: the peak
    of one eager step at the largest bucket (activations, attention partials, logits, the static
    inputs) on a one-block scratch cache, with a margin."""
    device = model.device
    scratch = PagedKVCache(model.config, 1, block_size, model.dtype, device)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    graphs = DecodeGraphs(model, scratch, max_batch, max_model_len, capture=False)
    graphs.inputs.fill_padding(graphs.buckets[-1])
    graphs._body(graphs.buckets[-1])
    torch.cuda.synchronize(device)
    return int((torch.cuda.max_memory_allocated(device) - before) * CAPTURE_MEMORY_MARGIN)
