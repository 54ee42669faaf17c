"""A request's state inside one engine. Only the scheduler changes it."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

from common.model.sampling_params import SamplingParams
from common.model.token_logprobs import TokenLogprobs


_UIDS = itertools.count()


class RequestStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5
    FINISHED_PREFILLED = 6  # prefill-only: first token sampled, KV held for hand-off


REFUSED = "refused"  # an output's finish reason when the engine refused the request (``AdmissionError``)
FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_PREFILLED: "prefilled",
}


@dataclass(slots=True, eq=False)  # identity, not field equality
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float = field(default_factory=time.monotonic)
    output_token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV is in the cache
    block_ids: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    prefill_only: bool = False  # finish after the first token and keep the KV blocks
    # Unique per Request object, even when a request id is reused: caches keyed by it (the CPU
    # decode stage) can never serve one request's KV to another.
    uid: int = field(default_factory=lambda: next(_UIDS))
    ttft_slo_ms: float = 0.0  # 0: no TTFT objective
    ttft_left_ms: float = 0.0  # of it, what was left on arrival here (0: all of it; a gateway spent the rest)
    tpot_slo_ms: float = 0.0  # 0: no TPOT objective
    first_token_at: float | None = None  # the engine's clock when its first token existed here (None: not yet)
    # Prefix caching: whether this engine computes the request's KV itself (not a committed
    # hand-off), the chained hashes of its full blocks worked out so far, and how many of its
    # blocks the prefix index names (its leading ones).
    cacheable: bool = False
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache when it was (last) admitted
    block_hashes: list[int] = field(default_factory=list)
    num_registered: int = 0
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # of prompt positions 1.., when asked for

    @property
    def ttft_deadline(self) -> float:
        if not self.ttft_slo_ms:
            return float("inf")
        return self.arrival_time + (self.ttft_left_ms or self.ttft_slo_ms) / 1000

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens whose KV is not in the cache yet: 1 for a decoding request, more for a prompt (its chunks)."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_token_ids) + self.params.max_tokens

    def token_ids(self, start: int, end: int) -> list[int]:
        """Tokens ``[start, end)`` of prompt + output, without copying the whole sequence."""
        prompt_len = len(self.prompt_token_ids)
        if end <= prompt_len:
            return self.prompt_token_ids[start:end]
        if start >= prompt_len:
            return self.output_token_ids[start - prompt_len:end - prompt_len]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - prompt_len]


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one step produced for one request: its new tokens and, at the end, why it ended."""

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None = None
    error: str | None = None
    kv_block_ids: tuple[int, ...] = ()  # prefill-only: the held blocks holding the prompt's KV
    cached_tokens: int = 0  # with the first token: prompt tokens whose KV came from the prefix cache
    logprobs: tuple[TokenLogprobs, ...] = ()  # one per new token, when its sampling asks for them
    prompt_logprobs: tuple[TokenLogprobs, ...] = ()  # with the first token: each prompt token's after the first


def left_on_arrival(ttft_left_ms: float, received_at: float, now: float) -> float:
    """What is left now of a TTFT budget that had ``ttft_left_ms`` left when the call arrived at
    ``received_at``: a call waits for the engine's turn (a step, a whole prefill forward) and that
    wait is the request's. 0 (no TTFT SLO) stays 0; a budget spent leaves a token 1 µs."""
    if not ttft_left_ms:
        return 0.0
    return max(0.001, ttft_left_ms - (now - received_at) * 1000)
