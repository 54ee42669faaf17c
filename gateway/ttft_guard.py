"""The TTFT guard's decision at the gateway: a refusal when the best prefill worker cannot
return a request's first token in time (the prediction itself: ``common.slo.ttft_guard``).

A worker's cost for a prompt is what it would compute of it: less its cached prefix.
A worker counts only if sending the request there makes no request already queued there late:
least slack first puts a newcomer ahead of every later deadline, and a promise made to an
admitted request is kept before a new one is made.
"""

from __future__ import annotations

import time

import grpc

from common.slo.ttft_decision import last_useful_admission, ttft_refusal
from common.slo.guard_reading import Readings
from common.slo.ttft_guard import TtftGuard
from gateway.errors import RequestError
from gateway.prefix_view import PromptBlocks
from gateway.registry import WorkerRecord, WorkerRegistry


def routable_guards(registry: WorkerRegistry) -> list[TtftGuard]:
    return [w.guard for w in registry.routable("prefill")]


def _guards_and_tokens(registry: WorkerRegistry, prompt: int | PromptBlocks,
                       decode: WorkerRecord | None = None) -> tuple[list[TtftGuard], int | list[int]]:
    """The guards of the routable prefill workers and of the decode workers that may prefill the
    request themselves (``WorkerRegistry.local_prefills``: ``decode`` alone when given), and what
    each would compute of the prompt (a ``PromptBlocks`` less each worker's cached prefix; a bare
    length as it is)."""
    workers = registry.routable("prefill") + registry.local_prefills(decode)
    tokens = prompt if isinstance(prompt, int) else [prompt.uncached_tokens(w.prefix) for w in workers]
    return [w.guard for w in workers], tokens


def last_useful_moment(registry: WorkerRegistry, prompt: int | PromptBlocks, deadline: float, ttft_s: float,
                       readings: Readings | None = None) -> float:
    """``last_useful_admission`` over the workers that may prefill the request, now (perf_counter
    time), for a request with TTFT SLO ``ttft_s`` (``readings``: the workers as an admission round
    read them)."""
    return last_useful_admission(*_guards_and_tokens(registry, prompt), deadline, time.perf_counter(), ttft_s,
                                 readings)


def check_ttft(registry: WorkerRegistry, prompt: int | PromptBlocks, ttft_ms: int, started: float,
               decode: WorkerRecord | None = None) -> None:
    """RESOURCE_EXHAUSTED, naming the reason, when no worker that may prefill it (the prefill
    workers; ``decode``, holding its reservation, or before one is made any decode worker, with
    local prefill on) is predicted to return the first token of a request that arrived at
    ``started`` (perf_counter) within ``ttft_ms``."""
    reason = ttft_refusal(*_guards_and_tokens(registry, prompt, decode), ttft_ms / 1000, started,
                          time.perf_counter())
    if reason is not None:
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"TTFT SLO of {ttft_ms} ms is unattainable: {reason}",
                           reason="ttft_unattainable")
