"""Whether a newcomer sent to a prefill worker would make a request already queued there, and
promised its TTFT, late: least slack first puts the newcomer ahead of every queued request with
a later deadline, so each of those waits for its tokens too (``TtftGuard`` is built with it).

A loose class's headroom relaxes on the outcomes it meets with room, which says little of a
request with no slack left: a queued request a newcomer would push back, and a waiter at its last
useful moment (``last_useful_admission``), are checked under at least the worker's boundary
margin (under a relaxed headroom both miss). That margin is steered by how far calls outrun their
predictions, the pushes of later sends included (``common.slo.boundary``); it starts at, and never
goes below, ``BOUNDARY_HEADROOM``. What it measures is how far a queue drains slower than
predicted, so a newcomer's wait for the queue ahead of it is predicted under at least it too: a
class's headroom hears of a slower worker only a whole TTFT after its admissions, and until then
newcomers sent straight into a queue after a load step miss together. Its own forward keeps its
class's headroom: a tight class's prediction is mostly its own forward, and checking all of it
under the boundary margin refuses requests that their own headroom admits in time. (Chosen by
measurement: docs/decisions.md, 'TTFT guard: the boundary margin covers the queue ahead'.)
"""

from __future__ import annotations

from common.slo.guard_reading import GuardReading


class QueuePushes:
    """What the check reads of a guard (``TtftGuard`` has these)."""

    __slots__ = ()

    def pushes_queued_past(self, prompt_tokens: int, deadline: float, now: float) -> bool:
        """Whether sending a request with this deadline here would make a request already
        queued, predicted to be on time, late.

        Least slack first puts the newcomer ahead of every queued request with a later deadline,
        so each of those waits for its tokens too. Admitting it anyway would trade a request that
        was promised its SLO for one that was not, and make the promises worth less.
        """
        if self.model is None:
            return False
        return self._pushes(prompt_tokens, deadline, now, self.reading())

    def _pushes(self, prompt_tokens: int, deadline: float, now: float, state: GuardReading) -> bool:
        """``pushes_queued_past`` on the worker's state as read."""
        mine, cut, ratio, overhead, per_token = state.mine, state.cut, state.ratio, state.overhead, state.per_token
        by_deadline = sorted(mine, key=lambda q: q[0])
        total, earlier = sum(tokens for _, tokens, _ in mine), 0
        # each queued request's own ``queued_ahead`` from running sums in deadline order: one pass,
        # not one over the queue per request (a gateway with hundreds queued spent its core here)
        classes: set[float] = set()  # the TTFT SLOs of the requests due at this deadline
        # each its own class's margin, the promise it was made, and no less than the boundary's
        # (read once per class: the check is one moment)
        least = self.boundary.margin
        class_margin: dict[float, float] = {}
        for i, (queued_deadline, tokens, ttft_s) in enumerate(by_deadline):
            earlier += tokens
            classes.add(ttft_s)
            if i + 1 < len(by_deadline) and by_deadline[i + 1][0] == queued_deadline:
                continue  # equal deadlines: all of them are ahead of each
            due, classes = classes, set()
            if queued_deadline < deadline or queued_deadline == float("inf"):
                continue
            ahead = self._ahead(mine, earlier, total - earlier, queued_deadline, cut)
            margins: set[float] = set()
            for t in due:
                if t not in class_margin:
                    class_margin[t] = max(least, self.headrooms.margin(t))
                margins.add(class_margin[t])
            for margin in margins:
                scale = ratio, overhead, margin
                # the newcomer's prediction first: where the queued request is on time even with
                # it, nothing is pushed and the prediction without it is not needed (most are)
                with_it = now + self._predict_tokens(ahead, prompt_tokens, scale=scale, cut=cut, queued_len=per_token)
                if with_it <= queued_deadline:
                    continue
                if now + self._predict_tokens(ahead, scale=scale, cut=cut, queued_len=per_token) <= queued_deadline:
                    return True
        return False
