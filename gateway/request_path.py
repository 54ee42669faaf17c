"""One request's path through the cluster as plain code (no I/O, no clock of its own): a
``RequestPath`` takes what happened (the request arrived; decode workers were asked; one reserved;
a worker was lost) and says what to do next, as a command: ``Refuse``, ``Wait`` (in the admission
queue), ``Reserve`` (ask these decode workers, in this order), ``Prefill`` (on this worker, or on
the decode worker itself), ``Retry`` or ``Fail``. The gateway's request flow runs its commands over
gRPC (``gateway.request_flow``, ``gateway.decode_reservation``, ``gateway.retries``); the simulated
gateway runs them on a virtual clock (``simulator.gateway``); both over worker state in the
router's shape (``gateway.worker_state``), so the two make one gateway's decisions (checked call by
call: ``tests/unit/test_conformance.py``)::

    arrived ─▶ TTFT guard (Refuse) ─▶ seek: never met anywhere (Refuse) / behind an easier waiter (Wait)
      / Reserve on the router's decode order ─▶ refused everywhere: Wait for admission or blocks, or Refuse
      ─▶ reserved: TTFT guard again, with its decode worker (Refuse) ─▶ prefill: Prefill on the router's
      first prefill worker, or locally; none left (Fail) ─▶ a worker lost before the first token: Retry / Fail

(what each request's outcome tells the guards: ``common.slo.promise_record``; its stages and clean-up:
``gateway.request_stages``). Every moment is the caller's, on the clock its guards read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic

from common.slo.admission_round import Demand
from common.slo.guard_reading import Readings
from gateway.path_rules import (AfterRefusals, PathPool, Refusal, after_refusals, blocks_wait_until, last_useful,
                                never_refusal, prefill_choice, retries_after_loss, ttft_deadline, ttft_refusal,
                                writer_may_still_write)
from gateway.prefix_view import PromptBlocks
from gateway.router import Router, W

# -- one request's path, as commands --

PREFILL_REFUSED = Refusal("RESOURCE_EXHAUSTED", "ttft_unattainable", "TTFT SLO unattainable: every prefill worker "
                          "that could take the prompt refused it, their queues (every gateway's) too long for its deadline")
QUEUED_BEHIND = Refusal("RESOURCE_EXHAUSTED", "decode_admission", "no decode worker admits the request: it waited "
                        "behind requests as easy to admit until its prefill could no longer finish in time")


@dataclass(frozen=True, slots=True)
class Refuse:
    refusal: Refusal


@dataclass(frozen=True, slots=True)
class Wait:
    """In the admission queue until a decode worker admits it on a turn, or ``last_useful`` (read
    with a round's readings, or none) has passed: then refused, with the last refusal seen (at
    first ``refusal``)."""

    last_useful: Callable[..., float]
    refusal: Refusal


@dataclass(frozen=True, slots=True)
class Reserve(Generic[W]):
    candidates: list[W]  # asked in this order; the first that admits it holds its lease


@dataclass(frozen=True, slots=True)
class Prefill(Generic[W]):
    worker: W
    local: bool  # the decode worker holding the lease computes the prompt itself


@dataclass(frozen=True, slots=True)
class Retry:
    """Give the try's lease back (quarantined when ``writer_may_still_write``), then seek again."""

    writer_may_still_write: bool


@dataclass(frozen=True, slots=True)
class Fail:
    """End the request with UNAVAILABLE: the cluster's fault (its lease given back as ``Retry`` says)."""

    message: str
    writer_may_still_write: bool = False


