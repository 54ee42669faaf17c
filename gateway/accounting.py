"""Per-request figures for the gateway's metrics and its one log line per finished request.

Definitions as in DESIGN.md §6: TTFT from the request's arrival to its first token, TPOT =
(E2E − TTFT) / (output tokens − 1), and a request meets its SLOs when both hold.
"""

from __future__ import annotations

import logging
import time

from common.process.metrics import Metrics
from gateway.validation import ValidatedRequest
from wire.v1 import gateway_pb2

log = logging.getLogger("pdserve.gateway.requests")


class RequestAccounting:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.started = time.perf_counter()
        self.first_token_s: float | None = None
        self.tokens = 0
        self.workers = ""  # where it ran, as its last message's timings say

    def on_message(self, message: gateway_pb2.GenerateResponse) -> None:
        if message.token_ids and self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started
            self.metrics.ttft.labels("gateway").observe(self.first_token_s)
        self.tokens += len(message.token_ids)
        if message.finish_reason:
            t = message.timings
            self.workers = f", prefill on {t.prefill_worker or '-'}, decode on {t.decode_worker or '-'}"

    def finished(self, req: ValidatedRequest, reason: str) -> None:
        e2e = time.perf_counter() - self.started
        ttft = self.first_token_s if self.first_token_s is not None else e2e
        tpot = (e2e - ttft) / (self.tokens - 1) if self.tokens > 1 else 0.0
        self.metrics.finished(reason)
        self.metrics.e2e.labels("gateway").observe(e2e)
        if self.tokens > 1:
            self.metrics.tpot.labels("gateway").observe(tpot)
        self.metrics.generation_tokens.labels("gateway").inc(self.tokens)
        met = (not req.ttft_ms or ttft * 1000 <= req.ttft_ms) and (not req.tpot_ms or tpot * 1000 <= req.tpot_ms)
        if req.slo_class:
            self.metrics.slo.labels("gateway", req.slo_class, "met" if met else "missed").inc()
        # ttft counts from the handler; "allowed" is what its plan set aside for its front (gateway.delivery)
        log.info("finished: %s, %d tokens, ttft %.1f ms, tpot %.2f ms, e2e %.1f ms, allowed %.1f ms%s%s", reason,
                 self.tokens, ttft * 1000, tpot * 1000, e2e * 1000, req.delivery_s * 1000, self.workers,
                 f", SLO {'met' if met else 'missed'}" if req.slo_class else "", extra={"status": reason})

    def failed(self, code: str, reason: str, message: str, before_work: bool) -> None:
        self.metrics.finished(code)
        if before_work:
            self.metrics.rejected(reason)
        log.log(_level(code, before_work), "ended with %s (%s): %s", code, reason, message,
                extra={"status": code, "reason": reason})


def _level(code: str, before_work: bool) -> int:
    """A load refusal (RESOURCE_EXHAUSTED before any work) is counted (pdserve:request_rejections)
    and logged at debug: past capacity they come by the hundred a second, and a line each costs a
    sizeable share of what a refusal costs the event loop. Every other ending is logged at info."""
    return logging.DEBUG if before_work and code == "RESOURCE_EXHAUSTED" else logging.INFO
