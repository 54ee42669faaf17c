"""``pdserve prefill``: a prefill worker process."""

from __future__ import annotations

import argparse
import asyncio
import logging

from common.config import EngineConfig
from common.engine import LLMEngine
from common.engine_args import add_engine_args, engine_config_from_args
from common.engine_thread import EngineThread
from common.rpc.registration import Registrar
from common.rpc.server import bind, new_server, run_main, serve_until_signalled
from common.rpc.worker_config import WorkerConfig, add_worker_args, worker_config_from_args
from common.rpc.worker_state import current_load, describe, warm_up
from pdserve.v1 import worker_pb2_grpc
from prefill_worker.servicer import PrefillServicer

log = logging.getLogger("pdserve.prefill")


async def serve(engine_config: EngineConfig, worker: WorkerConfig) -> None:
    worker_id = worker.resolved_id("prefill")
    engine = LLMEngine(engine_config)
    warm_up(engine, worker.cost_model)
    thread = EngineThread(engine)
    thread.start()
    servicer = PrefillServicer(thread, worker_id, worker.kv_transport)
    server = new_server()
    worker_pb2_grpc.add_PrefillWorkerServicer_to_server(servicer, server)
    address = bind(server, worker.host, worker.port)
    await server.start()
    registrar = Registrar(worker.gateway, describe(engine, "prefill", worker_id, address),
                          lambda: current_load(engine, servicer.draining))
    registrar.start()
    log.info("prefill worker %s listening on %s (KV transport %s)", worker_id, address, worker.kv_transport)

    async def stop() -> None:
        await registrar.stop()
        await asyncio.to_thread(thread.stop)

    await serve_until_signalled(server, stop)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="pdserve prefill", description="Run a prefill worker.")
    add_worker_args(parser)
    add_engine_args(parser)
    return parser


def main_from_args(args: argparse.Namespace) -> int:
    engine_config, worker = engine_config_from_args(args), worker_config_from_args(args)
    run_main(lambda: serve(engine_config, worker))
    return 0


def main() -> int:
    return main_from_args(build_parser().parse_args())
