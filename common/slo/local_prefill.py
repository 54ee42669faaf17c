"""Conditional disaggregation: when a decode worker computes a prompt itself.

A disaggregated cluster gives prefill and decode their own workers, so a burst of prompts queues
on the prefill workers while the decode workers, their steps short, sit partly idle. A request no
prefill worker can return the first token of in time is then refused, though the decode worker
that holds its reservation could compute the prompt in its own steps and start decoding it at
once (Dynamo's conditional disaggregation; vLLM's colocated scheduler does every prompt so).

The choice, for the gateway and the simulator alike: a prefill worker whenever one is predicted
to return the first token in time (``ttft_decision.best_prefill_s``), since a decode worker's
forward delays every request decoding there; the decode worker only when none is, and when its
own TTFT guard (a ``TtftGuard`` over the prompts it computes, on its prefill model, calibrated by
its answers and steered by the promise loop like any prefill worker's) predicts it in time. The
decode worker keeps its TPOT promises itself: a prompt joins a step only while every decoding
request's slack absorbs that step's forward (``stall_keeps``), and it refuses a prompt whose first
token, after the wait for that slack (``stall_wait_s``), would come too late (``EngineCore.prefill_reserved``):
the gateway's guard hears of a decode worker's prompts too rarely to learn that wait from its answers.

Plain code of numbers, ``now`` given.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common.slo.ttft_decision import best_prefill_s
from common.slo.ttft_guard import TtftGuard

FRESH_WINDOW_S = 5.0  # how far back FreshDecodes counts
FRESH_MIN_SPAN_S = 1.0  # its rate over at least this long: one request just seen is not a rate
MAX_EXPONENT = math.log(sys.float_info.max)  # e^x overflows past it


def prefills_locally(prefill: Sequence[TtftGuard], prefill_tokens: Sequence[int], local: TtftGuard,
                     local_tokens: int, deadline: float, now: float, ttft_s: float) -> bool:
    """Whether a request due at ``deadline`` (TTFT SLO ``ttft_s``) is prefilled by its decode
    worker (whose guard is ``local``, computing ``local_tokens`` of the prompt there) rather than
    by one of the prefill workers (``prefill``, computing ``prefill_tokens[i]`` each)."""
    left = deadline - now
    if prefill and best_prefill_s(prefill, prefill_tokens, deadline, now, ttft_s) <= left:
        return False
    return best_prefill_s([local], [local_tokens], deadline, now, ttft_s) <= left


@dataclass(frozen=True, slots=True)
class Promise:
    """A decoding request's TPOT promise, as the stall rule reads it: its first token came at
    ``first_token_at`` and ``tokens_out`` tokens have come since then and with it; the time per
    output token since its first stays within ``tpot_slo_s`` (× ``margin``, its class's ε)."""

    first_token_at: float
    tpot_slo_s: float
    tokens_out: int
    margin: float

    def deficit_s(self, now: float, forward_s: float, step_s: float) -> float:
        """How late its next token would be, were it its last, after a forward of ``forward_s``
        begun ``now`` and one more step: at most 0 when the forward keeps the promise."""
        return now + (forward_s + 2 * step_s) * self.margin - self.first_token_at - self.tpot_slo_s * self.tokens_out


def stall_keeps(promises: Iterable[Promise], now: float, forward_s: float, step_s: float) -> bool:
    """Whether a forward of ``forward_s`` begun ``now`` beside decode steps of ``step_s`` keeps
    every promise: each request's next token, after that forward and one more step (× its ε),
    still keeps its time per output token since its first within its SLO were that token its last."""
    return all(p.deficit_s(now, forward_s, step_s) <= 0 for p in promises)


def stall_wait_s(promises: Iterable[Promise], now: float, forward_s: float, step_s: float) -> float | None:
    """How long such a forward waits for ``stall_keeps``, the decodes stepping meanwhile at
    ``step_s`` each: every step adds its SLO to a request's allowance and ``step_s`` to the clock,
    so its deficit shrinks by their difference. None when it never would (a step as long as an SLO)."""
    steps = 0
    for p in promises:
        deficit = p.deficit_s(now, forward_s, step_s)
        if deficit <= 0:
            continue
        gain = p.tpot_slo_s - step_s
        if gain <= 0:
            return None
        steps = max(steps, math.ceil(deficit / gain))
    return steps * step_s


class FreshDecodes:
    """The requests that began decoding here lately (their first tokens), over a sliding window:
    how often one comes and the tightest TPOT SLO among them. A fresh request has no slack for a
    prompt's forward, so every one that comes while a prompt waits makes it wait again."""

    def __init__(self, window_s: float = FRESH_WINDOW_S) -> None:
        self.window_s = window_s
        self._seen: deque[tuple[float, float]] = deque()  # (when, TPOT SLO seconds; 0: none)
        self._since: float | None = None

    def observe(self, now: float, tpot_slo_s: float) -> None:
        self._since = now if self._since is None else self._since
        self._seen.append((now, tpot_slo_s))
        self._forget(now)

    def rate(self, now: float) -> float:
        """Per second, over the window (or the time since the first, when shorter)."""
        self._forget(now)
        if not self._seen or self._since is None:
            return 0.0
        return len(self._seen) / max(min(self.window_s, now - self._since), FRESH_MIN_SPAN_S)

    def tightest_s(self, now: float) -> float:
        self._forget(now)
        return min((slo for _, slo in self._seen if slo > 0), default=0.0)

    def _forget(self, now: float) -> None:
        while self._seen and self._seen[0][0] < now - self.window_s:
            self._seen.popleft()


def start_wait_s(now_wait_s: float, fresh_rate: float, fresh_wait_s: float) -> float:
    """The expected wait before a prompt's forward may start: ``now_wait_s`` for the requests
    decoding now (``stall_wait_s``), and ``fresh_wait_s`` (a fresh request's own ``stall_wait_s``)
    after the last of the requests that begin decoding meanwhile (Poisson, ``fresh_rate`` per second).

    The forward starts at the first t ≥ w0 with no arrival in (t − W, t). With m = min(W, w0):
    none in (w0 − m, w0) lets it start at w0; else, from w0, the gap still missing, d, completes
    in (1 − e^{−λd})·e^{λW}/λ expected, and the time back to the last arrival is exponential;
    together, E[t] = w0 + (e^{λW}(1 − e^{−λm}) − λm)/λ. Infinite where e^{λW} is past a float's
    range: fresh requests come so often that a gap of W practically never opens."""
    lam, w0, gap = fresh_rate, now_wait_s, fresh_wait_s
    if lam <= 0 or w0 <= 0 or gap <= 0:
        return w0
    if lam * gap > MAX_EXPONENT:
        return math.inf
    m = min(gap, w0)
    return w0 + (math.exp(lam * gap) * -math.expm1(-lam * m) - lam * m) / lam


def first_token_s(promises: Iterable[Promise], now: float, forward_s: float, step_s: float, fresh_rate: float,
                  fresh_tpot_s: float, fresh_margin: float) -> float | None:
    """The expected time until a prompt whose forward takes ``forward_s`` has its first token on
    a decode worker whose requests decoding now hold ``promises`` (steps of ``step_s``), and where
    requests begin decoding at ``fresh_rate`` a second, their TPOT SLO ``fresh_tpot_s`` at
    tightest (0: none lately; ``fresh_margin`` its ε): the wait for slack (``start_wait_s``), then
    the forward beside one decode step. None when no wait would do."""
    wait = stall_wait_s(promises, now, forward_s, step_s)
    if wait is not None and fresh_tpot_s > 0:
        fresh_wait = stall_wait_s([Promise(now, fresh_tpot_s, 1, fresh_margin)], now, forward_s, step_s)
        wait = None if fresh_wait is None else start_wait_s(wait, fresh_rate, fresh_wait)
    return None if wait is None or math.isinf(wait) else wait + forward_s + step_s