@dataclass(eq=False)
class RequestPath(Generic[W]):
    router: Router
    pool: PathPool[W]
    prompt: PromptBlocks
    ttft_s: float  # 0: none
    tpot_s: float
    demand: Demand
    arrived: float  # when its TTFT counts from, on the guards' clock
    clock: Callable[[], float]  # the guards' clock (its deadlines are on it)
    client_deadline: float | None = None  # when its client stops waiting; None: never
    attempt: int = 1  # its try at a first token
    avoid: dict[str, set[str]] = field(default_factory=lambda: {"prefill": set(), "decode": set()})  # lost on earlier tries
    refused_prefill: set[str] = field(default_factory=set)  # prefill workers that refused this try's prompt

    @property
    def deadline(self) -> float:
        return ttft_deadline(self.arrived, self.ttft_s)

    @property
    def waits_for_admission(self) -> bool:
        """Under the TTFT guard a request with a TTFT SLO waits while its deadline allows."""
        return self.router.ttft_guard and bool(self.ttft_s)

    def on_arrival(self, now: float) -> Refuse | None:
        """Before any work: refused when no worker is predicted to return its first token in time."""
        return self._ttft(now)

    def seek(self, now: float, behind_one_no_harder: bool) -> Refuse | Wait | Reserve[W] | Fail:
        """A decode reservation (each try's): ``behind_one_no_harder``, the admission queue holds a
        waiter no harder to admit (``AdmissionPump.holds_one_no_harder``)."""
        never = never_refusal(self.tpot_s, [w.tpot_alone_s for w in self.pool.routable("decode")])
        if never is not None:
            return Refuse(never)
        if self.waits_for_admission and behind_one_no_harder:
            return Wait(self.last_useful, QUEUED_BEHIND)
        return self.reserve()

    def reserve(self) -> Reserve[W] | Fail:
        """The decode workers to ask now (at its seek, and on each turn in the admission queue):
        the router's order, less those lost on earlier tries."""
        candidates = [w for w in self.router.decode_candidates(self.pool, self.tpot_s, self.prompt)
                      if w.worker_id not in self.avoid["decode"]]
        return Reserve(candidates) if candidates else Fail("no decode worker is available")

    def refused_everywhere(self, now: float, blocks_only: bool, refusal: Refusal) -> Wait | Refuse:
        """Every candidate refused it (``refusal``, as the gateway words it; ``blocks_only``: for
        want of KV blocks alone)."""
        then = after_refusals(self.router.ttft_guard, self.ttft_s, blocks_only)
        if then is AfterRefusals.WAIT_FOR_ADMISSION:
            return Wait(self.last_useful, refusal)
        if then is AfterRefusals.WAIT_FOR_BLOCKS:
            until = blocks_wait_until(now, self.deadline, self.client_deadline)
            return Wait(lambda readings=None: until, refusal)
        return Refuse(refusal)

    def reserved(self, decode: W, now: float) -> Refuse | None:
        """It holds a lease on ``decode``: refused (its lease given back) when the wait, or the
        reservation itself, used up its slack."""
        return self._ttft(now, decode)

    def prefill(self, decode: W, decode_cached_tokens: int, now: float,
                pairs: Callable[[W], bool] = lambda w: True) -> Prefill[W] | Refuse | Fail:
        """Where its prompt is computed (``prefill_choice``, avoiding workers lost on earlier tries
        and those that refused it on this one); none left after refusals: refused."""
        choice = prefill_choice(self.router, self.pool, self.prompt, self.deadline, self.ttft_s, decode,
                                decode_cached_tokens, now, self.avoid["prefill"] | self.refused_prefill, pairs)
        if choice is not None:
            return Prefill(*choice)
        if self.refused_prefill:
            return Refuse(PREFILL_REFUSED)
        return Fail("no prefill worker is available")

    def prefill_refused(self, worker_id: str) -> None:
        """A prefill worker refused its prompt: its own queue (every gateway's prompts) says the
        first token would be late there. The next ``prefill`` asks another."""
        self.refused_prefill.add(worker_id)

    def lost(self, role: str, worker: W | None, why: str) -> Retry | Fail:
        """A worker of ``role`` was lost before its first token (``worker``: its state, still
        registered, or None): tried again on the others while tries are left, the lost worker out
        of routing until its next heartbeat."""
        writing = writer_may_still_write(role)
        if not retries_after_loss(self.attempt):
            return Fail(f"{why} (after {self.attempt} attempts)", writing)
        if worker is not None:
            self.avoid[role].add(worker.worker_id)
            worker.suspect = True
        self.attempt += 1
        self.refused_prefill.clear()
        return Retry(writing)

    def last_useful(self, readings: Readings | None = None, now: float | None = None) -> float:
        """The last moment a decode admission still lets its prefill finish by its deadline."""
        return last_useful(self.pool, self.prompt, self.deadline, self.clock() if now is None else now,
                           self.ttft_s, readings)

    def _ttft(self, now: float, decode: W | None = None) -> Refuse | None:
        if not self.router.ttft_guard:
            return None
        refusal = ttft_refusal(self.pool, self.prompt, self.ttft_s, self.arrived, now, decode)
        return None if refusal is None else Refuse(refusal)
