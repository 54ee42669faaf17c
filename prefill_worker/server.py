"""``pdserve prefill``: a prefill worker process."""

from __future__ import annotations

import argparse
import asyncio
import logging

from common.config import EngineConfig
from common.engine import LLMEngine
from common.engine_thread import EngineThread
from common.rpc.registration import Registrar
from common.rpc.server import bind, new_server, serve_until_signalled
from common.rpc.worker_config import WorkerConfig
from common.rpc.worker_main import run_worker, worker_parser
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
    return worker_parser("prefill", parser)


def main_from_args(args: argparse.Namespace) -> int:
    return run_worker(serve, args)


def main() -> int:
    return main_from_args(build_parser().parse_args())
