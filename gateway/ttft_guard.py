"""The TTFT guard's decisions at the gateway (``gateway.request_path``), on its perf_counter clock and
as the errors a request ends in: a refusal when the best prefill worker cannot return a request's
first token in time (the prediction itself: ``common.slo.ttft_guard``).

A worker's cost for a prompt is what it would compute of it: less its cached prefix.
A worker counts only if sending the request there makes no request already queued there late:
least slack first puts a newcomer ahead of every later deadline, and a promise made to an
admitted request is kept before a new one is made.
"""

from __future__ import annotations

import time

import grpc

from common.slo.guard_reading import Readings
from common.slo.ttft_guard import TtftGuard
from gateway import request_path
from gateway.errors import RequestError
from gateway.prefix_view import PromptBlocks
from gateway.registry import WorkerRecord, WorkerRegistry


def routable_guards(registry: WorkerRegistry) -> list[TtftGuard]:
    return [w.guard for w in registry.routable("prefill")]


def _blocks(prompt: int | PromptBlocks) -> PromptBlocks:
    return PromptBlocks([0] * prompt) if isinstance(prompt, int) else prompt  # a bare length: nothing cached


def last_useful_moment(registry: WorkerRegistry, prompt: int | PromptBlocks, deadline: float, ttft_s: float,
                       readings: Readings | None = None) -> float:
    """``request_path.last_useful`` now (perf_counter time), for a request with TTFT SLO ``ttft_s``
    (``readings``: the workers as an admission round read them)."""
    return request_path.last_useful(registry, _blocks(prompt), deadline, time.perf_counter(), ttft_s, readings)


def check_ttft(registry: WorkerRegistry, prompt: int | PromptBlocks, ttft_ms: int, started: float,
               decode: WorkerRecord | None = None) -> None:
    """``request_path.ttft_refusal`` now, for a request that arrived at ``started`` (perf_counter),
    as the RequestError it ends in."""
    refusal = request_path.ttft_refusal(registry, _blocks(prompt), ttft_ms / 1000, started, time.perf_counter(), decode)
    if refusal is not None:
        raise RequestError(grpc.StatusCode[refusal.code], refusal.message, reason=refusal.reason)
