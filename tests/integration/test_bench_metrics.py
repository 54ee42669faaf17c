"""Load-test figures the load tester's own event loop causes: a loop held by real work (``time.sleep``
on it) makes sends late and first tokens read late, and the records say so."""

from __future__ import annotations

import pytest

from client.bench.metrics import RequestRecord, summarize


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
