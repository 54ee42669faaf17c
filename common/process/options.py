"""Operational flags shared by the gateway and both worker roles."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from common.rpc.tls import TlsConfig

LOG_FORMATS = ("text", "json")


@dataclass(frozen=True, slots=True)
class ProcessOptions:
    metrics_port: int = 0  # Prometheus metrics over HTTP; 0: off
    metrics_host: str = "0.0.0.0"
    log_format: str = "text"  # text | json (one object per line, with request ids)
    log_level: str = "INFO"
    tls_cert: str = ""  # this process's certificate: TLS on its gRPC port
    tls_key: str = ""
    tls_ca: str = ""  # trust root for peers: with cert + key, mutual TLS between cluster processes
    drain_grace_s: float = 30.0  # on SIGTERM: how long in-flight requests may take to finish

    def __post_init__(self) -> None:
        if not 0 <= self.metrics_port < 65536:
            raise ValueError(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"log_format must be text or json, got {self.log_format!r}")
        if self.drain_grace_s < 0:
            raise ValueError(f"drain_grace_s must be >= 0, got {self.drain_grace_s}")
        _ = self.tls  # validates the TLS flags (pairs given together, files exist)

    @property
    def tls(self) -> TlsConfig:
        return TlsConfig(self.tls_cert, self.tls_key, self.tls_ca)


def add_process_args(parser: argparse.ArgumentParser) -> None:
    d = ProcessOptions()
    group = parser.add_argument_group("operations")
    group.add_argument("--metrics-port", type=int, default=d.metrics_port,
                       help="serve Prometheus metrics on this HTTP port (0: off)")
    group.add_argument("--metrics-host", default=d.metrics_host)
    group.add_argument("--log-format", default=d.log_format, choices=LOG_FORMATS)
    group.add_argument("--log-level", default=d.log_level, choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    group.add_argument("--tls-cert", default=d.tls_cert, help="PEM certificate of this process (enables TLS)")
    group.add_argument("--tls-key", default=d.tls_key, help="PEM private key of --tls-cert")
    group.add_argument("--tls-ca", default=d.tls_ca,
                       help="PEM CA bundle: with --tls-cert/--tls-key, mutual TLS between cluster processes")
    group.add_argument("--drain-grace-s", type=float, default=d.drain_grace_s,
                       help="on SIGTERM, how long in-flight requests may take to finish")


def process_options_from_args(args: argparse.Namespace) -> ProcessOptions:
    return ProcessOptions(args.metrics_port, args.metrics_host, args.log_format, args.log_level, args.tls_cert,
                          args.tls_key, args.tls_ca, args.drain_grace_s)
