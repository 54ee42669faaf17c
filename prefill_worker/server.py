"""``pdserve prefill``: a prefill worker process."""

from __future__ import annotations

import argparse
import asyncio

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.thread import EngineThread
from common.worker.faults import fault_threshold
from common.process.metrics import Metrics
from common.process.options import ProcessOptions
from common.worker.config import WorkerConfig
from common.worker.main import run_worker, worker_parser
from common.worker.process import WorkerProcess
from common.worker.state import warm_up
from wire.v1 import worker_pb2_grpc
from prefill_worker.servicer import PrefillServicer

SERVICE = "pdserve.v1.PrefillWorker"


async def serve(engine_config: EngineConfig, worker: WorkerConfig, options: ProcessOptions) -> None:
    worker_id = worker.resolved_id("prefill")
    engine = LLMEngine(engine_config)
    warm_up(engine, worker.cost_model, worker.cost_model_cache)
    metrics = Metrics("prefill")
    process = WorkerProcess("prefill", SERVICE, engine, worker_id, worker, options, metrics)
    thread = EngineThread(engine, on_death=process.engine_died,
                          fail_after_steps=fault_threshold("engine_thread_dies", worker_id))
    thread.start()
    servicer = PrefillServicer(thread, worker_id, metrics)
    process.on_drain.append(servicer.start_draining)

    async def stop() -> None:
        await servicer.close()
        await asyncio.to_thread(thread.stop)

    await process.run(lambda server: worker_pb2_grpc.add_PrefillWorkerServicer_to_server(servicer, server), stop)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    return worker_parser("prefill", parser)


def main_from_args(args: argparse.Namespace) -> int:
    return run_worker("prefill", serve, args)


def main() -> int:
    return main_from_args(build_parser().parse_args())
