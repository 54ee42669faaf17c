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


def test_a_request_whose_wait_saw_no_stall_has_no_read_lag():
    from client.bench.read_lag import ReadLag

    lag = ReadLag(started=0.0, period_s=0.005)
    for t, late in ((0.10, 0.0), (0.20, 0.08), (0.30, 0.001)):
        lag.record(t, late)
    assert lag.worst(0.21, 0.28) == pytest.approx(0.0)  # the 0.001 wake-up at 0.30 comes after the window
    assert lag.worst(0.21, 0.29) == pytest.approx(0.001)
    assert lag.worst(0.05, 0.19) == pytest.approx(0.08)  # a stall ending 2 periods after the first token counts
    assert lag.worst(0.05, 0.18) == pytest.approx(0.0)


def test_the_read_lag_keeps_only_the_wake_ups_a_request_may_still_ask_about():
    """An hour of wake-ups with nothing in flight is not kept; those from a send still waiting for
    its read lag are, and it reads the same worst as if all had been kept."""
    from client.bench.read_lag import TRIM_EVERY, ReadLag

    lag = ReadLag(started=0.0, period_s=0.005)
    t = 0.0
    for i in range(720_000):  # an hour at 200 wake-ups a second, no request in flight
        t = i * 0.005
        lag.record(t, 0.0005)
    assert len(lag) <= TRIM_EVERY
    lag.watch(t)  # a request sent now
    stall_at = t + 30.0
    for i in range(1, 20_000):  # 100 s more, one 90 ms stall 30 s in
        w = t + i * 0.005
        lag.record(w, 0.09 if abs(w - stall_at) < 0.0025 else 0.0005)
    assert lag.worst(t, stall_at - 0.008) == pytest.approx(0.09)  # its window saw the stall: still kept
    assert lag.worst(t, stall_at - 0.2) == pytest.approx(0.0005)
    lag.unwatch(t)
    lag.record(t + 101.0, 0.0)
    for i in range(TRIM_EVERY):
        lag.record(t + 102.0 + i * 0.005, 0.0)
    assert len(lag) <= TRIM_EVERY  # nothing watched: the 100 s went
