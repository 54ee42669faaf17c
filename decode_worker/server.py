"""``pdserve decode``: a decode worker process."""

from __future__ import annotations

import argparse
import asyncio

import torch

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.thread import EngineThread
from common.model.kv_cache import StorageFactory, zeros_storage
from common.kv_transfer.collective import CollectiveReceiver
from common.worker.faults import fault_threshold
from common.kv_transfer.cuda_ipc import export_pool
from common.kv_transfer.pairing import decode_receives
from common.kv_transfer.shm import create_shared_tensor, shm_available, unlink_shared
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


def _storage(device: torch.device, shm_name: str | None) -> StorageFactory:
    if shm_name is None:
        return zeros_storage
    return lambda shape, dtype, _device: create_shared_tensor(shm_name, shape, dtype)


async def serve(engine_config: EngineConfig, worker: WorkerConfig, options: ProcessOptions) -> None:
    worker_id = worker.resolved_id("decode")
    device = torch.device(engine_config.device)
    shm_name = f"pdserve-kv-{worker_id}" if device.type == "cpu" and shm_available() else None
    engine = LLMEngine(engine_config, _storage(device, shm_name))
    warm_up(engine, worker.cost_model, worker.cost_model_cache)
    metrics = Metrics("decode")
    hub = StreamHub(asyncio.get_running_loop(), metrics)
    process = WorkerProcess("decode", SERVICE, engine, worker_id, worker, options, metrics,
                            kv_receives=decode_receives(device.type, shm_name is not None))
    thread = EngineThread(engine, step_listener=hub.on_step, on_death=process.engine_died,
                          fail_after_steps=fault_threshold("engine_thread_dies", worker_id))
    thread.start()
    servicer = DecodeServicer(thread, hub, CollectiveReceiver(worker.host, device), shm_name,
                              export_pool(engine.cache.data) if device.type == "cuda" else None, metrics)
    process.on_drain.append(servicer.start_draining)

    async def stop() -> None:
        hub.shutdown()
        await asyncio.to_thread(thread.stop)
        if shm_name:
            unlink_shared(shm_name)

    await process.run(lambda server: worker_pb2_grpc.add_DecodeWorkerServicer_to_server(servicer, server), stop)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    return worker_parser("decode", parser)


def main_from_args(args: argparse.Namespace) -> int:
    return run_worker("decode", serve, args)


def main() -> int:
    return main_from_args(build_parser().parse_args())
