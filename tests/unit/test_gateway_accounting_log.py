"""The gateway's log of how requests ended: a load refusal (RESOURCE_EXHAUSTED before any work) at
debug, since past capacity they come by the hundred a second; every other ending at info."""

from __future__ import annotations

import logging

import pytest

from common.process.metrics import Metrics
from gateway.accounting import RequestAccounting


@pytest.fixture(scope="module")
def metrics() -> Metrics:
    return Metrics("gateway")


@pytest.mark.parametrize("code, before_work, level", [
    ("RESOURCE_EXHAUSTED", True, logging.DEBUG),  # a guard's refusal: counted, not logged at info
    ("RESOURCE_EXHAUSTED", False, logging.INFO),  # ended after tokens went out
    ("INVALID_ARGUMENT", True, logging.INFO),  # bad input stays visible
    ("UNAVAILABLE", True, logging.INFO),  # a worker failed before the first token
])
def test_each_ending_is_logged_at_its_level(metrics: Metrics, caplog: pytest.LogCaptureFixture, code: str,
                                            before_work: bool, level: int) -> None:
    caplog.set_level(logging.DEBUG, logger="pdserve.gateway.requests")
    RequestAccounting(metrics).failed(code, "some_reason", "why", before_work=before_work)
    [record] = [r for r in caplog.records if r.name == "pdserve.gateway.requests"]
    assert record.levelno == level and record.getMessage() == f"ended with {code} (some_reason): why"
    assert record.status == code and record.reason == "some_reason"
