"""SCORPIO's TPOT guard at admission: may one more request decode here without breaking the
TPOT SLOs of those already here (running, or reserved and awaiting their commit)?

The question is about each request's whole decode, not the next step: the set shrinks as
requests finish, and every context grows a token per step it runs in. So the decode is projected
forward (``projected_tpots``): under credit batching each request runs at rate
``TRP = tightest SLO / its SLO`` (1 without an SLO), a step costs the fitted model at the virtual
batch size ``Σ TRP`` and the mean length, and requests leave when their tokens run out (at most
``max_tokens``: an earlier EOS only helps). Then::

    admitted ⇔ for every request r with a TPOT SLO:  projected TPOT(r) · ε(r) ≤ SLO(r)
               and, if that makes k more present (running, waiting, reserved) than
               max_batch_size, k of them are projected to leave before the newcomer can commit
    idle (nothing running, nothing reserved) ⇔ alone + handoff / remaining(new) ≤ SLO(new)
    never (whatever the load) ⇔ SLO(new) < alone

ε is the margin the gateway's closed loop steers (``common.slo.promise``; it starts at
``TPOT_MARGIN``), one per TPOT SLO class: each request is held to its own class's, and no class's
past what the worker's own steps have shown (``common.slo.epsilon_bound``). An idle worker never
refuses on a model's word or a margin alone: ``alone``, one request's step as this worker measures
it now (its fresh batch-1 steps, else the least it has shown: ``StepEvidence.alone_now_s``),
decides, under no margin, so a margin can never shut a worker out; the steps it then runs correct
the model (``common.slo.calibration``).

A TPOT as a client measures it runs from the first token to the last, and the first token comes
from the prefill: between it and the first decode step lies the handoff (the commit's call, the KV
taken in, the step under way when it lands), a gap no step model sees. Spread over a short
output it is the difference between meeting a tight SLO and missing it, so a newcomer's projection
carries it (``Decoding.lag_s``): what the gateway has seen this worker's handoffs cost beyond a
step (``handoff_extra``, ``DecodeView.handoff_s``), over the tokens it will share it between.

A decision of numbers only: the caller hands over what it holds and its clocks' readings
(through ``calibration``), so a simulator on a virtual clock drives the same decisions.
``DecodeView`` is the gateway's side: what it routed to one decode worker, and ε for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from common.slo.cost_models import DecodeModel
from common.slo.credit import virtual_batch_size
from common.slo.promise import DEFAULT_TARGET
from common.slo.calibration import WindowQuantile
from common.slo.class_margins import ClassMargins

TPOT_MARGIN = 1.3  # ε where the closed loop starts: a step predicted this much slower still meets the SLO
# ... at most; a raised ε returns toward where the worker's steps say it starts, halving its distance in this
# time: slow beside the outcomes a loaded worker reports (many a second), fast beside a whole overload
EPSILON_HALF_LIFE_S = 120.0


def _uncalibrated(seconds: float) -> float:
    return seconds


@dataclass(frozen=True, slots=True)
class Decoding:
    """One request as the projection sees it."""

    slo_s: float  # its TPOT SLO in seconds; 0: none (it runs every step)
    remaining: int  # output tokens it may still produce
    length: int  # tokens in its context now
    epsilon: float | None = None  # the margin its TPOT is held to; None: the one the check is given
    lag_s: float = 0.0  # seconds its TPOT still carries besides its steps (a handoff ahead of it)


def guarded_slos(running_ms: Mapping[str, float], reserved_ms: Mapping[str, float]) -> dict[str, float]:
    """The TPOT SLOs (seconds) admission must keep, by request id: the running requests' and
    the reserved ones'. 0 ms is no SLO and leaves a request out."""
    return {rid: ms / 1000 for rid, ms in {**running_ms, **reserved_ms}.items() if ms}


