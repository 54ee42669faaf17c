"""The gateway's side of the closed loop: a served request's outcome steers the margins of the
guards that admitted it, from the values they had when they admitted it."""

from __future__ import annotations

import math

import time

import pytest

from common.slo.load_report import LoadReport
from common.model.sampling_params import SamplingParams
from common.slo.class_margins import ClassMargins
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.promise_loop import PromiseLoop
from gateway.registry import WorkerRecord
from gateway.request_state import Progress
from gateway.validation import ValidatedRequest
from wire.v1 import worker_pb2


def _record(role: str, worker_id: str, **kw: object) -> WorkerRecord:
    descriptor = worker_pb2.WorkerDescriptor(worker_id=worker_id, role=role)
    return WorkerRecord(descriptor=descriptor, load=LoadReport(), last_seen=0.0, heard_at=0.0, channel=None, stub=None, **kw)  # type: ignore[arg-type]


def _request(ttft_ms: int = 1000, tpot_ms: int = 20, max_tokens: int = 20) -> ValidatedRequest:
    return ValidatedRequest("r", [1, 2, 3], SamplingParams(max_tokens=max_tokens), (), ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                            tenant="")


def _served(decode: WorkerRecord, prefill: WorkerRecord, ttft_ms: float, tpot_ms: float, tokens: int,
            request: ValidatedRequest | None = None) -> Progress:
    """What the flow records of a request served in ``ttft_ms`` and ``tpot_ms``; the margins it was
    admitted under are its classes' (``request``'s SLOs; default ``_request()``'s)."""
    request = request or _request()
    p = Progress(started=time.perf_counter() - (ttft_ms + tpot_ms * (tokens - 1)) / 1000)
    p.reserved(decode, "lease")
    p.promise.arrived = p.started  # (no delivery allowance)
    p.promise.tpot_epsilon = decode.view.epsilons.margin(request.tpot_ms / 1000)  # as the flow records it
    p.prefilling(prefill)
    p.promise.ttft_headroom = prefill.guard.headrooms.margin(request.ttft_ms / 1000)
    p.ttft_ms, p.completion_tokens = ttft_ms, tokens
    return p


