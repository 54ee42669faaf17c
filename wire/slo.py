"""An SLO on the wire at two precisions: whole milliseconds (``ttft_ms``, ``tpot_ms``) and
microseconds (``ttft_us``, ``tpot_us``). A TPOT SLO of 5.7 ms sent as milliseconds alone would
reach the guards as 5 ms, and the credit batcher would hold the request to that."""

from __future__ import annotations

from wire.v1 import gateway_pb2


def to_wire(ms: float) -> tuple[int, int]:
    """``ms`` as the wire carries it: (rounded milliseconds, exact microseconds)."""
    if ms < 0:
        raise ValueError(f"SLOs must be >= 0 ms, got {ms}")
    return round(ms), round(ms * 1000)


def from_wire(ms: int, us: int) -> float:
    """Milliseconds from a field pair: the microseconds where set, else the milliseconds; 0: not given."""
    return us / 1000 if us else float(ms)


def slo_to_proto(ttft_ms: float, tpot_ms: float, name: str = "") -> gateway_pb2.SLO:
    """Both precisions: the exact value in microseconds, rounded milliseconds beside it."""
    (ttft, ttft_us), (tpot, tpot_us) = to_wire(ttft_ms), to_wire(tpot_ms)
    return gateway_pb2.SLO(ttft_ms=ttft, tpot_ms=tpot, ttft_us=ttft_us, tpot_us=tpot_us, name=name)


def slo_from_proto(slo: gateway_pb2.SLO) -> tuple[float, float]:
    """(ttft_ms, tpot_ms), each at the finer precision it was sent with; 0: not given."""
    return from_wire(slo.ttft_ms, slo.ttft_us), from_wire(slo.tpot_ms, slo.tpot_us)
