"""The serving policies, in one place: which SLO guards each runs.

    fcfs        no guard: every request admitted, served in arrival order
    scorpio     both guards (SCORPIO): the TTFT guard refuses what it predicts too late and orders
                prefill by least slack; the TPOT guard admits by VBS and batches by credit
    ttft_guard  the TTFT guard alone
    tpot_guard  the TPOT guard alone

Configurations hold the policy's name (the string a flag gives); these read it.
"""

from __future__ import annotations

from enum import Enum


class Policy(str, Enum):
    FCFS = "fcfs"
    SCORPIO = "scorpio"
    TTFT_GUARD = "ttft_guard"
    TPOT_GUARD = "tpot_guard"

    @property
    def ttft_guard(self) -> bool:
        """Whether it refuses requests predicted too late and orders prefill by deadline."""
        return self in (Policy.SCORPIO, Policy.TTFT_GUARD)

    @property
    def tpot_guard(self) -> bool:
        """Whether it admits decodes by VBS and batches them by credit."""
        return self in (Policy.SCORPIO, Policy.TPOT_GUARD)


POLICIES = tuple(p.value for p in Policy)
_BY_NAME = {p.value: p for p in Policy}


def policy(name: str) -> Policy:
    """The policy of that name (read every scheduler step: a plain lookup); ValueError naming the
    choices otherwise."""
    found = _BY_NAME.get(name)
    if found is None:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {name!r}")
    return found
