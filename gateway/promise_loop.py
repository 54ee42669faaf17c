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
from common.slo.promise import ATTAINMENT_WINDOW_S, Attainment
from common.slo.tpot_guard import DecodeView
from gateway.request_state import Progress
from gateway.validation import ValidatedRequest


log = logging.getLogger("pdserve.gateway.promise")


def _explain_ttft_miss(req: ValidatedRequest, p: Progress, ttft_s: float) -> None:
    """Where a missed TTFT went: before the prefill call (decode admission), in it, beyond its prediction."""
    reply, promise = p.prefill_reply, p.promise
    predicted = None if promise.planned_ttft_s is None else promise.planned_ttft_s - (promise.prefill_sent - promise.arrived)
    log.info("TTFT SLO missed: %.0f ms of %d ms; prefill call sent after %.0f ms, took %.0f ms (predicted %s, "
             "worker %.0f ms, KV copy %.0f ms)", ttft_s * 1000, req.ttft_ms, (promise.prefill_sent - p.started) * 1000,
             p.prefill_call_s * 1000, "none" if predicted is None else f"{predicted * 1000:.0f} ms",
             reply.prefill_ms if reply else 0.0, reply.transfer_ms if reply else 0.0)


def _view(p: Progress) -> DecodeView | None:
    return p.decode.decode_view if p.decode is not None else None


class PromiseLoop:
    def __init__(self, metrics: Metrics | None = None, window_s: float = ATTAINMENT_WINDOW_S) -> None:
        self.metrics = metrics
        self.by_class: defaultdict[str, Attainment] = defaultdict(lambda: Attainment(window_s))
        self.by_worker: defaultdict[str, Attainment] = defaultdict(lambda: Attainment(window_s))

    def decoding(self, req: ValidatedRequest, p: Progress, at: float | None = None) -> None:
        """``req`` is still decoding with ``p.completion_tokens`` tokens out, the last of them here
        at ``at`` (perf_counter; default now) (``PromiseRecord.heard``)."""
        if p.migrations:  # resumed elsewhere: its gaps are the lost worker's, not what admitted it
            return
        p.promise.heard(p.completion_tokens, time.perf_counter() if at is None else at, req.tpot_ms / 1000, _view(p))

    def first_token(self, req: ValidatedRequest, p: Progress) -> None:
        """``req``'s first token is here after ``p.ttft_ms``: its TTFT, as its client will see it, to
        the headroom that admitted it (``PromiseRecord.first_token``)."""
        guard = p.prefill.ttft if p.prefill is not None else None
        if not p.promise.first_token(p.started + p.ttft_ms / 1000, req.ttft_ms / 1000,
                                     guard.headrooms if guard is not None else None):
            _explain_ttft_miss(req, p, p.promise.first_heard - p.promise.arrived)

    def served(self, req: ValidatedRequest, p: Progress) -> None:
        """``req`` finished normally with ``p.completion_tokens`` tokens: its TPOT to the ε that
        admitted it, its handoff to its decode worker's view (``PromiseRecord.finished``)."""
        if p.migrations:  # resumed elsewhere: its TPOT tells nothing of the ε that admitted it
            return
        now, last = time.perf_counter(), None
        if p.inbox is not None and p.inbox.first_arrival:
            p.promise.second_heard, last = p.inbox.first_arrival, p.inbox.last_arrival
        _, met = p.promise.finished(p.completion_tokens, now, req.tpot_ms / 1000, _view(p), last)
        met = met and (not req.ttft_ms or (p.promise.first_heard - p.promise.arrived) * 1000 <= req.ttft_ms)
        if not (req.ttft_ms or req.tpot_ms):
            return
        name = req.slo_class or f"{req.ttft_ms}:{req.tpot_ms}"
        self.by_class[name].observe(now, met)
        for worker in {w.worker_id: w for w in (p.prefill, p.decode) if w is not None}:  # once each (local prefill)
            self.by_worker[worker].observe(now, met)
        if self.metrics is not None:
            self._export(name, now, p)

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
