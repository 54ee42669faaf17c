"""Configuration of a worker process (either role), beside its ``EngineConfig``."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

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

    def __post_init__(self) -> None:
        if self.kv_transport not in KV_TRANSPORTS:
            raise ValueError(f"kv_transport must be one of {', '.join(KV_TRANSPORTS)}, got {self.kv_transport!r}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")

    def resolved_id(self, role: str) -> str:
        return self.worker_id or f"{role}-{socket.gethostname()}-{os.getpid()}"

    def advertised(self, bound_port: int) -> str:
        host = self.advertise_host or (socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host)
        return f"{host}:{bound_port}"


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    d = WorkerConfig()
    group = parser.add_argument_group("worker")
    group.add_argument("--gateway", default=d.gateway, help="gateway address to register with")
    group.add_argument("--host", default=d.host)
    group.add_argument("--port", type=int, default=d.port)
    group.add_argument("--advertise-host", default=d.advertise_host,
                       help="host name the gateway and other workers reach this worker by (containers, pods)")
    group.add_argument("--worker-id", default=d.worker_id)
    group.add_argument("--kv-transport", default=d.kv_transport, choices=KV_TRANSPORTS)
    group.add_argument("--cost-model", default=d.cost_model, help="fitted cost models (pdserve profile --out)")


def worker_config_from_args(args: argparse.Namespace) -> WorkerConfig:
    return WorkerConfig(args.gateway, args.host, args.port, args.advertise_host, args.worker_id, args.kv_transport,
                        args.cost_model)