def projected_tpots(requests: Sequence[Decoding], model: DecodeModel,
                    calibration: Callable[[float], float] = _uncalibrated) -> list[float]:
    """Each request's mean seconds per token over the rest of its decode, if nobody joins.

    Phases: while the tightest SLO present stays, every request advances at a fixed credit rate,
    so the requests leave in the order of their remaining steps, and between two departures the
    steps cost the model at the set's virtual batch size and mean length (halfway through: every
    context grows by its rate a step, so the mean is linear in the step). When the last request
    of the tightest SLO leaves, the rates change and a new phase begins."""
    remaining = [float(max(r.remaining, 0)) for r in requests]
    length = [float(r.length) for r in requests]
    spent = [0.0] * len(requests)
    tpots = [0.0] * len(requests)
    active = [i for i, left in enumerate(remaining) if left > 0]
    while active:
        tightest = min((requests[i].slo_s for i in active if requests[i].slo_s), default=0.0)
        rate = {i: tightest / requests[i].slo_s if requests[i].slo_s and tightest else 1.0 for i in active}
        last_tightest = sum(1 for i in active if requests[i].slo_s == tightest)
        batch = sum(rate.values())
        base = sum(rate[i] * length[i] for i in active)  # Σ rate·length: the mean length is
        growth = sum(rate[i] * rate[i] for i in active)  # (base + growth·step) / batch
        step = elapsed = 0.0
        left = set(active)
        for i in sorted(active, key=lambda i: remaining[i] / rate[i]):
            leaves = remaining[i] / rate[i]
            if leaves > step:
                middle = (step + leaves) / 2
                elapsed += calibration(model.predict(batch, (base + growth * middle) / batch)) * (leaves - step)
                step = leaves
            tpots[i] = (spent[i] + elapsed + requests[i].lag_s) / requests[i].remaining
            left.discard(i)
            batch -= rate[i]
            base -= rate[i] * length[i]
            growth -= rate[i] * rate[i]
            if requests[i].slo_s == tightest and tightest:
                last_tightest -= 1
                if last_tightest == 0:
                    break  # the rates change from here
        for i in left:
            remaining[i] -= rate[i] * step
            length[i] += rate[i] * step
            spent[i] += elapsed
        active = [i for i in active if i in left]
    return tpots


def admits(requests: Sequence[Decoding], model: DecodeModel, epsilon: float = TPOT_MARGIN,
           calibration: Callable[[float], float] = _uncalibrated) -> bool:
    """Whether every request with a TPOT SLO keeps it over its decode, with its own margin
    (``Decoding.epsilon``) or else ``epsilon``."""
    return _all_keep(requests, projected_tpots(requests, model, calibration), epsilon)


def _all_keep(requests: Sequence[Decoding], tpots: Sequence[float], epsilon: float) -> bool:
    return all(not r.slo_s or tpot * (r.epsilon or epsilon) <= r.slo_s for r, tpot in zip(requests, tpots))


def step_keeps(step_s: float, slo_s: float, epsilon: float = TPOT_MARGIN) -> bool:
    """Whether a request that runs in every step of ``step_s`` keeps a TPOT SLO of ``slo_s`` with
    margin ``epsilon``: the test for one request alone on an idle worker, and credit batching's
    work-conserving test (a step of every decoding request against the tightest SLO present)."""
    return step_s * epsilon <= slo_s


def admits_request(new: Decoding, present: Sequence[Decoding], model: DecodeModel, unloaded_step_s: float | None,
                   epsilon: float = TPOT_MARGIN, calibration: Callable[[float], float] = _uncalibrated,
                   max_running: int | None = None, soonest_commit_s: float = 0.0) -> bool:
    """The guard's answer for ``new`` (no SLO: always admitted) joining the requests ``present``
    (running and reserved); ``unloaded_step_s``: one request's step measured alone (None: not
    measured, the model decides even when idle), which with ``new``'s handoff alone decides on an
    idle worker, under no margin; ``max_running``: the most requests the engine
    runs at once (its ``max_batch_size``; None: no limit); ``soonest_commit_s``: the least time
    before ``new`` can need a place in the batch (its KV committed here, at least one prefill
    forward away).

    The projection has every request present decode from now on; past ``max_running`` some of
    them would wait for a place in the batch with their first token already out, and their TPOT
    grow by the wait. Under credit batching loose requests are slowed to their SLO and stay
    present longer, and that limit, not the step time, is what binds first. So a request with an
    SLO that makes k more present than ``max_running`` is admitted only if the projection has k
    of those present leave within ``soonest_commit_s``: the places free before it could take
    one, and nobody waits. (Counting places alone refused requests a GPU serves in time: its steps
    are short beside a prefill forward, so places free within one.)"""
    if not new.slo_s:
        return True
    if idle_rule_decides(new, present, unloaded_step_s):
        return step_keeps(unloaded_step_s + new.lag_s / max(new.remaining, 1), new.slo_s, 1.0)
    together = [*present, new]
    past_limit = len(together) - max_running if max_running is not None else 0
    if past_limit > 0 and soonest_commit_s <= 0:
        return False  # no place can free in time: no projection needed
    tpots = projected_tpots(together, model, calibration)
    if not _all_keep(together, tpots, epsilon):
        return False
    if past_limit <= 0:
        return True
    departures = sorted(tpot * r.remaining for r, tpot in zip(present, tpots))
    return departures[past_limit - 1] <= soonest_commit_s


