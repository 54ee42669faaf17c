"""The wait of a gRPC call before its handler, timed by calling the process's own health check
(on a fake clock here; against a real gRPC server on a held loop: tests/integration/test_arrival_wait.py)."""

from __future__ import annotations

import pytest

from gateway.arrival_wait import ArrivalWait, _loopback
from gateway.front_door import Caller, FrontDoor
from gateway.validation import ModelLimits


def test_the_allowance_is_a_high_quantile_of_answered_probes_or_the_age_of_one_unanswered():
    clock = [0.0]
    wait = ArrivalWait(clock=lambda: clock[0])
    assert wait.allowance() == 0.0  # nothing measured
    for seconds in [0.001] * 30 + [0.040]:
        wait.sent()
        clock[0] += seconds
        wait.answered()
    assert wait.allowance() == pytest.approx(0.040)  # the quantile of the miss budget: the worst of these
    clock[0] += 3.0  # a window later, a probe still out for 0.2 s
    wait.sent()
    clock[0] += 0.2
    assert wait.allowance() == pytest.approx(0.2)
    wait.answered()
    assert wait.allowance() == pytest.approx(0.2)


def test_the_planned_allowance_adds_the_wait_to_grpc_requests_only():
    clock = [0.0]
    wait = ArrivalWait(clock=lambda: clock[0])
    wait.sent()
    clock[0] += 0.05
    wait.answered()
    front = FrontDoor(None, tokenizer=None, limits=ModelLimits(max_model_len=64, vocab_size=100), chat=None,  # type: ignore[arg-type]
                      arrival=wait)
    assert front._front_allowance(Caller(()), None) == pytest.approx(0.05)
    assert front._front_allowance(Caller((), front="http"), None) == 0.0
    assert _loopback("0.0.0.0:7") == "127.0.0.1:7" and _loopback("10.0.0.2:7") == "10.0.0.2:7"
