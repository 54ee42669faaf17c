"""One request's life at the gateway as a state machine, and what an early end leaves to clean up,
as plain data: the gateway's request flow (``gateway.request_state.Progress``) and the simulated
gateway (``simulator.flight.Flight``) move through these stages and clean up by this table.

::

    RESERVING ──▶ RESERVED ──▶ PREFILLING ──▶ PREFILLED ──▶ COMMITTING ──▶ STREAMING ──▶ DONE
        ▲            │              │             │  └──────────────────────────────────▲
        └────────────┴──────────────┴─────────────┘   (finished at the first token)
          lease given back, attempt forgotten (retry)

Any stage but DONE may end early: FAILED (an error ends it), ABORTED (after an Abort), or
CANCELLED (the RPC went away: client cancel, deadline). What the workers still hold then
is a function of the stage it ended in alone (``EXIT_CLEAN_UP``); whatever a stage gives
back before moving on (a lease after a late TTFT refusal, an attempt before a retry) it gives
back itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Stage(enum.Enum):
    RESERVING = "reserving"  # no lease held: asking decode workers for one (or gave it back)
    RESERVED = "reserved"  # a lease on a decode worker; no prefill sent into it
    PREFILLING = "prefilling"  # a Prefill call is out: its worker may be writing into the lease
    PREFILLED = "prefilled"  # the first token is here and the copy is over; nothing decodes yet
    COMMITTING = "committing"  # Commit sent: the decode worker may have started decoding
    STREAMING = "streaming"  # committed: the decode worker holds the blocks for the request
    DONE = "done"  # the last message went to the client
    FAILED = "failed"  # ended early by an error
    ABORTED = "aborted"  # ended early after an Abort
    CANCELLED = "cancelled"  # ended early: the RPC went away (client cancel, deadline)


LIVE = frozenset({Stage.RESERVING, Stage.RESERVED, Stage.PREFILLING, Stage.PREFILLED, Stage.COMMITTING,
                  Stage.STREAMING})
EARLY_ENDS = frozenset({Stage.FAILED, Stage.ABORTED, Stage.CANCELLED})
NEXT: dict[Stage, frozenset[Stage]] = {  # the moves a live request makes; any live stage may also end early
    Stage.RESERVING: frozenset({Stage.RESERVED}),
    Stage.RESERVED: frozenset({Stage.PREFILLING, Stage.RESERVING}),  # lease given back: TTFT refused after all
    # prefill worker lost: retry; or it refused the prompt (late there): another is asked, same lease
    Stage.PREFILLING: frozenset({Stage.PREFILLED, Stage.RESERVING, Stage.RESERVED}),
    Stage.PREFILLED: frozenset({Stage.COMMITTING, Stage.DONE, Stage.RESERVING}),  # decode worker lost: retry
    Stage.COMMITTING: frozenset({Stage.STREAMING}),
    Stage.STREAMING: frozenset({Stage.DONE, Stage.RESERVING}),  # decode worker lost: resumed on another
}


@dataclass(frozen=True, slots=True)
class CleanUp:
    """What an early end in one stage leaves to do on the workers, in this order."""

    abort_prefill: bool = False  # stop the prefill; unless its worker confirms no copy runs, quarantine the lease
    release: bool = False  # give the lease back (blocks reused, or quarantined as above)
    abort_decode: bool = False  # stop the request on the decode worker


EXIT_CLEAN_UP: dict[Stage, CleanUp] = {
    Stage.RESERVING: CleanUp(),  # a reservation whose reply comes later is released on arrival
    Stage.RESERVED: CleanUp(release=True),
    Stage.PREFILLING: CleanUp(abort_prefill=True, release=True),
    Stage.PREFILLED: CleanUp(release=True),
    Stage.COMMITTING: CleanUp(release=True, abort_decode=True),  # either order on the worker frees it
    Stage.STREAMING: CleanUp(abort_decode=True),  # the lease became the running request
    Stage.DONE: CleanUp(),
}


def next_stage(current: Stage, stage: Stage) -> Stage:
    """``stage``, when a live request in ``current`` may move there (``NEXT``); anything else is a bug."""
    if stage not in NEXT.get(current, frozenset()):
        raise AssertionError(f"request cannot go from {current.value} to {stage.value}")
    return stage
