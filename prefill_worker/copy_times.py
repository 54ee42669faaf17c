"""What this prefill worker's KV copies have cost lately, so that its first-token check
(``PromptTiming.queue_first_token_s``) keeps time for a prompt's copy: the gateway hears the first
token only once the prompt's KV is in its decode worker's blocks.

A copy's time grows with its blocks, so a high quantile of the recent seconds per block, times
the blocks a prompt will copy, is the estimate. A small copy's fixed cost spread over few blocks
makes that quantile high for large prompts when small ones dominate: the check then keeps more
time than a large copy takes, on the safe side.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.slo.calibration import WindowQuantile

COPY_QUANTILE = 0.9  # of seconds per block: a miss's budget is the gateway's overhead tail, not this
COPY_WINDOW_S = 10.0
COPY_MAX_AGE_S = 60.0  # a copy slowed by a bad moment counts no longer than this


class CopyTimes:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_block = WindowQuantile(window_s=COPY_WINDOW_S, quantile=COPY_QUANTILE, clock=clock,
                                         max_age_s=COPY_MAX_AGE_S)

    def copied(self, blocks: int, seconds: float) -> None:
        """A copy of ``blocks`` took ``seconds``."""
        if blocks > 0:
            self._per_block.observe(seconds / blocks)

    def expected_ms(self, blocks: int) -> float:
        """Milliseconds a copy of ``blocks`` is expected to take (0 before any copy is seen)."""
        return self._per_block.value() * blocks * 1000 if blocks > 0 else 0.0

    def left_for_compute_ms(self, ttft_left_ms: float, blocks: int) -> float:
        """Of a call's ``ttft_left_ms`` (0: no TTFT budget), what is left for its queue and
        forward once its copy of ``blocks`` is kept aside."""
        return max(0.001, ttft_left_ms - self.expected_ms(blocks)) if ttft_left_ms else 0.0
