"""``pdserve gateway``: the public gRPC server and the workers' registry."""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from common.model.location import resolve_model_dir
from common.model.config import load_model_config
from common.process.lifecycle import Lifecycle
from common.process.metrics import Metrics
from common.process.options import ProcessOptions, add_process_args, process_options_from_args
from common.rpc.server import bind, new_server, run_main, use_tls
from common.rpc.tls import PeerRoleInterceptor
from common.slo.policy import Policy
from common.text.chat_template import load_chat_template
from common.text.text_tokenizer import load_text_tokenizer
from gateway.admission import AdmissionQueue
from gateway.config import GatewayConfig, add_gateway_args, gateway_config_from_args
from gateway.decode_streams import DecodeStreams
from gateway.delivery import FRONTS, DeliveryAllowance
from gateway.arrival_wait import ArrivalWait
from gateway.front_capacity import FrontCapacity, LoopBusy
from gateway.loop_lag import LoopLag
from gateway.registry import RegistryServicer, WorkerRegistry
from gateway.request_flow import RequestFlow
from gateway.router import router_for
from gateway.front_door import FrontDoor
from gateway.servicer import GatewayServicer
from gateway.tenants import TenantTable
from gateway.stream_interval import StreamInterval
from gateway.validation import ModelLimits
from wire.v1 import gateway_pb2_grpc, worker_pb2_grpc

if TYPE_CHECKING:
    from gateway.openai.server import HttpServer

log = logging.getLogger("pdserve.gateway")
SERVICE = "pdserve.v1.Gateway"
# Under mutual TLS only cluster workers may register. The public port serves clients that have
# no certificate (API keys authenticate those), so workers register on a second port, the
# registry port, which requires a client certificate from the cluster CA.
GATEWAY_CALLERS = {"/pdserve.v1.Registry/": {"prefill", "decode"}}


async def _watch_workers(registry: WorkerRegistry, lifecycle: Lifecycle, metrics: Metrics, period_s: float,
                         delivery: DeliveryAllowance) -> None:
    """Expires silent workers; the ``pdserve.v1.Gateway`` health service is SERVING while at
    least one prefill and one decode worker are routable (the overall ``""`` service only
    says the process is up, so that workers can find a gateway that has none yet)."""
    serving: bool | None = None
    while True:
        registry.expire()
        ready = bool(registry.routable("prefill")) and bool(registry.routable("decode"))
        if ready != serving and not lifecycle.draining:
            await (lifecycle.serving(SERVICE) if ready else lifecycle.not_serving(SERVICE))
            serving = ready
        metrics.workers.clear()
        for w in registry.workers.values():
            state = ("draining" if w.load.draining else "suspect" if w.suspect else "stalled" if w.stalled
                     else "ready" if w.ready else "connecting")
            metrics.workers.labels("gateway", w.role, state).inc()
            if w.ttft is not None:
                metrics.extrapolations.labels("gateway", w.worker_id).set(w.ttft.extrapolations)
        for front in FRONTS:
            metrics.delivery_allowance.labels("gateway", front).set(delivery.allowance(front))
        await asyncio.sleep(period_s)


