"""A server process's life: health and reflection services, then SIGTERM → drain → exit.

Health (``grpc.health.v1``): the overall service ``""`` and each of the process's own
services turn SERVING once the process has warmed up and is ready for work, and NOT_SERVING
for good when it starts draining. Draining: stop taking new work (the servicers check
``draining`` and answer UNAVAILABLE; workers also tell the gateway in an immediate heartbeat,
so it stops routing to them), wait for what is in flight to finish or the grace period to
pass, then stop. A process that cannot serve any more (``fail``: its engine thread died, the
gateway refused it) turns NOT_SERVING, stops without waiting and exits non-zero.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

log = logging.getLogger(__name__)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class ProcessFailed(RuntimeError):
    """The process stopped because it could not go on serving; it exits non-zero."""


class Lifecycle:
    def __init__(self, server: grpc.aio.Server, service_names: Sequence[str], drain_grace_s: float) -> None:
        self.server = server
        self.service_names = list(service_names)
        self.drain_grace_s = drain_grace_s
        self.draining = False
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            [*self.service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME], server)
        self._stop = asyncio.Event()
        self.failure = ""  # why the process cannot serve any more; empty while it can

    async def starting(self) -> None:
        """Before warm-up is over: reachable, but not SERVING."""
        for name in ("", *self.service_names):
            await self.health.set(name, NOT_SERVING)

    async def serving(self, service: str | None = None) -> None:
        for name in ("", *self.service_names) if service is None else (service,):
            await self.health.set(name, SERVING)

    async def not_serving(self, service: str) -> None:
        await self.health.set(service, NOT_SERVING)

    def fail(self, reason: str) -> None:
        """Stops at once, without draining (the work in flight cannot finish here)."""
        if not self.failure:
            log.critical("cannot serve any more: %s", reason)
            self.failure = reason
        self._stop.set()

    async def run(self, in_flight: Callable[[], int], on_drain: Callable[[], Awaitable[None]],
                  on_stop: Callable[[], Awaitable[None]]) -> None:
        """Runs until SIGTERM/SIGINT, then drains: ``on_drain`` (tell others), wait until
        ``in_flight()`` is 0 or the grace period is over, ``on_stop``, stop the server."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        # What start-up built (modules, the model, the tokenizer, the servicers) lives as long as
        # the process: out of the collector's reach, a full collection under load scans only what
        # serving allocated, instead of pausing this process's event loop for 100+ ms.
        gc.freeze()
        await self._stop.wait()
        self.draining = True
        await self.health.enter_graceful_shutdown()
        if self.failure:
            await on_stop()
            await self.server.stop(grace=0.5)
            raise ProcessFailed(self.failure)
        log.info("draining: %d request(s) in flight, grace %.1f s", in_flight(), self.drain_grace_s)
        await on_drain()
        deadline = time.monotonic() + self.drain_grace_s
        while in_flight() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = in_flight()
        if left:
            log.warning("grace period over with %d request(s) still in flight; stopping anyway", left)
        else:
            log.info("drained; stopping")
        await on_stop()
        await self.server.stop(grace=1.0)
