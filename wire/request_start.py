"""When a request was sent, as its client stamps it: metadata (HTTP header) ``x-request-start:
t=<seconds since the epoch>``, the convention load balancers use for the requests they forward.
The gateway plans a stamped request's TTFT from that moment (``gateway.request_start``)."""

from __future__ import annotations

import time
from collections.abc import Callable

HEADER = "x-request-start"


def stamp(now: Callable[[], float] = time.time) -> tuple[str, str]:
    """The entry a client sends with a request, naming this moment."""
    return HEADER, f"t={now():.6f}"
