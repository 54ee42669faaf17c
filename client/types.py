"""What client users see: plain dataclasses, no protobuf."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """``None`` leaves a value to the server (max_tokens 16, top_p 1.0, no seed)."""

    max_tokens: int | None = None
    temperature: float = 0.0
    top_k: int = 0
    top_p: float | None = None
    seed: int | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_ms: int = 0  # 0: the server's default
    tpot_ms: int = 0


@dataclass(frozen=True, slots=True)
class Chunk:
    """One streamed message: new tokens and their text; the last one has ``finish_reason``."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    received_at: float  # time.perf_counter() on arrival
    prompt_tokens: int = 0
    completion_tokens: int = 0
    timings: dict[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Completion:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float  # client side: first chunk minus send
    chunk_times: list[float]  # perf_counter() of each chunk
    timings: dict[str, float | str]


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    worker_id: str
    role: str
    address: str
    state: str
    free_blocks: int
    total_blocks: int


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    model: str
    max_model_len: int
    workers: list[WorkerInfo]

    def ready(self, role: str) -> int:
        return sum(1 for w in self.workers if w.role == role and w.state == "ready")
