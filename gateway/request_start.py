"""The moment a client (or a proxy in front of the gateway) sent a request, when it says so.

A request's TTFT, as its client measures it, starts at the send; the gateway's starts when its
handler runs. What lies between (the network, a proxy, and above all the wait inside this
process while gRPC queues the call behind a busy event loop) the gateway can only estimate
(``gateway.arrival_wait``: its own probe's round trips, a quantile over the last two seconds).
An estimate that lags the moment admits the tightest classes exactly when it reads low, and they
miss by the client's clock while the gateway counts them in time (docs/decisions.md, 'Request-start
stamps').

So a client may stamp its request (``wire.request_start``), as load balancers stamp the requests
they forward: header or gRPC metadata ``x-request-start: t=<seconds since the epoch>`` (milliseconds
or microseconds as an integer are read too: ``t=1732650000123``). The gateway then plans the
request from that moment: the wait already spent is known exactly, not estimated, its TTFT
deadline moves earlier by it, and its outcome counts it, so the closed loop sees what the client
sees. A stamp can only make its own request's plan stricter: one in the future (a client clock
ahead of the gateway's) or older than ``OLDEST_S`` (a clock far behind, or a replay) is ignored,
and the estimate applies as for a request without one. The clocks must agree to well within a
TTFT: the stamp is for clients on the gateway's host, or proxies kept in step by NTP.

A stamped request is not refused for the gateway's own load (``gateway.front_capacity``): its wait
is known. One whose wait already used up its TTFT SLO is refused before any work on it
(``FrontDoor``), the cheapest refusal the gateway has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from wire.request_start import HEADER

OLDEST_S = 60.0  # a stamp older than this is a clock apart from the gateway's, not a wait


def waited_s(metadata: Sequence[tuple[str, str | bytes]], received_wall: float) -> float | None:
    """Seconds from the request's stamp to ``received_wall`` (the wall-clock time it reached the
    gateway); None without a usable stamp (absent, malformed, in the future, older than ``OLDEST_S``)."""
    value = next((v for k, v in metadata if k.lower() == HEADER), None)
    if value is None:
        return None
    sent = _epoch_seconds(value.decode(errors="replace") if isinstance(value, bytes) else value)
    if sent is None:
        return None
    waited = received_wall - sent
    return waited if 0.0 <= waited <= OLDEST_S else None


def waited_before(metadata: Sequence[tuple[str, str | bytes]], received_at: float) -> float | None:
    """``waited_s`` for a request whose handler began at ``received_at`` (``time.perf_counter``)."""
    return waited_s(metadata, time.time() - (time.perf_counter() - received_at))


def _epoch_seconds(value: str) -> float | None:
    text = value.strip().removeprefix("t=")
    try:
        number = float(text)
    except ValueError:
        return None
    if number != number or number <= 0:  # NaN, or nothing
        return None
    if number >= 1e14:  # microseconds
        return number / 1e6
    if number >= 1e11:  # milliseconds
        return number / 1e3
    return number
