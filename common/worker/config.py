"""Configuration of a worker process (either role), beside its ``EngineConfig``."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

from common.worker.cpu_plan import CoreAssignment, available_cores, parse_cores, plan_cores

KV_TRANSPORTS = ("auto", "shm", "grpc", "nccl", "cuda_ipc")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    gateway: str = "127.0.0.1:50051"  # the gateway's registry (its public port)
    host: str = "127.0.0.1"  # to listen on
    port: int = 0  # 0 picks a free port
    advertise_host: str = ""  # the name others reach it by; empty: --host, or the hostname when that is a wildcard
    worker_id: str = ""  # empty: role-hostname-pid
    kv_transport: str = "auto"  # prefill side: how KV blocks reach decode workers
    cost_model: str = ""  # JSON from `pdserve profile`; empty: profile at start when a guard needs it
    cost_model_cache: str = ""  # where measured fits are kept per (model, dtype, device, threads); "off": never
    cpu_cores: str = ""  # cores to run on, e.g. "0-3"; empty: the cores this process was started with
    threads: int = 0  # torch compute threads; 0: one per core it runs on
    cpu_share: str = ""  # "I/N": worker I of N on this host takes its share of the cores (pdserve up's plan)

    def __post_init__(self) -> None:
        if self.kv_transport not in KV_TRANSPORTS:
            raise ValueError(f"kv_transport must be one of {', '.join(KV_TRANSPORTS)}, got {self.kv_transport!r}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")
        if self.cpu_cores and self.cpu_share:
            raise ValueError("give --cpu-cores or --cpu-share, not both")
        self.core_assignment("worker")  # validates both

    def core_assignment(self, name: str) -> CoreAssignment:
        """Where this worker's compute runs: its share of the host's plan, the cores given, or
        every core it was started with; one thread per core unless ``threads`` says otherwise."""
        if self.cpu_share:
            index, count = _parse_share(self.cpu_share)
            names = [f"worker-{i}" for i in range(count)]
            planned = plan_cores(names, threads=self.threads or None)[index + 1]
            return CoreAssignment(name, planned.cores, planned.threads)
        cores = parse_cores(self.cpu_cores) if self.cpu_cores else ()
        return CoreAssignment(name, cores, self.threads or len(cores or available_cores()))

    def resolved_id(self, role: str) -> str:
        return self.worker_id or f"{role}-{socket.gethostname()}-{os.getpid()}"

    def advertised(self, bound_port: int) -> str:
        host = self.advertise_host or (socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host)
        return f"{host}:{bound_port}"


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    d = WorkerConfig()
    group = parser.add_argument_group("worker")
    group.add_argument("--gateway", default=d.gateway,
                       help="the gateways to register and heartbeat with: host:port[,host:port...], or a name "
                            "that resolves to each of them (a headless Service)")
    group.add_argument("--host", default=d.host)
    group.add_argument("--port", type=int, default=d.port)
    group.add_argument("--advertise-host", default=d.advertise_host,
                       help="host name the gateway and other workers reach this worker by (containers, pods)")
    group.add_argument("--worker-id", default=d.worker_id)
    group.add_argument("--kv-transport", default=d.kv_transport, choices=KV_TRANSPORTS)
    group.add_argument("--cost-model", default=d.cost_model, help="fitted cost models (pdserve profile --out)")
    group.add_argument("--cost-model-cache", default=d.cost_model_cache,
                       help="directory of measured cost models reused across starts (default: under the "
                            "pdserve cache; 'off': measure at every start)")
    group.add_argument("--cpu-cores", default=d.cpu_cores, help="CPU cores to run on, e.g. 0-3,6 (default: all "
                       "this process may use; pdserve up gives each worker its own)")
    group.add_argument("--threads", type=int, default=d.threads, help="torch compute threads (0: one per core)")
    group.add_argument("--cpu-share", default=d.cpu_share, metavar="I/N",
                       help="this is worker I of N on this host: run on its share of the cores, as pdserve up plans")


def worker_config_from_args(args: argparse.Namespace) -> WorkerConfig:
    return WorkerConfig(args.gateway, args.host, args.port, args.advertise_host, args.worker_id, args.kv_transport,
                        args.cost_model, args.cost_model_cache, args.cpu_cores, args.threads, args.cpu_share)


def _parse_share(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ValueError(f"cpu_share must look like I/N (worker I of N), got {text!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"cpu_share {text!r}: I must be in [0, N)")
    return i, n
