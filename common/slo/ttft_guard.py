"""The TTFT guard's view of one prefill worker's queue (its decisions over all of a role's
workers: ``common.slo.ttft_decision``).

A ``TtftGuard`` belongs to one prefill worker. It knows the worker's fitted prefill model, how
wrong that model typically is (``calibration``: the median ratio of the time the worker itself
reports for a call, its queue, forward and KV copy, to the model's prediction), what a call
costs beyond that (``overhead``: a high quantile of what calls really took less the calibrated
prediction: the RPC hops, the gateway's own delays and the worker's spread, a fixed cost rather
than a multiple of the forward, and one tail rather than two added together; the quantile is the
miss budget's, ``overhead_quantile``), what this gateway sent there and still awaits, and what
the worker last reported it holds (heartbeats), and predicts from those how soon a new prompt's
prefill would be over::

    predicted call = (calibration × model(queue ahead + prompt) + overhead) × headroom

Its ``headrooms`` multiply every calibrated prediction, one per TTFT SLO class: a request's
prediction carries its own class's; the closed loop (``common.slo.promise``) steers each from the
TTFTs that class's admitted requests really got.

Only calls that no later send could have delayed teach the calibration and the overhead. A
request sent while another is queued may join that one's forward or, with an earlier deadline,
go before it: the queued call then takes longer than its prediction for a reason that is no
error of the model and no cost of the hops (the load that followed it), and learning from it
would make every later prediction carry the worst such delay. The calibration, a ratio to the model,
learns only from calls sent with nothing ahead (its prediction is then the model of its own
prompt, not of a queue partly computed already).

Plain code of time and state: no clock is read here (``now`` is an argument; a calibration
reads the clock it is given), so a simulator can drive it on a virtual clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from common.slo.boundary import BoundaryMargin, boundary_controller
from common.slo.calibration import Calibration, WindowQuantile
from common.slo.cost_models import PrefillModel
from common.slo.forward_budget import TightestSlo, forward_budget
from common.slo.guard_reading import GuardReading, Queued
from common.slo.ttft_margins import call_overhead, prefill_calibration, ttft_headrooms
from common.slo.ttft_pushes import QueuePushes
from common.slo.promise import DEFAULT_TARGET
from common.slo.class_margins import ClassMargins

def new_guard(model: PrefillModel | None, forward_tokens: int, target: float = DEFAULT_TARGET,
              clock: Callable[[], float] = time.monotonic, probe_first: bool = True) -> TtftGuard:
    """A prefill worker's guard as the gateway (or the simulator, on its virtual clock) makes it;
    ``probe_first=False`` for a decode worker's own prefills (``TtftGuard.probe_first``)."""
    return TtftGuard(model, forward_tokens, prefill_calibration(clock),
                     overhead=call_overhead(target, clock), headrooms=ttft_headrooms(target, clock),
                     tightest=TightestSlo(clock=clock), boundary=BoundaryMargin(boundary_controller(target, clock)),
                     probe_first=probe_first)