def idle_rule_decides(new: Decoding, present: Sequence[Decoding], unloaded_step_s: float | None) -> bool:
    """Whether ``admits_request`` decides ``new`` by the idle rule, under no margin: it has a TPOT
    SLO, nothing is present, and one request's step alone is measured."""
    return bool(new.slo_s) and not present and unloaded_step_s is not None


def never_met(slo_s: float, alone_s: float | None) -> bool:
    """Whether a TPOT SLO of ``slo_s`` (0: none) is below one request's step alone here: no load,
    margin or batch can meet it."""
    return bool(slo_s) and alone_s is not None and slo_s < alone_s


def never_met_anywhere(slo_s: float, alone_s: Sequence[float | None]) -> bool:
    """Whether no decode worker, each one's step alone ``alone_s`` (None: not known), could ever
    meet a TPOT SLO of ``slo_s``: then the request is refused at once, not kept waiting."""
    return bool(alone_s) and all(never_met(slo_s, alone) for alone in alone_s)


def handoff_extra(first_sent: float, second_arrived: float, last_arrived: float, tokens: int) -> float | None:
    """What one request's handoff added to its TPOT's sum beyond a step: the gap from its first
    token's send to its second token's arrival, less its own mean gap over the rest (so credit
    batching's slower rates and the step's size cancel out); None under three tokens (no rest to
    compare with). Its TPOT is its rest's mean gap plus this over ``tokens - 1``."""
    if tokens < 3:
        return None
    return max(0.0, (second_arrived - first_sent) - (last_arrived - second_arrived) / (tokens - 2))


# the handoffs a decode view keeps: a high quantile of the last HANDOFF_WINDOW_S (at least the newest
# HANDOFF_SAMPLES), none older than HANDOFF_MAX_AGE_S, so what an overload's handoffs cost does not
# hold an idle worker's admission for long after it
HANDOFF_WINDOW_S, HANDOFF_SAMPLES, HANDOFF_MAX_AGE_S, HANDOFF_QUANTILE = 20.0, 8, 30.0, 0.9


def handoff_window(clock: Callable[[], float] = time.monotonic) -> WindowQuantile:
    return WindowQuantile(HANDOFF_WINDOW_S, HANDOFF_QUANTILE, HANDOFF_SAMPLES, clock, HANDOFF_MAX_AGE_S)


def tpot_epsilons(target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.monotonic) -> ClassMargins:
    return ClassMargins(TPOT_MARGIN, target=target, clock=clock, half_life_s=EPSILON_HALF_LIFE_S)


@dataclass(slots=True, eq=False)
class DecodeView:
    """The gateway's side of the TPOT guard for one decode worker: the TPOT SLOs of the requests
    it routed there and that have not finished (seconds, by request id), and ε, the margin the
    worker's admission applies, one per TPOT SLO class, each steered by the TPOTs its class's
    requests really got; and what its handoffs have cost beyond a step (``handoff_extra``), which
    each reservation carries for the newcomer's projection."""

    epsilons: ClassMargins = field(default_factory=tpot_epsilons)
    routed: dict[str, float] = field(default_factory=dict)
    handoffs: WindowQuantile = field(default_factory=handoff_window)

    def handoff_s(self, prior_s: float = 0.0) -> float:
        """A newcomer's handoff here, as the recent ones went; ``prior_s`` while none is known (a
        worker's first requests, or after a quiet spell): one step alone there is the typical one."""
        return self.handoffs.value() if len(self.handoffs) else prior_s

    def vbs_with(self, tpot_s: float) -> float:
        """The virtual batch size of what was routed here, with one more request of ``tpot_s``."""
        slos = {rid: s for rid, s in self.routed.items() if s}
        if tpot_s:
            slos["__new__"] = tpot_s
        return virtual_batch_size(slos) if slos else 0.0
