"""The gateway's closed loop on its promise (``common.slo.promise``): every request it admitted
reports its TTFT at its first token and its TPOT at its last (and a TPOT already late on the
way); they steer the margins of the guards that admitted it (the prefill worker's TTFT headroom,
the decode worker's ε). Served requests count toward the attainment of their SLO class and of
both workers, over a sliding window, exported as metrics."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from common.process.metrics import Metrics
from common.slo.promise import ATTAINMENT_WINDOW_S, Attainment, decoding_late, outcome
from common.slo.tpot_guard import handoff_extra
from gateway.request_state import Progress
from gateway.validation import ValidatedRequest


log = logging.getLogger("pdserve.gateway.promise")


def _explain_ttft_miss(req: ValidatedRequest, p: Progress, ttft_s: float) -> None:
    """Where a missed TTFT went: before the prefill call (decode admission), in it, beyond its prediction."""
    reply = p.prefill_reply
    predicted = p.prefill_predicted_s
    log.info("TTFT SLO missed: %.0f ms of %d ms; prefill call sent after %.0f ms, took %.0f ms (predicted %s, "
             "worker %.0f ms, KV copy %.0f ms)", ttft_s * 1000, req.ttft_ms, (p.prefill_sent - p.started) * 1000,
             p.prefill_call_s * 1000, "none" if predicted is None else f"{predicted * 1000:.0f} ms",
             reply.prefill_ms if reply else 0.0, reply.transfer_ms if reply else 0.0)


class PromiseLoop:
    def __init__(self, metrics: Metrics | None = None, window_s: float = ATTAINMENT_WINDOW_S) -> None:
        self.metrics = metrics
        self.by_class: defaultdict[str, Attainment] = defaultdict(lambda: Attainment(window_s))
        self.by_worker: defaultdict[str, Attainment] = defaultdict(lambda: Attainment(window_s))

    def decoding(self, req: ValidatedRequest, p: Progress, at: float | None = None) -> None:
        """``req`` is still decoding with ``p.completion_tokens`` tokens out, the last of them here
        at ``at`` (perf_counter; default now): a TPOT already late raises its decode worker's ε now
        (once a request), not when it finishes."""
        if p.late_told or not req.tpot_ms or p.decode is None or p.decode.decode_view is None:
            return
        since_first = (time.perf_counter() if at is None else at) - p.started - p.ttft_ms / 1000
        tpot_slo_s = req.tpot_ms / 1000
        p.late_told = decoding_late(p.completion_tokens - 1, since_first, tpot_slo_s,
                                    p.decode.view.epsilons.of(tpot_slo_s), p.decode_epsilon)

    def first_token(self, req: ValidatedRequest, p: Progress) -> None:
        """``req``'s first token is here after ``p.ttft_ms``: its TTFT to the headroom that admitted it."""
        ttft_slo_s = req.ttft_ms / 1000
        headroom = (p.prefill.guard.headrooms.of(ttft_slo_s) if p.prefill is not None and p.prefill.ttft is not None
                    and ttft_slo_s else None)
        ttft_s = p.ttft_ms / 1000 + req.delivery_s  # as its client will see it
        predicted = p.prefill_predicted_s  # its call's, under the headroom, when it was sent
        planned = None if predicted is None else p.prefill_sent - p.started + predicted + req.delivery_s
        if not outcome(ttft_s, ttft_slo_s, headroom, p.prefill_headroom, predicted_s=planned):
            _explain_ttft_miss(req, p, ttft_s)

    def served(self, req: ValidatedRequest, p: Progress) -> None:
        """``req`` finished normally with ``p.completion_tokens`` tokens: its TPOT to the ε that admitted it."""
        now = time.perf_counter()
        ttft_s = p.ttft_ms / 1000
        tokens = p.completion_tokens
        tpot_s = (now - p.started - ttft_s) / (tokens - 1) if tokens > 1 else 0.0
        epsilon = (p.decode.view.epsilons.of(req.tpot_ms / 1000) if p.decode is not None
                   and p.decode.decode_view is not None and req.tpot_ms else None)
        if tokens <= 1:
            epsilon = None  # it never decoded there
        self._handoff(p, tokens)
        met = outcome(tpot_s, req.tpot_ms / 1000, epsilon, p.decode_epsilon, warned=p.late_told)
        met = met and (not req.ttft_ms or (ttft_s + req.delivery_s) * 1000 <= req.ttft_ms)
        if not (req.ttft_ms or req.tpot_ms):
            return
        name = req.slo_class or f"{req.ttft_ms}:{req.tpot_ms}"
        self.by_class[name].observe(now, met)
        for worker in {w.worker_id: w for w in (p.prefill, p.decode) if w is not None}:  # once each (local prefill)
            self.by_worker[worker].observe(now, met)
        if self.metrics is not None:
            self._export(name, now, p)

    @staticmethod
    def _handoff(p: Progress, tokens: int) -> None:
        """What its handoff cost beyond a step, for the decode worker's next reservations."""
        if p.decode is None or p.decode.decode_view is None or p.inbox is None or not p.first_sent:
            return
        extra = handoff_extra(p.first_sent, p.inbox.first_arrival, p.inbox.last_arrival, tokens)
        if extra is not None:
            p.decode.view.handoffs.observe(extra)

    def _export(self, name: str, now: float, p: Progress) -> None:
        assert self.metrics is not None
        attained = self.by_class[name].value(now)
        if attained is not None:
            self.metrics.attainment.labels(self.metrics.role, name).set(attained)
        margins = []
        if p.prefill is not None and p.prefill.ttft is not None:
            margins.append(("ttft_headroom", p.prefill.worker_id, p.prefill.guard.headrooms))
            self.metrics.margin.labels(self.metrics.role, "ttft_boundary", p.prefill.worker_id, "0").set(
                p.prefill.guard.boundary.margin)  # one for all classes
        if p.decode is not None and p.decode.decode_view is not None:
            margins.append(("tpot_epsilon", p.decode.worker_id, p.decode.view.epsilons))
            epsilons = p.decode.view.epsilons
            if epsilons.ceiling < float("inf"):  # what its steps let ε be (slo_ms 0: all classes)
                self.metrics.margin.labels(self.metrics.role, "tpot_ceiling", p.decode.worker_id, "0").set(
                    epsilons.ceiling)
            if epsilons.rest is not None:
                self.metrics.margin.labels(self.metrics.role, "tpot_start", p.decode.worker_id, "0").set(epsilons.rest)
        for kind, worker_id, by_class in margins:
            for slo_ms, margin in by_class.items():
                self.metrics.margin.labels(self.metrics.role, kind, worker_id, f"{slo_ms:g}").set(margin)
