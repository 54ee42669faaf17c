"""The gateway's side of the closed loop: a served request's outcome steers the margins of the
guards that admitted it, from the values they had when they admitted it."""

from __future__ import annotations

import time

import pytest

from common.engine.sampling_params import SamplingParams
from common.slo.promise import MarginController
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.promise_loop import PromiseLoop
from gateway.registry import WorkerRecord
from gateway.request_state import Progress
from gateway.validation import ValidatedRequest
from wire.v1 import worker_pb2


def _record(role: str, worker_id: str, **kw: object) -> WorkerRecord:
    descriptor = worker_pb2.WorkerDescriptor(worker_id=worker_id, role=role)
    return WorkerRecord(descriptor, worker_pb2.WorkerLoad(), 0.0, 0.0, None, None, **kw)  # type: ignore[arg-type]


def _served(decode: WorkerRecord, prefill: WorkerRecord, ttft_ms: float, tpot_ms: float, tokens: int) -> Progress:
    p = Progress(started=time.perf_counter() - (ttft_ms + tpot_ms * (tokens - 1)) / 1000)
    p.reserved(decode, "lease")
    p.decode_epsilon = decode.view.epsilon.margin  # as the flow records it when the reservation comes back
    p.prefilling(prefill)
    p.prefill_headroom = prefill.guard.headroom.margin
    p.ttft_ms, p.completion_tokens = ttft_ms, tokens
    return p


def test_a_burst_of_tpot_misses_raises_epsilon_once_from_the_margin_that_admitted_them():
    decode = _record("decode", "d0", decode_view=DecodeView(MarginController(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headroom=MarginController(1.0)))
    request = ValidatedRequest("r", [1, 2, 3], SamplingParams(max_tokens=20), (), ttft_ms=1000, tpot_ms=20,
                               tenant="")
    flights = [_served(decode, prefill, ttft_ms=50, tpot_ms=26, tokens=20) for _ in range(8)]  # all admitted at 1.3
    loop = PromiseLoop()
    for p in flights:
        loop.first_token(request, p)
    relaxed = prefill.guard.headroom.margin
    assert relaxed < 1.0  # TTFTs met with room, heard at the first token: relaxed
    for p in flights:
        loop.served(request, p)
    assert prefill.guard.headroom.margin == relaxed  # the end of a request feeds its TPOT only
    # each missed by ~1.3 (26 ms of 20, and the clock moved a little): ε ≈ 1.3 × 1.3, not 1.3 × 1.2^8 ≈ 5.6
    assert decode.view.epsilon.margin == pytest.approx(1.3 * 1.3, rel=0.05)
    assert loop.by_class["1000:20"].value(time.perf_counter()) == 0.0


def test_a_request_decoding_late_raises_epsilon_once_while_it_still_streams():
    decode = _record("decode", "d0", decode_view=DecodeView(MarginController(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headroom=MarginController(1.0)))
    request = ValidatedRequest("r", [1, 2, 3], SamplingParams(max_tokens=64), (), ttft_ms=1000, tpot_ms=20,
                               tenant="")
    loop = PromiseLoop()
    early = _served(decode, prefill, ttft_ms=50, tpot_ms=30, tokens=8)  # 7 tokens after the first: too few
    loop.decoding(request, early)
    assert decode.view.epsilon.margin == 1.3 and not early.late_told
    late = _served(decode, prefill, ttft_ms=50, tpot_ms=30, tokens=20)  # 19 tokens at 30 ms against 20 ms
    loop.decoding(request, late)
    assert late.late_told and decode.view.epsilon.margin == pytest.approx(1.3 * 1.5)  # the largest one raise
    decode.view.epsilon.margin = 1.3
    loop.decoding(request, late)  # told once
    assert decode.view.epsilon.margin == 1.3
