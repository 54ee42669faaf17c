"""How far the prefill worker is into the forward it runs now, as one gateway can tell.

A prefill forward is not preempted, so a request sent to a busy worker waits for the rest of the
forward under way, not all of it. Counting all of it made every prediction made while the worker
was busy half a forward too long on average: on two cores at vLLM's knee of the mixed workload
(16 req/s, 400-token prompts), 100 ms-TTFT requests were refused on predictions of 100-130 ms
made behind one or two queued prompts, while those admitted got their first token in 46-53 ms at
the median and 98 ms at worst.

The gateway sees two moments a forward begins: a call sent to a worker with nothing queued (it
begins about then), and an answer that leaves calls queued (the worker goes on to the next forward
about then; later than it did, since the answer comes after the KV copy and the hop back, so the
credit errs short). ``ForwardUnderWay`` keeps the latest such moment; the guard takes the time
since then off a prediction, at most the oldest queued prompt's own predicted forward (the least
the forward under way holds), and only while no other gateway's work is queued there (their
forwards' moments are not seen here).

The same moments tell which queued requests the forward under way may hold: those queued when it
began (``members``). A later-deadline request sent after that is behind a newcomer, not in the
forward it must wait for: counting every later request queued as possibly in the forward under
way, as the guard must without this, made a prompt sent behind two queued ones wait for both.
An answer comes after its forward ended, so what was queued at the answer is a superset of what
the next forward took.

A prediction made with a credit is compared, when its call is answered, with what the call took
under the same credit: the guard's overhead is learnt from what the credited prediction missed.

Plain code of numbers: times are the caller's clock readings, None when the caller has none (then
nothing is credited).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field


@dataclass(slots=True)
class ForwardUnderWay:
    since: float | None = None  # when the forward under way began, as far as this gateway saw; None: not known
    members: frozenset[str] | None = None  # the request ids queued then (None: not known, any may be in it)
    credited: dict[str, float] = field(default_factory=dict)  # request id -> seconds its prediction took off

    def credit(self, now: float | None, oldest_forward_s: float) -> float:
        """Seconds of the forward under way already run at ``now``: at most ``oldest_forward_s``,
        the oldest queued prompt's own predicted forward."""
        if now is None or self.since is None:
            return 0.0
        return min(max(0.0, now - self.since), oldest_forward_s)

    def sent(self, request_id: str, now: float | None, idle: bool, credit: float) -> None:
        """A call went out at ``now`` with ``credit`` taken off its prediction; ``idle``: nothing was
        queued there (its forward begins now)."""
        if credit > 0:
            self.credited[request_id] = credit
        if idle:
            self._began(now, (request_id,))

    def answered(self, request_id: str, now: float | None, queued: Collection[str]) -> float:
        """The call was answered at ``now``; ``queued``: the calls still queued there (the next
        forward begins about now, with some of them). Returns the credit its prediction had."""
        self._began(now, queued)
        return self.credited.pop(request_id, 0.0)

    def dropped(self, request_id: str, queued: Collection[str]) -> None:
        """The call ended without an answer; ``queued``: the calls still queued there. Idempotent."""
        self.credited.pop(request_id, None)
        if not queued:
            self._began(None, ())

    def _began(self, now: float | None, queued: Collection[str]) -> None:
        """A forward began at ``now`` (None: not known) with some of ``queued``; none when nothing is."""
        known = now is not None and bool(queued)
        self.since = now if known else None
        self.members = frozenset(queued) if known else None