@dataclass(slots=True, eq=False)
class TtftGuard(QueuePushes):
    model: PrefillModel | None  # the worker's fit; None when it has none (no guard asked for one)
    forward_tokens: int = 0  # the worker's max_num_tokens; 0: all in one (``forward_cut``: what it runs now)
    calibration: Calibration = field(default_factory=prefill_calibration)
    # seconds a call adds to what the worker reports spending on it (RPC hops, the gateway's delays)
    overhead: WindowQuantile = field(default_factory=call_overhead)
    # what this gateway sent and awaits, in sending order: request id -> (deadline, tokens, TTFT SLO);
    # deadlines are on the clock ``now`` is read from
    queued: dict[str, Queued] = field(default_factory=dict)
    reported_tokens: int = 0  # prompt tokens the worker last said it has queued (all gateways')
    others_tokens: int = 0  # ... beyond what this gateway had sent and awaited when it said so
    reported_running: int = 0  # requests the worker last said it is running
    headrooms: ClassMargins = field(default_factory=ttft_headrooms)  # the closed loop's, by TTFT SLO class
    extrapolations: int = 0  # predictions of a forward larger than any the model was fitted on
    # of ``queued``: those a later send could have delayed (joined their forward or gone before
    # them), and those sent with nothing ahead; what their answers may teach (module docstring)
    disturbed: set[str] = field(default_factory=set)
    alone: set[str] = field(default_factory=set)
    tightest: TightestSlo = field(default_factory=TightestSlo)  # of the requests sent there: its forwards' cut
    # the worker's own calibration of all its forwards, busy or not, as last reported (0: none)
    forward_ratio: float = 0.0
    # the margin promises already made are checked under, and the calls it follows (``common.slo.boundary``)
    boundary: BoundaryMargin = field(default_factory=BoundaryMargin)
    # whether, idle and with no call observed yet, it admits whatever comes (its first call teaches
    # the calibration). Not for a decode worker's own prefills (``common.slo.local_prefill``), the
    # exception and often never tried: one untested would admit what its model says is late, and
    # over every worker's options it would keep the guard from refusing anything.
    probe_first: bool = True

    def heard(self, queued_tokens: int, running: int) -> None:
        """The worker's own account of its load (registration, heartbeat)."""
        self.reported_tokens, self.reported_running = queued_tokens, running
        # other gateways' work, as of the report: this gateway's own share is followed live in
        # ``queued`` (a report soon goes stale for what this gateway's answers already took off)
        self.others_tokens = max(0, queued_tokens - self._own_tokens())

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens queued on the worker as this gateway sees them now: what it sent and
        still awaits, followed live, plus other gateways' as of the last report. (A report alone
        goes on counting this gateway's answered calls until the next heartbeat: a conversation's
        next turn, sent right after the last, was routed away from the worker holding its history.)"""
        return self.others_tokens + self._own_tokens()

    def _own_tokens(self) -> int:
        """Prompt tokens this gateway sent there and still awaits."""
        return sum(tokens for _, tokens, _ in self.queued.values())

    def sent(self, request_id: str, deadline: float, tokens: int, ttft_s: float = 0.0) -> None:
        """A request with this deadline (and TTFT SLO ``ttft_s``; 0: none) and prompt ``tokens`` to compute went there."""
        self.tightest.observe(ttft_s)
        if self.model is not None:
            self._follow(request_id, deadline, tokens)
        self.disturbed.update(self.queued)
        if not self.queued and not self.others_tokens:
            self.alone.add(request_id)
        self.queued[request_id] = (deadline, tokens, ttft_s)

    def _follow(self, request_id: str, deadline: float, tokens: int) -> None:
        """The boundary margin follows the call from here: predicted as an admission predicts it
        (under no headroom); the queued requests with a later deadline wait for its tokens too."""
        cut, scale = self.forward_cut, (self.ratio(), self.overhead.value(), 1.0)
        per_token = self._queued_len(cut)
        predicted = self._predict_tokens(self.queued_ahead(deadline), tokens, scale=scale, cut=cut,
                                         queued_len=per_token)
        total = self.queued_tokens
        push = (self._raw(total, tokens, cut, per_token) - self._raw(total, 0, cut, per_token)) * scale[0]
        self.boundary.sent(request_id, predicted, (r for r, (d, _, _) in self.queued.items() if d > deadline), push)

    def answered(self, request_id: str, observed_s: float, predicted_s: float | None,
                 worker_s: float | None = None, forward_ratio: float = 0.0) -> None:
        """The worker returned the request's first token after ``observed_s``, of which it spent
        ``worker_s`` itself (None: not known): its tokens leave the queue, and, unless a later send
        may have delayed it, the call teaches the calibration (when it was sent with nothing
        ahead) what ``predicted_s`` (uncalibrated; None or 0: no prediction was made) really took
        and the overhead what the rest cost."""
        self.queued.pop(request_id, None)
        self.boundary.answered(request_id, observed_s)
        if forward_ratio > 0:
            self.forward_ratio = forward_ratio
        disturbed, alone = request_id in self.disturbed, request_id in self.alone
        self.disturbed.discard(request_id)
        self.alone.discard(request_id)
        if not predicted_s or disturbed:
            return
        if alone:
            self.calibration.observe(predicted_s, observed_s if worker_s is None else worker_s)
        if worker_s is not None:
            self.overhead.observe(max(0.0, observed_s - self.ratio() * predicted_s))

    def dropped(self, request_id: str) -> None:
        """The call ended without an answer (failed, cancelled): its tokens leave the queue and
        nothing is learnt. Idempotent."""
        self.queued.pop(request_id, None)
        self.boundary.dropped(request_id)
        self.disturbed.discard(request_id)
        self.alone.discard(request_id)

    def queued_ahead(self, deadline: float) -> int:
        """Prompt tokens the worker will compute before a request with this deadline.

        Prefill queues run least slack first, so queued requests with an earlier deadline are
        ahead. So is the forward under way, whatever its requests' deadlines: it is not
        preempted, and it holds up to ``forward_tokens`` of what was queued when it began (0: all
        of it), while a prompt begun in chunks runs its remaining chunks before any newcomer.
        Which later requests that forward holds only the worker knows, so all of them count, up
        to one forward's tokens or the oldest request whole, whichever is more. (Counting only the
        oldest misses a burst's forward of several prompts, whose calls then outrun their predictions:
        docs/decisions.md, 'TTFT guard: the forward under way holds later requests too'.)
        Work the worker last reported beyond what this gateway had sent (other gateways') counts
        as ahead.
        """
        mine = list(self.queued.values())
        return self._ahead(mine, *_around(mine, deadline), deadline)

    @property
    def forward_cut(self) -> int:
        """Prompt tokens per forward the worker runs now (``common.slo.forward_budget``; 0: all in one)."""
        if self.model is None:
            return self.forward_tokens
        return forward_budget(self.model, self.tightest.value(), self.forward_tokens)

    def _ahead(self, mine: list[Queued], earlier: int, later: int, deadline: float, cut: int | None = None) -> int:
        """``queued_ahead`` from the tokens queued with a deadline up to ``deadline`` and after it;
        ``cut``: ``forward_cut`` when the caller read it once for many."""
        if later:
            cut = self.forward_cut if cut is None else cut
            oldest = mine[0][1] if mine[0][0] > deadline else 0
            earlier += min(later, max(cut, oldest)) if cut else later
        return earlier + self.others_tokens

    def predict_s(self, prompt_tokens: int, deadline: float = float("inf"), calibrated: bool = True,
                  ttft_s: float = 0.0) -> float | None:
        """The queue ahead plus this prompt through the fitted model, one forward per
        ``forward_tokens`` (scaled by what calls have been taking, and by the headroom of the
        class of ``ttft_s``, when ``calibrated``); None without a model."""
        if self.model is None:
            return None
        return self._predict_tokens(self.queued_ahead(deadline), prompt_tokens, calibrated,
                                    self._scale(ttft_s) if calibrated else None)

    def _predict_tokens(self, ahead: int, prompt_tokens: int = 0, calibrated: bool = True,
                        scale: tuple[float, float, float] | None = None, cut: int | None = None,
                        queued_len: float | None = None, queue_margin: float = 0.0) -> float:
        """``ahead`` queued tokens and a prompt of ``prompt_tokens`` through the model; ``scale``:
        (calibration ratio, overhead, headroom), ``cut``: ``forward_cut``, and ``queued_len``:
        ``_queued_len``, when the caller read them once for many predictions; ``queue_margin``: the
        least margin the wait for the queue ahead carries (the prompt's own forward keeps the headroom)."""
        assert self.model is not None
        cut = self.forward_cut if cut is None else cut
        tokens = ahead + prompt_tokens
        if self.model.extrapolates(min(tokens, cut or tokens)):
            self.extrapolations += 1
        per_token = self._queued_len(cut) if queued_len is None else queued_len
        raw = self._raw(ahead, prompt_tokens, cut, per_token)
        if not calibrated:
            return raw
        ratio, overhead, margin = scale or self._scale()
        predicted = (raw * ratio + overhead) * margin
        if ahead and queue_margin > margin:
            predicted += (raw - self._raw(0, prompt_tokens, cut, per_token)) * ratio * (queue_margin - margin)
        return predicted

    def _raw(self, ahead: int, prompt_tokens: int, cut: int, queued_len: float) -> float:
        """The model's time for ``ahead`` queued tokens (of ``queued_len`` attention work a token)
        and a prompt, in forwards of ``cut``."""
        assert self.model is not None
        attention = ahead * min(queued_len or ahead, ahead) + prompt_tokens ** 2
        return self.model.predict_forwards(ahead + prompt_tokens, cut, attention)

    def _queued_len(self, cut: int) -> float:
        """The attention work per queued token: the mean length of this gateway's queued prompts
        weighted by their tokens (Σn²/Σn), so that a queue's work is the sum of its prompts' (a
        forward of eight 256-token prompts attends to 8·256², not 2048²); ``cut`` with nothing of
        this gateway's queued (other gateways' tokens, whose prompts it does not know, count as one
        prompt per forward)."""
        tokens = self._own_tokens()
        if not tokens:
            return float(cut)
        return sum(n * n for _, n, _ in self.queued.values()) / tokens

    def ratio(self) -> float:
        """What predictions are scaled by: the calibration of calls sent with nothing ahead, or the
        worker's own calibration of its forwards when that is higher (a worker busy with a queue,
        its cores shared with a burst's other work, runs slower than an idle one, and only its
        own forwards show that while calls always find a queue)."""
        return max(self.calibration.ratio, self.forward_ratio)

    def _scale(self, ttft_s: float = 0.0) -> tuple[float, float, float]:
        return self.ratio(), self.overhead.value(), self.headrooms.margin(ttft_s)

    def raw_for(self, ahead_tokens: int, prompt_tokens: int) -> float | None:
        """The uncalibrated prediction for a prompt of ``prompt_tokens`` behind ``ahead_tokens``
        (``predict_s(calibrated=False)`` with the queue as it was); None without a model."""
        if self.model is None:
            return None
        cut = self.forward_cut
        return self._raw(ahead_tokens, prompt_tokens, cut, self._queued_len(cut))

    def reading(self) -> GuardReading:
        cut = self.forward_cut
        return GuardReading(list(self.queued.values()), cut, self.ratio(), self.overhead.value(), self._queued_len(cut))

    def option(self, prompt_tokens: int, deadline: float, now: float, ttft_s: float = 0.0,
               at_boundary: bool = False, reading: GuardReading | None = None) -> tuple[bool, float | None]:
        """``(pushes_queued_past, predict_s)`` for one request, the worker's state read once for
        both (``reading``: as read already for many requests at one moment); the prediction
        under at least the boundary margin when the request is ``at_boundary`` (it has no slack
        left), and otherwise its wait for the queue ahead under at least the boundary margin, its
        own forward under its class's headroom."""
        if self.model is None:
            return False, None
        state = reading or self.reading()
        if self._pushes(prompt_tokens, deadline, now, state):
            return True, None
        mine, cut = state.mine, state.cut
        ahead = self._ahead(mine, *_around(mine, deadline), deadline, cut)
        headroom = self.headrooms.margin(ttft_s)
        if at_boundary:
            headroom = max(self.boundary.margin, headroom)
        return False, self._predict_tokens(ahead, prompt_tokens, scale=(state.ratio, state.overhead, headroom), cut=cut,
                                           queued_len=state.per_token, queue_margin=self.boundary.margin)

    def idle_and_untested(self) -> bool:
        """Nothing to do and no call observed yet: its model alone must not refuse a request."""
        return (self.probe_first and self.calibration.num_samples == 0 and not self.queued
                and self.reported_tokens == 0 and self.reported_running == 0)


def _around(queued: list[Queued], deadline: float) -> tuple[int, int]:
    """Prompt tokens queued with a deadline up to ``deadline``, and after it."""
    earlier = later = 0
    for queued_deadline, tokens, _ in queued:
        if queued_deadline <= deadline:
            earlier += tokens
        else:
            later += tokens
    return earlier, later
