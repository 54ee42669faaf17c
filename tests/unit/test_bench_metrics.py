"""Load-test figures against hand-computed values on fabricated timings."""

from __future__ import annotations

import pytest

from client.bench.metrics import RequestRecord, per_class, summarize


def _record(start: float, times: list[float], tokens: list[int] | None = None, error: str = "",
            ttft_slo: float | None = None, tpot_slo: float | None = None, cls: str = "") -> RequestRecord:
    return RequestRecord(0, 10, start, cls, ttft_slo, tpot_slo, times, tokens or [1] * len(times), error)


def test_ttft_tpot_itl_e2el_follow_vllm_definitions():
    # sent at 1.0; tokens at 1.2, 1.3, 1.5, 1.6 -> TTFT 200 ms, E2E 600 ms, TPOT (600-200)/3, ITL 100/200/100
    r = _record(1.0, [1.2, 1.3, 1.5, 1.6])
    result = summarize([r], duration=2.0, percentiles=[50], metrics=["ttft", "tpot", "itl", "e2el"])
    assert result["mean_ttft_ms"] == pytest.approx(200)
    assert result["mean_tpot_ms"] == pytest.approx(400 / 3)
    assert result["mean_itl_ms"] == pytest.approx(400 / 3) and result["median_itl_ms"] == pytest.approx(100)
    assert result["mean_e2el_ms"] == pytest.approx(600)
    assert result["output_throughput"] == pytest.approx(2.0) and result["request_throughput"] == pytest.approx(0.5)


def test_one_token_output_has_zero_tpot_and_is_left_out_of_tpot_stats():
    one = _record(0.0, [0.1])
    two = _record(0.0, [0.1, 0.3])
    assert one.tpot == 0.0
    result = summarize([one, two], 1.0, [99], ["tpot"])
    assert result["mean_tpot_ms"] == pytest.approx(200)


def test_rejected_and_failed_requests_are_counted_apart_and_never_good():
    records = [
        _record(0.0, [0.05, 0.06], ttft_slo=100, tpot_slo=50, cls="tight"),  # good
        _record(0.0, [0.5, 0.51], ttft_slo=100, tpot_slo=50, cls="tight"),  # TTFT missed
        _record(0.0, [], error="RESOURCE_EXHAUSTED", ttft_slo=100, tpot_slo=50, cls="tight"),
        _record(0.0, [], error="UNAVAILABLE", cls="loose"),
        _record(0.0, [0.2, 0.4, 0.6], ttft_slo=1000, tpot_slo=300, cls="loose"),  # good
    ]
    result = summarize(records, duration=2.0, percentiles=[99], metrics=["ttft"])
    assert (result["completed"], result["rejected"], result["failed"]) == (3, 1, 1)
    assert result["errors_by_code"] == {"RESOURCE_EXHAUSTED": 1, "UNAVAILABLE": 1}
    assert result["request_goodput"] == pytest.approx(1.0) and result["slo_adherence"] == pytest.approx(0.4)
    classes = per_class(records, 2.0)
    assert classes["tight"]["good"] == 1 and classes["tight"]["rejected"] == 1 and classes["tight"]["sent"] == 3
    assert classes["loose"]["good"] == 1 and classes["loose"]["failed"] == 1


def test_a_request_sent_late_by_the_load_testers_own_event_loop_says_so():
    import asyncio
    import time

    from client.bench.runner import schedule
    from client.bench.workload import PlannedRequest

    plan = [PlannedRequest(i, [1], 1, None, send_at) for i, send_at in enumerate((0.0, 0.05))]

    async def send(item: PlannedRequest, started: float) -> RequestRecord:
        if item.index == 0:
            time.sleep(0.15)  # the tester's loop is busy 100 ms past the second request's moment
        return RequestRecord(item.index, 1, time.perf_counter() - started, token_times=[1.0], tokens_per_message=[1])

    records, _ = asyncio.run(schedule(plan, None, send, lambda r: None))
    assert records[0].send_late_s < 0.05
    assert records[1].send_late_s >= 0.09
    result = summarize(records, 1.0, [99], [])
    assert result["max_send_late_ms"] >= 90 and result["max_send_late_ms"] == pytest.approx(records[1].send_late_s * 1000)
