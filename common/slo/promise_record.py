"""One admitted request as the closed loop judges it: the margins that admitted it, what its
admission predicted, and the moments its latencies count from. The gateway's record of a request
(``gateway.request_state.Progress``) and the simulator's (``simulator.flight.Flight``) each hold
one, so both tell their guards the same quantities, by the same names, through the same code::

    prefill_sent (planned TTFT, headroom) ─▶ first_token (TTFT → its headroom)
      ─▶ heard (a TPOT late on the way → ε, once) ─▶ finished (TPOT → ε; its handoff → the view)

Plain code of time and state: every moment is the caller's, on the clock its guards read.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.slo.class_margins import ClassMargins
from common.slo.promise import decoding_late, outcome
from common.slo.tpot_guard import DecodeView, handoff_extra


@dataclass(slots=True)
class PromiseRecord:
    arrived: float = 0.0  # when its TTFT counts from (its planned start: the client's TTFT)
    prefill_sent: float = 0.0  # its (last) prefill call went out
    planned_ttft_s: float | None = None  # its TTFT as that call's prediction, under the headroom, made it
    ttft_headroom: float | None = None  # its class's TTFT headroom when that call went out
    tpot_epsilon: float | None = None  # the ε its reservation applied (1: the idle rule admitted it)
    late_told: bool = False  # its TPOT was late on the way and the loop heard (once a request)
    first_heard: float = 0.0  # its first token reached the gateway
    first_sent: float = 0.0  # ... and went on to the client
    second_heard: float = 0.0  # its second token reached the gateway (0: not yet)

    def prefill_going(self, now: float, predicted_s: float | None, headrooms: ClassMargins, ttft_s: float) -> None:
        """Its prefill call goes out ``now``, predicted (calibrated, under its class's headroom)
        to answer in ``predicted_s`` (None: no prediction)."""
        self.prefill_sent = now
        self.planned_ttft_s = None if predicted_s is None else now - self.arrived + predicted_s
        self.ttft_headroom = headrooms.margin(ttft_s)

    def first_token(self, now: float, ttft_slo_s: float, headrooms: ClassMargins | None) -> bool:
        """Its first token is here ``now``: its TTFT to the headroom that admitted it (None: no
        TTFT guard there). Whether it met its TTFT SLO."""
        self.first_heard = self.first_sent = now
        headroom = headrooms.of(ttft_slo_s) if headrooms is not None and ttft_slo_s else None
        return outcome(now - self.arrived, ttft_slo_s, headroom, self.ttft_headroom, predicted_s=self.planned_ttft_s)

    def heard(self, tokens: int, now: float, tpot_slo_s: float, view: DecodeView | None) -> None:
        """It has ``tokens`` tokens out, the last heard ``now``, and is still decoding: a TPOT
        already late raises its decode worker's ε now (once a request), not when it finishes."""
        if self.late_told or not tpot_slo_s or view is None:
            return
        self.late_told = decoding_late(tokens - 1, now - self.first_heard, tpot_slo_s, view.epsilons.of(tpot_slo_s),
                                       self.tpot_epsilon)

    def finished(self, tokens: int, now: float, tpot_slo_s: float, view: DecodeView | None,
                 last_heard: float | None = None) -> tuple[float, bool]:
        """It ended ``now`` with ``tokens`` tokens, the last heard at ``last_heard`` (None: now):
        what its handoff cost beyond a step to its decode worker's view, its TPOT to the ε that
        admitted it. Its TPOT, and whether that met its SLO."""
        tpot_s = (now - self.first_heard) / (tokens - 1) if tokens > 1 else 0.0
        if view is None:
            return tpot_s, not tpot_slo_s or tpot_s <= tpot_slo_s
        last = now if last_heard is None else last_heard
        extra = handoff_extra(self.first_sent, self.second_heard, last, tokens) if self.second_heard else None
        if extra is not None:
            view.handoffs.observe(extra)
        epsilon = view.epsilons.of(tpot_slo_s) if tokens > 1 and tpot_slo_s else None  # (one token: it never decoded)
        return tpot_s, outcome(tpot_s, tpot_slo_s, epsilon, self.tpot_epsilon, warned=self.late_told)