async def serve(config: GatewayConfig, options: ProcessOptions) -> None:
    model_dir = resolve_model_dir(config.model, config.preset)
    model = load_model_config(model_dir)
    tokenizer = load_text_tokenizer(model_dir)
    tenants = TenantTable.from_file(config.api_keys) if config.api_keys else TenantTable.open()
    max_len = min(config.max_model_len or model.max_position_embeddings, model.max_position_embeddings)
    limits = ModelLimits(max_len, model.vocab_size, (config.default_ttft_ms, config.default_tpot_ms),
                         config.named_slos(), config.max_prompt_bytes or max_len * tokenizer.max_token_bytes)
    use_tls(options.tls)
    metrics = Metrics("gateway")
    loop_lag, loop_busy = LoopLag(), LoopBusy()
    registry = WorkerRegistry(config.worker_timeout_ms / 1000, loop_lag, config.worker_stall_ms / 1000,
                              config.slo_target, local_prefill=config.local_prefill == "on" and config.ttft_guard)
    admission = AdmissionQueue()
    streams = DecodeStreams(f"gateway-{uuid.uuid4().hex[:8]}", registry, on_finished=admission.notify)
    flow = RequestFlow(registry, router_for(config.ttft_guard, config.prefill_routing), streams, tokenizer, metrics=metrics,
                       admission=admission, stream_interval=StreamInterval.parse(config.stream_interval_ms, loop_busy.fraction),
                       migration_limit=config.migration_limit)
    server = new_server([PeerRoleInterceptor(GATEWAY_CALLERS)] if options.tls.mutual else [])
    lifecycle = Lifecycle(server, [SERVICE, "pdserve.v1.Registry"], options.drain_grace_s)
    front = FrontDoor(flow, tokenizer, limits, load_chat_template(model_dir), tenants, metrics,
                      draining=lambda: lifecycle.draining, delivery=DeliveryAllowance(config.slo_target),
                      capacity=_front_capacity(config, loop_busy), arrival=_arrival_wait(config))
    gateway_pb2_grpc.add_GatewayServicer_to_server(GatewayServicer(front, registry, str(model_dir)), server)
    worker_pb2_grpc.add_RegistryServicer_to_server(RegistryServicer(registry, config.heartbeat_ms), server)
    address = bind(server, config.host, config.port, options.tls, require_client_auth=False)
    if options.tls.mutual and not config.registry_port:
        raise ValueError("mutual TLS needs --registry-port: workers register there with their certificates")
    if config.registry_port:
        registry_address = bind(server, config.host, config.registry_port, options.tls,
                                require_client_auth=options.tls.mutual)
        log.info("workers register on %s", registry_address)
    http = _http_server(config, front, registry, lifecycle, metrics, str(model_dir), limits.max_model_len)
    await server.start()
    if http is not None:
        http.start()
    await lifecycle.serving("")
    await lifecycle.serving("pdserve.v1.Registry")
    await lifecycle.not_serving(SERVICE)
    metrics.watch(running=lambda: sum(p.ttft_ms > 0 for p in list(flow.active.values())),
                  waiting=lambda: sum(p.ttft_ms == 0 for p in list(flow.active.values())),
                  draining=lambda: float(lifecycle.draining))
    metrics.serve(options.metrics_port, options.metrics_host)
    watcher = asyncio.create_task(_watch_workers(registry, lifecycle, metrics, config.heartbeat_ms / 1000, front.delivery))
    probes = _start_probes(loop_lag, loop_busy, front.arrival, address, metrics)
    log.info("gateway listening on %s (model %s, policy %s%s%s)", address, model_dir, config.policy,
             ", TLS" if options.tls.enabled else "", ", API keys" if config.api_keys else "")

    async def stop() -> None:
        if http is not None:
            await http.stop()
        for task in (watcher, *probes):
            task.cancel()
        await streams.close()
        await flow.drain()
        metrics.close()

    await lifecycle.run(lambda: len(flow.active), _on_drain, stop)


async def _on_drain() -> None:
    """Nothing to do: Generate refuses new requests from now on (UNAVAILABLE); in-flight ones go on."""


def _front_capacity(config: GatewayConfig, loop_busy: LoopBusy) -> FrontCapacity | None:
    """The refusals for the gateway's own load (guarded policies, unless ``--busy-limit 0``)."""
    if config.policy == Policy.FCFS or config.busy_limit == 0:
        return None
    return FrontCapacity(loop_busy.fraction, config.busy_limit - 0.05, config.busy_limit + 0.05)


def _arrival_wait(config: GatewayConfig) -> ArrivalWait | None:
    """The wait before a gRPC handler, allowed for in TTFT plans where a TTFT guard makes them."""
    return ArrivalWait(config.slo_target) if config.ttft_guard else None


def _start_probes(loop_lag: LoopLag, loop_busy: LoopBusy, arrival: ArrivalWait | None, address: str,
                  metrics: Metrics) -> list[asyncio.Task[None]]:
    """The event loop's own probes (its lag, its busy share, the wait of a call before its
    handler), each exported as a metric."""
    probes = [asyncio.create_task(loop_lag.run(on_wake=loop_busy.sample))]
    metrics.watch_loop_lag(lambda: loop_lag.worst_recent_s)
    metrics.watch_loop_busy(loop_busy.fraction)
    if arrival is not None:
        probes.append(asyncio.create_task(arrival.run(address)))
        metrics.watch_arrival_wait(arrival.allowance)
    return probes


def _http_server(config: GatewayConfig, front: FrontDoor, registry: WorkerRegistry, lifecycle: Lifecycle,
                 metrics: Metrics, model_dir: str, max_model_len: int) -> HttpServer | None:
    """The OpenAI-compatible server on ``--http-port``, or None without one (it imports FastAPI)."""
    if not config.http_port:
        return None
    from gateway.openai.app import ServedModel, build_app
    from gateway.openai.server import HttpServer

    def ready() -> tuple[bool, str]:
        if lifecycle.draining:
            return False, "draining"
        if not (registry.routable("prefill") and registry.routable("decode")):
            return False, "waiting for a prefill and a decode worker"
        return True, "ok"

    name = config.model_name(model_dir)
    served = ServedModel(name, frozenset({model_dir, config.preset if not config.model else name}), max_model_len,
                         int(time.time()))
    return HttpServer(build_app(front, served, metrics.registry, ready), config.host, config.http_port)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="pdserve gateway", description="Run the gateway.")
    add_gateway_args(parser)
    add_process_args(parser)
    return parser


def main_from_args(args: argparse.Namespace) -> int:
    config, options = gateway_config_from_args(args), process_options_from_args(args)
    run_main(lambda: serve(config, options), "gateway", options.log_format, options.log_level)
    return 0


def main() -> int:
    return main_from_args(build_parser().parse_args())
