"""bench/slo.py's workloads ask for what the model they run on can serve."""

from __future__ import annotations

from bench.slo import TRACE_LENGTH_SCALE, WORKLOADS, trace_means
from client.bench.workload import BUILTIN_TRACE, read_trace
from common.model.presets import PRESETS


def test_every_request_of_the_scaled_trace_fits_the_tiny_models_context() -> None:
    assert "--length-scale" in WORKLOADS["trace"].requests
    rows = read_trace(BUILTIN_TRACE, 10**9, 1.0, TRACE_LENGTH_SCALE)
    assert len(rows) > 19_000  # the whole trace was read
    longest = max(prompt + output for _, prompt, output in rows)
    assert longest <= PRESETS["tiny"].max_position_embeddings
    assert max(read_trace(BUILTIN_TRACE, 10**9, 1.0, 1.0), key=lambda r: r[1])[1] > longest  # scaling did the fitting


def test_the_traces_mean_request_is_its_rows_scaled() -> None:
    import csv

    with BUILTIN_TRACE.open() as f:
        rows = [row for _, row in zip(range(300), csv.DictReader(f))]
    prompts = [max(1, round(int(r["num_prefill_tokens"]) / TRACE_LENGTH_SCALE)) for r in rows]
    outputs = [max(1, round(int(r["num_decode_tokens"]) / TRACE_LENGTH_SCALE)) for r in rows]
    assert trace_means(300) == (round(sum(prompts) / 300), round(sum(outputs) / 300))
