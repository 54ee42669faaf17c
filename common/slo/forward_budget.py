"""How many prompt tokens a prefill forward may hold, so that a tight request arriving during
it still has time for its own.

A forward is not preempted. A request with a tight TTFT SLO that arrives while a forward of
other prompts is under way waits for its end, however urgent it is; least slack first only
orders what comes after. A forward of the whole token budget (4,096 tokens by default) of loose
prompts can outlast a tight SLO by itself on a slow device (on a CPU such a forward takes several
hundred milliseconds), and a request with a tight TTFT is then refused because of what is queued
ahead of it, whatever its deadlines.

So under a TTFT guard a prefill forward is cut to what the fitted model predicts takes at most
``FORWARD_SHARE`` of the tightest TTFT SLO seen in the last ``TIGHTEST_WINDOW_S`` seconds; a
prompt longer than that runs in chunks. Where the device is fast or the SLOs loose the cut is the
configured budget itself (a GPU forward of 4,096 tokens of a 1B model takes tens of
milliseconds), so nothing changes there. The prefill worker cuts its forwards with it and the
gateway's TTFT guard predicts queues with the same cut (both from the worker's fitted model
and the SLOs of the requests sent there, so they agree without a message between them).
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable

from common.slo.cost_models import PrefillModel

FORWARD_SHARE = 0.5  # a tight request waits at most this share of its SLO for a forward under way
TIGHTEST_WINDOW_S = 30.0  # how long a tight SLO keeps forwards short after its last request
MIN_FORWARD_TOKENS = 16  # below this a forward's fixed cost dominates: never cut further


@functools.lru_cache(maxsize=256)  # asked on every prediction of the guard's checks, on every step: a bisection each
def forward_budget(model: PrefillModel, tightest_ttft_s: float | None, max_tokens: int,
                   share: float = FORWARD_SHARE) -> int:
    """The most prompt tokens (up to ``max_tokens``) whose forward ``model`` predicts within ``share``
    of ``tightest_ttft_s`` (None: no TTFT SLO seen: ``max_tokens``), but never so few that a forward's
    fixed cost is more than half of it: cut finer, prompts would run in chunks that cost more in
    fixed costs than any wait they save (a model flat in tokens is never cut)."""
    if tightest_ttft_s is None or max_tokens <= MIN_FORWARD_TOKENS:
        return max_tokens
    fits = _most_tokens(model, share * tightest_ttft_s, max_tokens)
    worth_cutting = _most_tokens(model, 2 * model.predict(0), max_tokens) + 1  # the fewest whose forward is
    return min(max_tokens, max(fits, worth_cutting, MIN_FORWARD_TOKENS))  # at least twice its fixed cost


def _most_tokens(model: PrefillModel, seconds: float, max_tokens: int) -> int:
    """The most tokens (0 .. max_tokens) whose forward ``model`` predicts under ``seconds``; it grows with tokens."""
    if model.predict(max_tokens) < seconds:
        return max_tokens
    low, high = 0, max_tokens
    while low < high:
        middle = (low + high + 1) // 2
        if model.predict(middle) < seconds:
            low = middle
        else:
            high = middle - 1
    return low


class TightestSlo:
    """The tightest TTFT SLO (seconds) among those seen in the last ``window_s`` seconds."""

    def __init__(self, window_s: float = TIGHTEST_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self._clock = window_s, clock
        self._seen: deque[tuple[float, float]] = deque()  # (when, SLO), SLOs increasing from the left

    def observe(self, ttft_s: float) -> None:
        if ttft_s <= 0:
            return
        # an SLO seen now outlives every looser or equal one seen before: those can never be the tightest again
        while self._seen and self._seen[-1][1] >= ttft_s:
            self._seen.pop()
        self._seen.append((self._clock(), ttft_s))

    def value(self) -> float | None:
        horizon = self._clock() - self.window_s
        while self._seen and self._seen[0][0] < horizon:
            self._seen.popleft()
        return self._seen[0][1] if self._seen else None
