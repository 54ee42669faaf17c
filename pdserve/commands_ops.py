"""``pdserve health``: the probe containers and scripts use (exit 0 only when SERVING)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def register(sub: Any) -> None:
    health = sub.add_parser("health", help="check a pdserve process's gRPC health service (exit 0 iff SERVING)")
    health.add_argument("--address", default="127.0.0.1:50051", help="host:port of the process's gRPC server")
    health.add_argument("--service", default="",
                        help='"" (the process is up), pdserve.v1.Gateway (it has workers to route to), '
                             "pdserve.v1.PrefillWorker or pdserve.v1.DecodeWorker")
    health.add_argument("--tls-ca", default="", help="PEM CA bundle to verify the server (enables TLS)")
    health.add_argument("--tls-cert", default="", help="client certificate, for workers under mutual TLS")
    health.add_argument("--tls-key", default="")
    health.add_argument("--timeout-s", type=float, default=3.0)
    health.set_defaults(handler=_health)


def _health(args: argparse.Namespace) -> int:
    if args.tls_ca:
        read = lambda path: Path(path).read_bytes() if path else None  # noqa: E731
        credentials = grpc.ssl_channel_credentials(read(args.tls_ca), read(args.tls_key), read(args.tls_cert))
        channel = grpc.secure_channel(args.address, credentials)
    else:
        channel = grpc.insecure_channel(args.address)
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout_s)
        except grpc.RpcError as exc:
            print(f"{args.address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address} {args.service or '(overall)'}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1
