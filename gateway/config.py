"""The gateway's configuration: one frozen dataclass whose defaults are the CLI's defaults."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from common.slo.policy import policy
from common.model.presets import DEFAULT_PRESET, MODEL_NAMES
from gateway.stream_interval import StreamInterval


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    model: str | None = None  # checkpoint directory for the tokenizer; None = embedded preset
    preset: str = DEFAULT_PRESET
    max_model_len: int | None = None  # None: the model's limit
    heartbeat_ms: int = 500  # workers are told to heartbeat this often
    worker_timeout_ms: int = 1500  # a worker silent this long leaves routing
    worker_stall_ms: int = 30000  # a worker with work that finishes no step this long leaves routing
    policy: str = "scorpio"  # fcfs | scorpio | ttft_guard | tpot_guard: which guards admit requests here
    default_ttft_ms: int = 0  # for requests that give none (0: no TTFT objective)
    default_tpot_ms: int = 0
    slo_classes: str = ""  # named classes name:ttft_ms:tpot_ms,... requests may refer to by SLO.name
    api_keys: str = ""  # JSON file of tenants, their API keys and quotas; empty: no authentication
    registry_port: int = 0  # where workers register: 0 = the public port; its own port for mutual TLS
    max_prompt_bytes: int = 0  # longer prompt text is refused untokenized; 0: what can fit max_model_len
    slo_target: float = 0.99  # share of admitted requests that must meet both SLOs: the guards' margins are steered to it
    http_port: int = 0  # the OpenAI-compatible HTTP server's port; 0: none
    served_model_name: str = ""  # the model's name in the OpenAI API; empty: the preset's, or the checkpoint's directory
    prefill_routing: str = "kv_aware"  # kv_aware: queue and prefix-cache hits weighed together | round_robin
    # on: a request no prefill worker is predicted to prefill in time is prefilled by its decode
    # worker, when that one predicts it in time (common/slo/local_prefill.py; TTFT-guarded policies) | off
    local_prefill: str = "on"
    # a guarded policy refuses new requests while the event loop's thread is busy more than this
    # share of its time (gateway/front_capacity.py: from 0.05 below it, all from 0.05 above); 0: never
    busy_limit: float = 0.9
    # how far apart a stream's token messages may be held, gathering tokens (gateway/stream_interval.py):
    # auto (none while the event loop is lightly busy, up to 25 ms as it fills) or milliseconds, 0: never
    stream_interval_ms: str = "auto"
    # times a request whose decode worker is lost after its first token resumes on another (its
    # prompt and the tokens sent so far prefilled again): 0: it ends UNAVAILABLE (gateway/streaming.py)
    migration_limit: int = 1

    def __post_init__(self) -> None:
        if self.preset not in MODEL_NAMES:
            raise ValueError(f"preset must be one of {', '.join(MODEL_NAMES)}, got {self.preset!r}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if not 0 <= self.http_port < 65536:
            raise ValueError(f"http_port must be in [0, 65535], got {self.http_port}")
        if not 0 <= self.registry_port < 65536:
            raise ValueError(f"registry_port must be in [0, 65535], got {self.registry_port}")
        if self.worker_timeout_ms <= self.heartbeat_ms:
            raise ValueError("worker_timeout_ms must be longer than heartbeat_ms")
        if self.worker_stall_ms <= self.heartbeat_ms:
            raise ValueError("worker_stall_ms must be longer than heartbeat_ms")
        if self.policy not in ("fcfs", "scorpio", "ttft_guard", "tpot_guard"):
            raise ValueError(f"policy must be fcfs, scorpio, ttft_guard or tpot_guard, got {self.policy!r}")
        if self.prefill_routing not in ("kv_aware", "round_robin"):
            raise ValueError(f"prefill_routing must be kv_aware or round_robin, got {self.prefill_routing!r}")
        if self.local_prefill not in ("on", "off"):
            raise ValueError(f"local_prefill must be on or off, got {self.local_prefill!r}")
        if not 0 < self.slo_target < 1:
            raise ValueError(f"slo_target must be in (0, 1), got {self.slo_target}")
        if not (self.busy_limit == 0 or 0.05 < self.busy_limit <= 1):
            raise ValueError(f"busy_limit must be 0 (off) or in (0.05, 1], got {self.busy_limit}")
        StreamInterval.parse(self.stream_interval_ms)  # validates it
        if self.migration_limit < 0:
            raise ValueError(f"migration_limit must be >= 0, got {self.migration_limit}")
        if self.max_prompt_bytes < 0:
            raise ValueError(f"max_prompt_bytes must be >= 0, got {self.max_prompt_bytes}")
        self.named_slos()  # validates the syntax

    def named_slos(self) -> dict[str, tuple[int, int]]:
        classes = {}
        for item in filter(None, self.slo_classes.split(",")):
            parts = item.split(":")
            if len(parts) != 3:
                raise ValueError(f"slo_classes entry {item!r} must be name:ttft_ms:tpot_ms")
            classes[parts[0]] = (int(parts[1]), int(parts[2]))
        return classes

    def model_name(self, model_dir: str) -> str:
        from pathlib import Path

        return self.served_model_name or (Path(model_dir).name if self.model else self.preset)

    @property
    def ttft_guard(self) -> bool:
        return policy(self.policy).ttft_guard


def add_gateway_args(parser: argparse.ArgumentParser) -> None:
    for field in dataclasses.fields(GatewayConfig):
        kind = int if isinstance(field.default, int) or field.name == "max_model_len" else (
            float if isinstance(field.default, float) else str)
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default,
                            help=f"(default: {field.default})")


def gateway_config_from_args(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(GatewayConfig)})
