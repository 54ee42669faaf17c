"""The command line shared by both worker roles: worker, operations and engine flags → ``serve``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Awaitable, Callable

from common.engine.config import EngineConfig
from common.worker.cpu_plan import apply_to_this_process
from common.engine.args import add_engine_args, engine_config_from_args
from common.process.options import ProcessOptions, add_process_args, process_options_from_args
from common.rpc.server import run_main
from common.worker.config import WorkerConfig, add_worker_args, worker_config_from_args

Serve = Callable[[EngineConfig, WorkerConfig, ProcessOptions], Awaitable[None]]


def worker_parser(role: str, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog=f"pdserve {role}", description=f"Run a {role} worker.")
    add_worker_args(parser)
    add_process_args(parser)
    add_engine_args(parser)
    return parser


def run_worker(role: str, serve: Serve, args: argparse.Namespace) -> int:
    engine_config, worker = engine_config_from_args(args), worker_config_from_args(args)
    options = process_options_from_args(args)
    assignment = worker.core_assignment(worker.resolved_id(role))
    apply_to_this_process(assignment.cores, assignment.threads)  # before the engine's first computation

    async def main() -> None:
        logging.getLogger(__name__).info("%s", assignment.describe())
        await serve(engine_config, worker, options)

    run_main(main, role, options.log_format, options.log_level)
    return 0
