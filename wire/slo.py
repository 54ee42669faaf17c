"""An SLO on the wire at two precisions: whole milliseconds (``ttft_ms``, ``tpot_ms``) and
microseconds (``ttft_us``, ``tpot_us``). A TPOT SLO of 5.7 ms sent as milliseconds alone would
reach the guards as 5 ms, and the credit batcher would hold the request to that."""

from __future__ import annotations

from wire.v1 import gateway_pb2


def slo_to_proto(ttft_ms: float, tpot_ms: float, name: str = "") -> gateway_pb2.SLO:
    """Both precisions: the exact value in microseconds, rounded milliseconds beside it."""
    if min(ttft_ms, tpot_ms) < 0:
        raise ValueError(f"SLOs must be >= 0 ms, got ttft {ttft_ms} and tpot {tpot_ms}")
    return gateway_pb2.SLO(ttft_ms=round(ttft_ms), tpot_ms=round(tpot_ms), ttft_us=round(ttft_ms * 1000),
                           tpot_us=round(tpot_ms * 1000), name=name)


def slo_from_proto(slo: gateway_pb2.SLO) -> tuple[float, float]:
    """(ttft_ms, tpot_ms): each from its microseconds where set, else its milliseconds; 0: not given."""
    return (slo.ttft_us / 1000 if slo.ttft_us else float(slo.ttft_ms),
            slo.tpot_us / 1000 if slo.tpot_us else float(slo.tpot_ms))
