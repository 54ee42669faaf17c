"""An SLO finer than a millisecond reaches the guards as it was given, on every way in."""

from __future__ import annotations

import pytest

from client.bench.workload import PlannedRequest, SloClass
from client.convert import generate_request
from client.types import SLO
from gateway.openai.convert import _slo as openai_slo
from gateway.openai.schemas import SloExtension
from gateway.validation import ModelLimits, validate
from wire.slo import slo_from_proto, slo_to_proto
from wire.v1 import gateway_pb2

LIMITS = ModelLimits(max_model_len=512, vocab_size=1000, default_slo=(1000, 50), named_slos={"interactive": (200.0, 30.0)})


def _request(slo: gateway_pb2.SLO) -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1, 2, 3]), slo=slo)


def test_a_fractional_slo_keeps_its_microseconds_and_carries_rounded_milliseconds_beside_them():
    slo = slo_to_proto(82.4, 5.7, "x")
    assert (slo.ttft_ms, slo.tpot_ms, slo.ttft_us, slo.tpot_us, slo.name) == (82, 6, 82400, 5700, "x")
    assert slo_from_proto(slo) == pytest.approx((82.4, 5.7))
    # a sender that sets milliseconds only is read as before
    assert slo_from_proto(gateway_pb2.SLO(ttft_ms=200, tpot_ms=30)) == (200.0, 30.0)
    assert slo_from_proto(gateway_pb2.SLO()) == (0.0, 0.0)
    with pytest.raises(ValueError):
        slo_to_proto(-1, 5)


def test_the_gateway_holds_a_request_to_the_tpot_it_asked_for_not_its_whole_milliseconds():
    req = validate(_request(slo_to_proto(82.4, 5.7)), None, LIMITS)
    assert (req.ttft_ms, req.tpot_ms) == pytest.approx((82.4, 5.7)) and req.slo_class == "custom"
    assert validate(_request(gateway_pb2.SLO(tpot_ms=30)), None, LIMITS).tpot_ms == 30  # the TTFT: the default
    assert validate(_request(gateway_pb2.SLO(tpot_ms=30)), None, LIMITS).ttft_ms == 1000
    named = validate(_request(gateway_pb2.SLO(name="interactive")), None, LIMITS)
    assert (named.ttft_ms, named.tpot_ms, named.slo_class) == (200.0, 30.0, "interactive")


def test_clients_send_the_fraction_over_grpc_and_http():
    assert slo_from_proto(generate_request([1, 2], slo=SLO(ttft_ms=82.4, tpot_ms=5.7)).slo) == pytest.approx((82.4, 5.7))
    assert slo_from_proto(openai_slo(_Body(SloExtension(ttft_ms=82.4, tpot_ms=5.7)), {})) == pytest.approx((82.4, 5.7))
    headers = {"x-slo-ttft-ms": "82.4", "x-slo-tpot-ms": "5.7"}
    assert slo_from_proto(openai_slo(_Body(None), headers)) == pytest.approx((82.4, 5.7))
    for bad in ("5,7", "nan", "inf"):
        with pytest.raises(Exception, match="milliseconds"):
            openai_slo(_Body(None), {"x-slo-tpot-ms": bad})


def test_the_load_tester_sends_its_classes_as_they_are_judged():
    from client.bench.openai_runner import slo_headers
    from client.bench.runner import slo_message

    cls = SloClass("tight", 82.4, 5.7)
    assert slo_from_proto(slo_message(cls)) == pytest.approx((82.4, 5.7))
    assert slo_message(None) == gateway_pb2.SLO()
    assert slo_headers(PlannedRequest(0, [1], 1, cls, 0.0)) == {"x-slo-ttft-ms": "82.4", "x-slo-tpot-ms": "5.7"}


class _Body:
    def __init__(self, slo: SloExtension | None) -> None:
        self.slo = slo
