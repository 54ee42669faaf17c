"""The TTFT guard's decisions over a role's prefill workers (``common.slo.ttft_guard`` is one
worker's view): the best predicted prefill call where the request makes no queued request late,
whether and why a request is refused, and the last moment a waiting request is still of use.
The decisions of the gateway and the simulator alike: plain code of numbers, ``now`` given."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from common.slo.guard_reading import Readings
from common.slo.ttft_guard import TtftGuard


def best_prefill_s(guards: Collection[TtftGuard], prompt_tokens: int | Sequence[int], deadline: float,
                   now: float, ttft_s: float = 0.0, at_boundary: bool = False,
                   readings: Readings | None = None) -> float:
    """The least predicted prefill call (seconds) over the workers where the request makes no
    queued request late; inf when there is none; 0 when no worker has a model, or when one is
    idle and no call to it has been observed yet: a worker with nothing to do never refuses on
    a model's word alone, and its first call teaches the calibration. ``prompt_tokens``: the
    prompt's tokens, or per guard what that worker would compute (less its cached prefix);
    ``ttft_s``: the request's TTFT SLO, whose class's headroom the predictions carry (and at least
    each worker's boundary margin when the request is ``at_boundary``); ``readings``: the workers'
    states as read for other requests at this moment, and filled with those read here."""
    return _least(guards, _options(guards, prompt_tokens, deadline, now, ttft_s, at_boundary, readings))


def _options(guards: Collection[TtftGuard], prompt_tokens: int | Sequence[int], deadline: float, now: float,
             ttft_s: float, at_boundary: bool = False,
             readings: Readings | None = None) -> list[tuple[TtftGuard, float | None]] | None:
    """The workers where the request makes no queued request late, each with its prediction (None
    without a model); None when one is idle and untested (``best_prefill_s``: then 0)."""
    if any(g.idle_and_untested() for g in guards):
        return None
    per_guard = [prompt_tokens] * len(guards) if isinstance(prompt_tokens, int) else list(prompt_tokens)
    options = []
    for g, n in zip(guards, per_guard):
        reading = None
        if readings is not None and g.model is not None:
            reading = readings.get(id(g))
            if reading is None:
                reading = readings[id(g)] = g.reading()
        pushes, predicted = g.option(n, deadline, now, ttft_s, at_boundary, reading)
        if not pushes:
            options.append((g, predicted))
    return options


def _least(guards: Collection[TtftGuard], options: list[tuple[TtftGuard, float | None]] | None) -> float:
    if options is None:
        return 0.0
    if not options:
        return float("inf") if guards else 0.0
    return min((s for _, s in options if s is not None), default=0.0)


def ttft_refusal(guards: Collection[TtftGuard], prompt_tokens: int | Sequence[int], ttft_s: float, arrived: float,
                 now: float) -> str | None:
    """Why a request that arrived at ``arrived`` with TTFT SLO ``ttft_s`` cannot get its first
    token in time (None: it can). The decision of the TTFT guard, for the gateway and the
    simulator alike. A refusal a worker's headroom alone caused (its prediction under the
    headroom's probe, ``MarginController.probe``, would have fit) counts toward relaxing that
    headroom (``MarginController.refused``: a class its margin shuts out is tried again)."""
    options = _options(guards, prompt_tokens, arrived + ttft_s, now, ttft_s)
    best = _least(guards, options)
    if best == float("inf"):
        return "on every prefill worker the request would make queued requests miss theirs"
    left_s = ttft_s - (now - arrived)
    if best > left_s:
        for guard, predicted in options or ():
            headroom = guard.headrooms.of(ttft_s)
            if predicted is not None and predicted * headroom.probe() / headroom.margin <= left_s:
                headroom.refused()
        return f"the best prefill worker is predicted to need {best * 1000:.0f} ms"
    return None


def last_useful_admission(guards: Collection[TtftGuard], prompt_tokens: int | Sequence[int], deadline: float,
                          now: float, ttft_s: float = 0.0, readings: Readings | None = None) -> float:
    """The latest moment a request (TTFT SLO ``ttft_s``) waiting for a decode worker can still be
    admitted and get its first token by ``deadline``: the deadline less its best predicted prefill,
    under at least each worker's boundary margin (sent then, it has no slack left for a prediction
    its class's headroom relaxed on requests that had). ``readings``: as for ``best_prefill_s``
    (an admission round orders its waiters on one reading of each worker)."""
    return deadline - best_prefill_s(guards, prompt_tokens, deadline, now, ttft_s, at_boundary=True, readings=readings)
