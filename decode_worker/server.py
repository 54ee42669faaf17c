"""``pdserve decode``: a decode worker process."""

from __future__ import annotations

import argparse
import asyncio

import torch

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.thread import EngineThread
from common.worker.faults import fault_threshold
from common.kv_transfer.select import decode_receivers
from common.process.metrics import Metrics
from common.process.options import ProcessOptions
from common.worker.config import WorkerConfig
from common.worker.main import run_worker, worker_parser
from common.worker.process import WorkerProcess
from common.worker.state import warm_up
from decode_worker.servicer import DecodeServicer
from decode_worker.streams import StreamHub
from wire.v1 import worker_pb2_grpc

SERVICE = "pdserve.v1.DecodeWorker"


async def serve(engine_config: EngineConfig, worker: WorkerConfig, options: ProcessOptions) -> None:
    worker_id = worker.resolved_id("decode")
    receivers = decode_receivers(worker_id, worker.host, torch.device(engine_config.device))
    engine = LLMEngine(engine_config, receivers.storage)
    warm_up(engine, worker.cost_model, worker.cost_model_cache)
    metrics = Metrics("decode")
    hub = StreamHub(asyncio.get_running_loop(), metrics)
    process = WorkerProcess("decode", SERVICE, engine, worker_id, worker, options, metrics,
                            kv_receives=receivers.names)
    thread = EngineThread(engine, step_listener=hub.on_step, on_death=process.engine_died,
                          fail_after_steps=fault_threshold("engine_thread_dies", worker_id))
    thread.start()
    servicer = DecodeServicer(thread, hub, receivers, metrics)
    process.on_drain.append(servicer.start_draining)

    async def stop() -> None:
        hub.shutdown()
        await asyncio.to_thread(thread.stop)
        receivers.close()  # after the engine thread: nothing touches the pool any more

    await process.run(lambda server: worker_pb2_grpc.add_DecodeWorkerServicer_to_server(servicer, server), stop)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    return worker_parser("decode", parser)


def main_from_args(args: argparse.Namespace) -> int:
    return run_worker("decode", serve, args)


def main() -> int:
    return main_from_args(build_parser().parse_args())
