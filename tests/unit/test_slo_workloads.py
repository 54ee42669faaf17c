"""bench/slo.py's workloads ask for what the model they run on can serve."""

from __future__ import annotations

from bench.slo import TRACE_LENGTH_SCALE, WORKLOADS
from client.bench.workload import BUILTIN_TRACE, read_trace
from common.model.presets import PRESETS


def test_every_request_of_the_scaled_trace_fits_the_tiny_models_context() -> None:
    assert "--length-scale" in WORKLOADS["trace"].requests
    rows = read_trace(BUILTIN_TRACE, 10**9, 1.0, TRACE_LENGTH_SCALE)
    assert len(rows) > 19_000  # the whole trace was read
    longest = max(prompt + output for _, prompt, output in rows)
    assert longest <= PRESETS["tiny"].max_position_embeddings
    assert max(read_trace(BUILTIN_TRACE, 10**9, 1.0, 1.0), key=lambda r: r[1])[1] > longest  # scaling did the fitting
