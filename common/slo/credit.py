"""Credit-based batching for decode (SCORPIO's TPOT guard, in the scheduler; its admission
side is ``common.slo.tpot_guard``).

Each step every running request ``r`` earns ``TRP(r) = min_{r'} TPOT_SLO(r') / TPOT_SLO(r)``
credit and runs in the step when its credit reaches 1, paying 1. The tightest requests run
every step; a request with twice the TPOT budget runs every other step, freeing capacity.
``VBS(R) = Σ TRP(r)`` is the batch size the step-time model should be asked about.
"""

from __future__ import annotations

from collections.abc import Mapping


def trp(tpot_slos: Mapping[str, float]) -> dict[str, float]:
    tightest = min(tpot_slos.values())
    return {rid: tightest / slo for rid, slo in tpot_slos.items()}


def virtual_batch_size(tpot_slos: Mapping[str, float]) -> float:
    return sum(trp(tpot_slos).values()) if tpot_slos else 0.0


class CreditBatcher:
    def __init__(self) -> None:
        self._credit: dict[str, float] = {}
        self._slos: dict[str, float] = {}  # the set TRP was last computed for
        self._trp: dict[str, float] = {}
        self.chosen: set[str] = set()  # the last step's selection

    def select(self, tpot_slos: dict[str, float]) -> set[str]:
        """The requests that run this step. TRP is recomputed whenever the set changes, so when
        the tightest request leaves, the others speed up at once."""
        if tpot_slos is not self._slos and tpot_slos != self._slos:
            for gone in set(self._credit) - set(tpot_slos):
                del self._credit[gone]
            self._slos = tpot_slos  # the caller's: a run ahead passes the same dict each step
            self._trp = trp(tpot_slos) if tpot_slos else {}
        if not tpot_slos:
            self.chosen = set()
            return self.chosen
        chosen = set()
        for rid, earned in self._trp.items():
            credit = self._credit.get(rid, 1.0 - earned) + earned  # a newcomer runs in its first step
            if credit >= 1.0 - 1e-9:
                credit -= 1.0
                chosen.add(rid)
            self._credit[rid] = credit
        self.chosen = chosen
        return chosen

    def joined(self, request_id: str) -> None:
        """The request just produced a token outside the selection (its first): it starts from
        no credit, as if selected in this step, rather than as a newcomer due at once."""
        self._credit[request_id] = 0.0


    def credits(self) -> dict[str, float]:
        """A copy of every request's credit: what ``restore`` takes back to (a simulator's rewind)."""
        return dict(self._credit)

    def restore(self, credits: dict[str, float]) -> None:
        self._credit = dict(credits)
