"""How long a gRPC call waits inside this process before its handler runs, kept out of the TTFT budget.

gRPC's asyncio server takes calls from its core one at a time, each after a turn of the event
loop, so when the loop's turns lengthen under load, arriving calls queue inside gRPC where no
handler sees them: a request's TTFT as its client measures it starts there, the gateway's starts
at its handler, and left out of the budget that wait makes the tightest classes miss by the
client's clock while the gateway counts them in time (docs/decisions.md, 'Arrival wait').

The wait is measured the only way it can be from inside: this process calls its own health check
through its public port every ``PERIOD_S``, like any client, and times the round trip (the call
queues behind the same calls, and its answer behind the same loop, as a request's first token).
A high quantile of the recent round trips (the miss budget's, as for the fronts' deliveries),
or the age of a probe still unanswered when that is longer, is added to a new request's planned
TTFT as the delivery allowance is: its deadline moves earlier by it, and its outcome counts it.
A gateway whose probe cannot connect (a TLS port whose certificate does not name the loopback
address) allows nothing, as without a probe, and says so once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.rpc.server import gateway_channel
from common.slo.calibration import WindowQuantile
from common.slo.promise import DEFAULT_TARGET
from common.slo.ttft_margins import overhead_quantile

log = logging.getLogger(__name__)
PERIOD_S = 0.1  # between probes: ten calls a second, nothing beside a request's thousands of messages
PROBE_TIMEOUT_S = 10.0
RETRY_S = 5.0  # between probes while they fail (a port the probe cannot speak to)


class ArrivalWait:
    def __init__(self, target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._waits = WindowQuantile(quantile=overhead_quantile(target), clock=clock)
        self._probe_sent: float | None = None  # when the unanswered probe left; None: none out

    def sent(self) -> None:
        self._probe_sent = self._clock()

    def answered(self) -> None:
        if self._probe_sent is not None:
            self._waits.observe(self._clock() - self._probe_sent)
        self._probe_sent = None

    def allowance(self) -> float:
        """Seconds of a new request's TTFT budget spent before its handler runs (and its first
        token behind the loop), as recent probes found it."""
        outstanding = self._clock() - self._probe_sent if self._probe_sent is not None else 0.0
        return max(self._waits.value(), outstanding)

    async def run(self, address: str, period_s: float = PERIOD_S) -> None:
        """Probes the gateway listening on ``address`` until cancelled."""
        async with gateway_channel(_loopback(address)) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            warned = failing = False
            while True:
                self.sent()
                try:
                    await stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S)
                    self.answered()
                    failing = False
                except grpc.aio.AioRpcError as exc:
                    self._probe_sent = None
                    if not warned:
                        log.warning("cannot time this gateway's own calls (%s): TTFT plans allow no wait "
                                    "before a handler", exc.code().name)
                    warned = failing = True
                await asyncio.sleep(RETRY_S if failing else period_s)


def _loopback(address: str) -> str:
    host, port = address.rsplit(":", 1)
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "::", "[::]", "") else address