def test_a_burst_of_tpot_misses_raises_epsilon_once_from_the_margin_that_admitted_them():
    decode = _record("decode", "d0", decode_view=DecodeView(ClassMargins(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headrooms=ClassMargins(1.0)))
    request = _request()
    flights = [_served(decode, prefill, ttft_ms=50, tpot_ms=26, tokens=20) for _ in range(8)]  # all admitted at 1.3
    loop = PromiseLoop()
    for p in flights:
        loop.first_token(request, p)
    relaxed = prefill.guard.headrooms.margin(1.0)
    assert relaxed < 1.0  # TTFTs met with room, heard at the first token: relaxed
    for p in flights:
        loop.served(request, p)
    assert prefill.guard.headrooms.margin(1.0) == relaxed  # the end of a request feeds its TPOT only
    # each missed by ~1.3 (26 ms of 20, and the clock moved a little): ε ≈ 1.3 × 1.3, not 1.3 × 1.2^8 ≈ 5.6
    assert decode.view.epsilons.of(0.020).margin == pytest.approx(1.3 * 1.3, rel=0.05)
    # and the seven misses the raise did not answer are owed: one step each, paid before ε relaxes
    assert decode.view.epsilons.of(0.020).owed == pytest.approx(7 * math.log(1.2), rel=0.05)
    assert loop.by_class["1000:20"].value(time.perf_counter()) == 0.0


def test_a_request_decoding_late_raises_epsilon_once_while_it_still_streams():
    decode = _record("decode", "d0", decode_view=DecodeView(ClassMargins(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headrooms=ClassMargins(1.0)))
    request = _request(max_tokens=64)
    loop = PromiseLoop()
    early = _served(decode, prefill, ttft_ms=50, tpot_ms=30, tokens=8)  # 7 tokens after the first: too few
    loop.decoding(request, early)
    assert decode.view.epsilons.of(0.020).margin == 1.3 and not early.promise.late_told
    late = _served(decode, prefill, ttft_ms=50, tpot_ms=30, tokens=20)  # 19 tokens at 30 ms against 20 ms
    loop.decoding(request, late)
    assert late.promise.late_told and decode.view.epsilons.of(0.020).margin == pytest.approx(1.3 * 1.5)  # the largest one raise
    decode.view.epsilons.of(0.020).margin = 1.3
    loop.decoding(request, late)  # told once
    assert decode.view.epsilons.of(0.020).margin == 1.3
    loop.served(request, late)  # and its miss at the end is not told again: no raise, no debt
    assert decode.view.epsilons.of(0.020).margin == 1.3 and decode.view.epsilons.of(0.020).owed == 0.0


def test_a_loose_class_met_with_room_relaxes_its_own_margins_not_a_tight_class_s():
    """Each SLO class has its own margins: 1 s TTFTs met in 50 ms and 50 ms TPOTs met at 8 ms say
    nothing of whether a 100 ms TTFT or a 15 ms TPOT admitted at its boundary will be met; a miss of
    the tight class raises only its own."""
    decode = _record("decode", "d0", decode_view=DecodeView(ClassMargins(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headrooms=ClassMargins(1.0)))
    loose, tight = _request(ttft_ms=1000, tpot_ms=50), _request(ttft_ms=100, tpot_ms=15)
    loop = PromiseLoop()
    for _ in range(200):
        p = _served(decode, prefill, ttft_ms=50, tpot_ms=8, tokens=20, request=loose)
        loop.first_token(loose, p)
        loop.served(loose, p)
    assert prefill.guard.headrooms.margin(1.0) < 0.85 and decode.view.epsilons.margin(0.050) < 1.3 * 0.85
    assert prefill.guard.headrooms.margin(0.100) == 1.0 and decode.view.epsilons.margin(0.015) == 1.3
    missed = _served(decode, prefill, ttft_ms=130, tpot_ms=18, tokens=20, request=tight)
    loop.first_token(tight, missed)
    loop.served(tight, missed)
    assert prefill.guard.headrooms.of(0.100).margin == pytest.approx(1.3, rel=0.05)  # 130 ms of 100, from 1.0
    assert decode.view.epsilons.of(0.015).margin == pytest.approx(1.3 * 1.2, rel=0.05)  # 18 ms of 15
    assert prefill.guard.headrooms.of(1.0).margin < 0.85 and decode.view.epsilons.of(0.050).margin < 1.3 * 0.85
    assert dict(prefill.guard.headrooms.items()).keys() == {100.0, 1000.0}
    # the moment of a miss: every class is admitted with that miss's raise on top, for a while
    assert prefill.guard.headrooms.surge() == pytest.approx(1.3, rel=0.05)
    assert decode.view.epsilons.margin(0.050) == pytest.approx(decode.view.epsilons.of(0.050).margin * 1.2, rel=0.05)


def test_a_ttft_met_with_room_relaxes_the_headroom_only_where_its_prediction_came_near_the_slo():
    decode = _record("decode", "d0", decode_view=DecodeView(ClassMargins(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headrooms=ClassMargins(1.0)))
    request, loop = _request(ttft_ms=1000), PromiseLoop()
    for predicted_s in (0.05, 0.5, 0.75):  # a light load: sent at once, predicted far inside 1 s
        p = _served(decode, prefill, ttft_ms=60, tpot_ms=5, tokens=20)
        p.promise.prefill_going(p.started, predicted_s, prefill.guard.headrooms, 1.0)
        loop.first_token(request, p)
    assert prefill.guard.headrooms.margin(1.0) == 1.0  # met with room, but the headroom decided none of them
    near = _served(decode, prefill, ttft_ms=600, tpot_ms=5, tokens=20)
    near.promise.prefill_going(near.started + 0.3, 0.55, prefill.guard.headrooms, 1.0)  # waited 300 ms, then 550 ms predicted
    loop.first_token(request, near)
    assert prefill.guard.headrooms.margin(1.0) < 1.0  # predicted at 85% of its SLO, met at 60%: room where it counted


def test_a_served_request_tells_its_decode_view_what_its_handoff_cost_beyond_a_step():
    from gateway.coalesce import TokenInbox

    decode = _record("decode", "d0", decode_view=DecodeView(ClassMargins(1.3)))
    prefill = _record("prefill", "p0", ttft=TtftGuard(None, 512, headrooms=ClassMargins(1.0)))
    p = _served(decode, prefill, ttft_ms=50, tpot_ms=20, tokens=12)
    p.inbox = TokenInbox()
    p.promise.first_sent = 100.0
    p.inbox.first_arrival, p.inbox.last_arrival = 100.060, 100.260  # 60 ms, then 10 gaps of 20 ms
    assert decode.view.handoff_s() == 0.0 and decode.view.handoff_s(0.030) == 0.030  # none seen: the prior
    PromiseLoop().served(_request(), p)
    assert decode.view.handoff_s(0.030) == pytest.approx(0.040)  # seen: what was seen
