"""``pdserve gateway``: the public gRPC server and the workers' registry."""

from __future__ import annotations

import argparse
import asyncio
import logging
import uuid

from common.config import EngineConfig
from common.engine import resolve_model_dir
from common.model_config import load_model_config
from common.rpc.server import bind, new_server, run_main, serve_until_signalled
from common.tokenizer import load_tokenizer
from gateway.config import GatewayConfig, add_gateway_args, gateway_config_from_args
from gateway.decode_streams import DecodeStreams
from gateway.registry import RegistryServicer, WorkerRegistry
from gateway.request_flow import RequestFlow
from gateway.router import LeastLoadedRouter, SloAwareRouter
from gateway.servicer import GatewayServicer
from gateway.validation import ModelLimits
from pdserve.v1 import gateway_pb2_grpc, worker_pb2_grpc

log = logging.getLogger("pdserve.gateway")


async def _expire_workers(registry: WorkerRegistry, period_s: float) -> None:
    while True:
        await asyncio.sleep(period_s)
        registry.expire()


async def serve(config: GatewayConfig) -> None:
    model_dir = resolve_model_dir(EngineConfig(model=config.model, preset=config.preset))
    model = load_model_config(model_dir)
    tokenizer = load_tokenizer(model_dir)
    limits = ModelLimits(min(config.max_model_len or model.max_position_embeddings, model.max_position_embeddings),
                         model.vocab_size, (config.default_ttft_ms, config.default_tpot_ms), config.named_slos())
    registry = WorkerRegistry(config.worker_timeout_ms / 1000)
    streams = DecodeStreams(f"gateway-{uuid.uuid4().hex[:8]}", registry)
    router = SloAwareRouter() if config.ttft_guard else LeastLoadedRouter()
    flow = RequestFlow(registry, router, streams, tokenizer, ttft_guard=config.ttft_guard)
    server = new_server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(
        GatewayServicer(flow, registry, tokenizer, limits, str(model_dir)), server)
    worker_pb2_grpc.add_RegistryServicer_to_server(RegistryServicer(registry, config.heartbeat_ms), server)
    address = bind(server, config.host, config.port)
    await server.start()
    expiry = asyncio.create_task(_expire_workers(registry, config.heartbeat_ms / 1000))
    log.info("gateway listening on %s (model %s, policy %s)", address, model_dir, config.policy)

    async def stop() -> None:
        expiry.cancel()
        await streams.close()
        await flow.drain()

    await serve_until_signalled(server, stop)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="pdserve gateway", description="Run the gateway.")
    add_gateway_args(parser)
    return parser


def main_from_args(args: argparse.Namespace) -> int:
    config = gateway_config_from_args(args)
    run_main(lambda: serve(config))
    return 0


def main() -> int:
    return main_from_args(build_parser().parse_args())
