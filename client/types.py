"""What client users see: plain frozen dataclasses, no protobuf."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """How to sample. ``None`` leaves a value to the server (max_tokens 16, top_p 1.0, no seed)."""

    max_tokens: int | None = None
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float | None = None
    seed: int | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()  # stop strings, matched on the detokenized text
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; 0: each token's; k (at most 20): and the k likeliest tokens'
    prompt_logprobs: int | None = None  # the same of each prompt token after the first (its prefill then not cached)
    # what the output must be: (kind, spec), kind one of json, json_schema, regex, choice, grammar
    # (``StructuredOutput`` in the gateway's proto); None: free text
    structured: tuple[str, str] | None = None
    n: int | None = None  # choices: their chunks interleave, each naming its ``Chunk.choice_index``


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A generated token's log-probability under the model's raw logits (before temperature, top-k
    and top-p), and the likeliest tokens' (token id, logprob), most likely first, when asked for."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency targets for one request; 0 takes the named class's value, or the server's default."""

    ttft_ms: float = 0  # milliseconds; fractions travel too (to the microsecond)
    tpot_ms: float = 0
    name: str = ""  # an SLO class configured at the gateway (``--slo-class``)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of a finished request."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens served from a prefill worker's prefix cache


@dataclass(frozen=True, slots=True)
class Chunk:
    """One streamed message: new tokens and their text; the last one has ``finish_reason``,
    ``usage`` and ``timings`` (gateway-side milliseconds, worker ids, KV transport)."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    usage: Usage | None
    timings: dict[str, float | str] | None
    received_at: float  # time.perf_counter() when the message arrived
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token id, when asked for (``SamplingOptions.logprobs``)
    choice_index: int = 0  # with ``SamplingOptions.n`` > 1: which choice it is of


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole request, collected from its chunks."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    usage: Usage | None
    timings: dict[str, float | str] | None
    ttft_s: float | None  # client side: first chunk's arrival minus the send; None without chunks
    chunk_times: tuple[float, ...]  # time.perf_counter() of each chunk's arrival
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token id, when asked for

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens if self.usage else 0

    @property
    def completion_tokens(self) -> int:
        return self.usage.completion_tokens if self.usage else 0


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as the gateway sees it."""

    worker_id: str
    role: str  # "prefill" | "decode"
    address: str
    state: str  # "ready" | "draining"
    free_blocks: int
    total_blocks: int
    running: int
    waiting: int
    device: str
    heartbeat_age_ms: float


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """The model, its limits, and every worker the gateway knows."""

    model: str
    max_model_len: int
    vocab_size: int
    block_size: int
    workers: tuple[WorkerInfo, ...]

    def ready(self, role: str) -> int:
        """How many workers of ``role`` are in state "ready"."""
        return sum(1 for w in self.workers if w.role == role and w.state == "ready")

    def has_ready(self, num_prefill: int, num_decode: int) -> bool:
        return self.ready("prefill") >= num_prefill and self.ready("decode") >= num_decode

    def describe(self) -> str:
        """E.g. ``"p0 prefill ready, d0 decode draining"``, or ``"no workers"``."""
        return ", ".join(f"{w.worker_id} {w.role} {w.state}" for w in self.workers) or "no workers"
