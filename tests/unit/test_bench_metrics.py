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


def test_the_testers_lag_while_a_first_token_waits_is_recorded_and_explains_only_misses_it_covers():
    import asyncio
    import time

    from client.bench.runner import schedule
    from client.bench.workload import PlannedRequest

    plan = [PlannedRequest(i, [1], 1, None, 0.0) for i in range(2)]

    async def send(item: PlannedRequest, started: float) -> RequestRecord:
        sent = time.perf_counter() - started
        await asyncio.sleep(0.03)
        if item.index == 0:
            time.sleep(0.12)  # the tester's loop blocked while this request's first token waits
            first = time.perf_counter() - started
        else:
            await asyncio.sleep(0.3)  # this one's first token comes well after the stall
            first = time.perf_counter() - started
        return RequestRecord(item.index, 1, sent, "c", 100.0, None, [first], [1])

    records, _ = asyncio.run(schedule(plan, None, send, lambda r: None))
    assert records[0].read_lag_s >= 0.1  # the stall covered its wait
    assert records[1].read_lag_s >= 0.1  # sent before the stall too: the stall lies inside its wait
    late = RequestRecord(2, 1, 0.0, "c", 100.0, None, [0.15], [1], read_lag_s=0.06)  # 150 ms, 60 of them the tester's
    too_late = RequestRecord(3, 1, 0.0, "c", 100.0, None, [0.25], [1], read_lag_s=0.06)
    result = summarize([late, too_late], 1.0, [99], [])
    assert result["misses_within_read_lag"] == 1
    assert result["p99_read_lag_ms"] == pytest.approx(60)


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
