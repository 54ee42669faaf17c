"""The CUDA-graph decode path's bookkeeping and its padded body, on the CPU.

There is nothing to capture on the CPU, so ``DecodeGraphs(capture=False)`` runs the very body a
graph would replay (static buffers, bucket padding, the Triton kernels under the interpreter)
eagerly; its tokens must equal the engine's ordinary path."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

pytest.importorskip("triton")

from common.model.batch import ScheduledSeq  # noqa: E402
from common.model.sampling_params import SamplingParams  # noqa: E402
from common.model.decode_graphs import DecodeGraphs, StaticDecodeInputs, batch_buckets, bucket_for  # noqa: E402
from tests.checkpoints import random_prompts  # noqa: E402
from tests.engine_helpers import checked_engine, run_staggered  # noqa: E402


def test_buckets_double_to_eight_then_step_by_eight_then_sixteen_and_end_at_the_batch_limit():
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert batch_buckets(128) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128]
    assert batch_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert batch_buckets(1) == [1]


def test_a_batch_takes_the_smallest_bucket_that_holds_it():
    buckets = batch_buckets(64)
    assert [bucket_for(n, buckets) for n in (1, 3, 8, 9, 33, 64)] == [1, 4, 8, 16, 40, 64]
    assert bucket_for(65, buckets) is None


def _seq(start: int, blocks: list[int], token: int) -> ScheduledSeq:
    return ScheduledSeq("r", [token], start, blocks, True, SamplingParams(), 1)


def test_static_inputs_hold_the_batch_then_padding_rows_that_write_nowhere_and_attend_to_nothing():
    inputs = StaticDecodeInputs(max_batch=8, max_blocks=6, device=torch.device("cpu"))
    inputs.fill([_seq(4, [7, 8], 11), _seq(5, [3], 12), _seq(37, [1, 2, 9, 4, 5], 13)], bucket=8, block_size=8)
    inputs.fill([_seq(17, [2, 6, 5], 21), _seq(0, [4], 22)], bucket=4, block_size=8)
    assert inputs.ids[:4].tolist() == [21, 22, 0, 0]
    assert inputs.positions[:4].tolist() == [17, 0, 0, 0]
    assert inputs.slot_blocks[:4].tolist() == [5, 4, -1, -1]
    assert inputs.slot_offsets[:4].tolist() == [1, 0, 0, 0]
    assert inputs.context_lens[:4].tolist() == [18, 1, 0, 0]
    assert inputs.tables[0, :3].tolist() == [2, 6, 5] and inputs.tables[1, 0] == 4
    meta = inputs.metadata(4, splits=3)
    assert meta.num_decodes == 4 and meta.decode_splits == 3 and meta.decode_block_tables.shape == (4, 6)


def test_the_padded_graph_body_gives_the_engines_tokens_for_batches_joining_and_leaving():
    prompts = random_prompts([3, 17, 9, 30, 5], seed=8)
    max_tokens, joins = [6, 4, 7, 3, 5], [0, 0, 1, 2, 4]
    config = dict(num_kv_blocks=64, max_model_len=128, max_batch_size=8)
    with checked_engine(attention_backend="torch", **config) as reference:
        expected = run_staggered(reference, prompts, max_tokens, joins)
    with checked_engine(attention_backend="triton", **config) as engine:
        graphs = DecodeGraphs(engine.model, engine.cache, 8, engine.max_model_len, capture=False)
        batch_sizes: list[int] = []
        run = graphs.run
        graphs.run = lambda seqs: batch_sizes.append(len(seqs)) or run(seqs)  # type: ignore[method-assign]
        engine.runner.graphs = graphs
        got = run_staggered(engine, prompts, max_tokens, joins)
    assert got == expected
    assert len(batch_sizes) >= 5 and len(set(batch_sizes)) >= 2, f"decode-only steps seen: {batch_sizes}"
