"""What an SLO policy decides inside one engine step, given to the scheduler at construction.

The scheduler's loop is the algorithm (decodes first, then waiting prompts within the budgets);
the policy answers its four questions:

    prompt_budget(budget)          the most prompt tokens this step may compute
    all_fit(batch, len, slo_s)     credit batching's work-conserving test: every decode fits the
                                   tightest TPOT SLO present, so holding one back saves nothing
    forward_keeps(t, w, dl, share) a forward of t prompt tokens (attention work w) begun now ends
                                   within share of the time left to deadline dl
    stall_keeps(t, w)              a step computing t prompt tokens beside the decodes keeps every
                                   decoding request's TPOT promise

``FirstComeFirstServed`` answers as if nothing were guarded (fcfs, and an engine without a cost
model yet). ``SloGuarded`` asks the engine (``EngineCore``'s cost models and promises) for the
guards its policy has: the TTFT guard's forward budget and deadlines (``guards_forwards``), the
TPOT guard's stall rule (``guards_stalls``), the work-conserving credit test (``conserves_work``).
"""

from __future__ import annotations

from typing import Protocol


class StepPolicy(Protocol):
    guards_forwards: bool  # deadlines order the waiting prompts and bound what joins a forward
    guards_stalls: bool  # decodes ready to run go before prompts, which wait for their slack

    def prompt_budget(self, budget: int) -> int: ...

    def all_fit(self, batch: int, mean_len: float, tightest_slo_s: float) -> bool: ...

    def forward_keeps(self, tokens: int, work: int, deadline: float, share: float) -> bool: ...

    def stall_keeps(self, tokens: int, work: int) -> bool: ...


class FirstComeFirstServed:
    guards_forwards = False
    guards_stalls = False

    def prompt_budget(self, budget: int) -> int:
        return budget

    def all_fit(self, batch: int, mean_len: float, tightest_slo_s: float) -> bool:
        return False  # credit batching (where the policy has it) always selects

    def forward_keeps(self, tokens: int, work: int, deadline: float, share: float) -> bool:
        return True

    def stall_keeps(self, tokens: int, work: int) -> bool:
        return True


class GuardedEngine(Protocol):
    """What ``SloGuarded`` asks of the engine."""

    def prefill_cap(self) -> int: ...

    def forward_keeps(self, tokens: int, attention: int, deadline: float, share: float = 1.0) -> bool: ...

    def all_fit(self, batch: int, mean_len: float, tightest_slo_s: float) -> bool: ...

    def stall_keeps(self, tokens: int, work: int) -> bool: ...


class SloGuarded(FirstComeFirstServed):
    def __init__(self, engine: GuardedEngine, ttft_guard: bool, tpot_guard: bool, conserves_work: bool) -> None:
        self.engine = engine
        self.guards_forwards = ttft_guard
        self.guards_stalls = tpot_guard
        self.conserves_work = conserves_work

    def prompt_budget(self, budget: int) -> int:
        return min(budget, self.engine.prefill_cap()) if self.guards_forwards else budget

    def all_fit(self, batch: int, mean_len: float, tightest_slo_s: float) -> bool:
        return self.conserves_work and self.engine.all_fit(batch, mean_len, tightest_slo_s)

    def forward_keeps(self, tokens: int, work: int, deadline: float, share: float) -> bool:
        return not self.guards_forwards or self.engine.forward_keeps(tokens, work, deadline, share)

    def stall_keeps(self, tokens: int, work: int) -> bool:
        return not self.guards_stalls or self.engine.stall_keeps(tokens, work)
