"""What a simulator that costs an engine's decode steps in runs, not one by one
(``simulator.workers``), may read of the engine and do to it: nothing else of its insides. While
the batch holds only decodes none of which can finish, the steps to come depend only on the
requests running and credit batching's state, so the simulator prices them ahead and then
records them at once.
"""

from __future__ import annotations

from collections.abc import Callable

from common.engine.leases import LeaseTable
from common.engine.load import EngineLoad
from common.engine.request import Request
from common.engine.scheduler import Scheduler
from common.slo.credit import CreditBatcher


class RunAhead:
    """An engine's side of a run of decode steps priced ahead (``EngineCore`` sets these)."""

    scheduler: Scheduler
    leases: LeaseTable
    steps_completed: int
    _last_step_end: float | None
    load: EngineLoad
    _measure: Callable[[], EngineLoad]  # the engine's load snapshot, taken anew

    def running_requests(self) -> list[Request]:
        """The requests in the batch now (decoding, or a prompt part-way)."""
        return list(self.scheduler.running)

    def steady_decodes(self) -> list[Request]:
        """The requests running, when every step to come is a decode of them alone: nothing
        waiting, no abort pending, no prompt still in chunks (empty otherwise)."""
        scheduler = self.scheduler
        running = scheduler.running
        if scheduler.waiting or scheduler.has_pending_aborts() or any(r.num_uncomputed_tokens > 1 for r in running):
            return []
        return list(running)

    @property
    def credit(self) -> CreditBatcher:
        """Credit batching's state: a run priced ahead draws from it as the steps would."""
        return self.scheduler.credit

    def credit_slos(self, running: list[Request]) -> dict[str, float] | None:
        """``Scheduler.credit_slos``."""
        return self.scheduler.credit_slos(running)

    def fast_forward(self, produced: dict[str, int], steps: int, last_end: float) -> None:
        """Records ``steps`` decode steps a simulator costed without running them one by one:
        ``produced[request_id]`` tokens each (``advance_decodes``), none finishing, the
        last ending at ``last_end``. Leases past their deadline by then are expired, as those
        steps' ``schedule_step`` would have."""
        self.leases.expire(last_end)
        advance_decodes(self.scheduler, produced, 0)
        self.steps_completed += steps
        self._last_step_end = last_end if self.scheduler.has_unfinished() else None
        self.load = self._measure()


def advance_decodes(scheduler: Scheduler, produced: dict[str, int], token: int) -> None:
    """Records ``produced[request_id]`` decode steps' worth of output for running requests at
    once, each step's token ``token``: what as many steps' ``update_from_output`` would record
    for requests that did not finish in them. A simulator's fast-forward over steps it has
    costed; the caller never advances a request to its last token this way."""
    for request_id, count in produced.items():
        request = scheduler.requests[request_id]
        if len(request.output_token_ids) + count >= request.params.max_tokens:
            raise ValueError(f"request {request_id} would finish in a fast-forward")
        request.output_token_ids.extend([token] * count)
        request.num_computed_tokens += count
