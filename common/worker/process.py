"""What both worker roles do around their engine: serve, register, report, drain.

    server (+ health, reflection, mTLS caller check) → start → SERVING → register with the
    gateway → heartbeats … SIGTERM → NOT_SERVING, an immediate draining heartbeat (the gateway
    stops routing here), wait for in-flight requests (grace period) → stop
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from common.engine.llm_engine import LLMEngine
from common.process.lifecycle import Lifecycle
from common.process.metrics import Metrics
from common.process.options import ProcessOptions
from common.worker.gateways import GatewayRegistrations
from common.rpc.server import bind, new_server, use_tls
from common.rpc.tls import PeerRoleInterceptor
from common.worker.config import WorkerConfig
from common.worker.prefix_digest import DigestPublisher
from common.worker.state import current_load, describe

log = logging.getLogger(__name__)

# Under mutual TLS, who may call a worker: the gateway drives requests; prefill workers also
# move KV blocks into decode workers (the grpc and collective transports' RPCs).
WORKER_CALLERS: dict[str, set[str]] = {
    "/pdserve.v1.PrefillWorker/": {"gateway"},
    "/pdserve.v1.DecodeWorker/": {"gateway"},
    "/pdserve.v1.DecodeWorker/TransportInfo": {"gateway", "prefill"},
    "/pdserve.v1.DecodeWorker/WriteBlocks": {"prefill"},
    "/pdserve.v1.DecodeWorker/ReceiveBlocks": {"prefill"},
}


@dataclass
class WorkerProcess:
    role: str
    service_name: str  # e.g. "pdserve.v1.PrefillWorker", its health service name
    engine: LLMEngine
    worker_id: str
    worker: WorkerConfig
    options: ProcessOptions
    metrics: Metrics
    kv_receives: tuple[str, ...] = field(default=())  # decode: the transports its pool can receive by

    def __post_init__(self) -> None:
        if self.options.tls.enabled and not self.options.tls.mutual:
            raise ValueError("a worker serves TLS only under mutual TLS: give --tls-ca with --tls-cert/--tls-key "
                             "(--tls-ca alone trusts a TLS gateway)")
        use_tls(self.options.tls)
        interceptors = [PeerRoleInterceptor(WORKER_CALLERS)] if self.options.tls.mutual else []
        self.server = new_server(interceptors)
        self.lifecycle = Lifecycle(self.server, [self.service_name], self.options.drain_grace_s)
        self.registrar: GatewayRegistrations | None = None  # with every gateway it was given
        self.on_drain: list[Callable[[], None]] = []  # e.g. servicers start refusing new work
        self._loop = asyncio.get_running_loop()

    def engine_died(self, reason: str) -> None:
        """``EngineThread.on_death``, called on the dying thread: stop serving and exit non-zero."""
        self._loop.call_soon_threadsafe(self.lifecycle.fail, reason)

    @property
    def draining(self) -> bool:
        return self.lifecycle.draining

    async def run(self, add_servicer: Callable[[grpc.aio.Server], None],
                  on_stop: Callable[[], Awaitable[None]]) -> None:
        """Serves until SIGTERM, then drains and calls ``on_stop`` (engine thread, transports)."""
        add_servicer(self.server)
        bound = bind(self.server, self.worker.host, self.worker.port, self.options.tls,
                     require_client_auth=self.options.tls.mutual)
        address = self.worker.advertised(int(bound.rsplit(":", 1)[1]))
        await self.server.start()
        engine = self.engine
        self.metrics.watch(running=lambda: engine.load.running, waiting=lambda: engine.load.waiting,
                           kv_usage=lambda: engine.load.kv_usage, draining=lambda: float(self.draining))
        index = engine.pool.prefix_index
        if index is not None:
            self.metrics.watch_prefix_cache(lambda: index.queries, lambda: index.hits)
        models = engine.cost_models
        if models is not None:
            # (prefill calls are calibrated at the gateway, which exports that calibration; here:
            # this worker's own forwards, what its TTFT-guarded packing predicts with)
            self.metrics.watch_cost_model("prefill", self.worker_id, models.prefill.r2, models.prefill.worst_ratio,
                                          lambda: engine.load.forward_calibration_ratio)
            self.metrics.watch_cost_model("decode", self.worker_id, models.decode.r2, models.decode.worst_ratio,
                                          lambda: engine.load.step_calibration_ratio,
                                          lambda: engine.load.step_prediction_error,
                                          lambda: engine.load.refits)
            if self.role == "prefill":
                self.metrics.watch_observed_ratios("prefill", self.worker_id, engine.forward_ratios)
            if self.role == "decode":
                self.metrics.watch_observed_ratios("decode", self.worker_id, engine.step_costs.ratios)
                self.metrics.watch_tpot_bounds(lambda: engine.load.epsilon_ceiling,
                                               lambda: engine.load.tpot_alone_now_s or 0.0)
                self.metrics.watch_coefficients("decode", self.worker_id, {
                    term: (lambda t=term: getattr(engine.cost_models.decode, t) if engine.cost_models else 0.0)
                    for term in ("alpha", "beta", "gamma", "delta", "knee")})
        self.metrics.serve(self.options.metrics_port, self.options.metrics_host)
        await self.lifecycle.serving()
        descriptor = describe(engine, self.role, self.worker_id, address,
                              self.worker.kv_transport if self.role == "prefill" else "", self.kv_receives)
        self.registrar = GatewayRegistrations(self.worker.gateway, descriptor,
                                              lambda digest: current_load(engine, self.draining, digest),
                                              DigestPublisher(engine.pool.prefix_index), on_refused=self.lifecycle.fail)
        self.registrar.start()
        log.info("%s worker %s listening on %s (advertised as %s)", self.role, self.worker_id, bound, address)

        async def stop() -> None:
            assert self.registrar is not None
            await self.registrar.stop()
            await on_stop()
            self.metrics.close()

        await self.lifecycle.run(lambda: engine.load.in_flight, self._announce_draining, stop)

    async def _announce_draining(self) -> None:
        for hook in self.on_drain:
            hook()
        if self.registrar is not None:
            await self.registrar.beat_now()
