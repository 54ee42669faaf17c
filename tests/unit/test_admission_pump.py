"""The admission queue's state that the gateway and the simulator share: rounds least slack first,
a refusal skips every waiter at least as hard, a round asked for mid-round is owed, not lost."""

from __future__ import annotations

from common.slo.admission_pump import AdmissionPump
from common.slo.admission_round import Demand

WAITERS = {"urgent": (1.0, Demand(20)), "late": (3.0, Demand(20)), "loose": (2.0, Demand(50))}


def _pump(*names: str) -> AdmissionPump[str]:
    pump: AdmissionPump[str] = AdmissionPump(lambda w: WAITERS[w][1])
    for name in names:
        pump.join(name)
    return pump


def test_a_round_gives_turns_least_slack_first_and_skips_what_is_as_hard_as_a_refusal():
    pump = _pump("late", "urgent", "loose")
    assert pump.begin(lambda w: WAITERS[w][0])
    assert pump.turn() == "urgent"
    pump.report("urgent", False)  # refused: "late" (as tight, as large) would be too
    assert pump.turn() == "loose"
    pump.report("loose", True)
    pump.leave("loose")
    assert pump.turn() is None  # "late" skipped
    assert pump.waiters == ["late", "urgent"]


def test_a_round_asked_for_during_one_is_owed_and_a_waiter_gone_is_not_given_a_turn():
    pump = _pump("urgent", "late")
    assert pump.begin(lambda w: WAITERS[w][0])
    assert not pump.begin(lambda w: WAITERS[w][0])  # capacity freed mid-round
    assert pump.turn() == "urgent"
    pump.leave("late")  # its client went away
    pump.report("urgent", None)
    assert pump.turn() is None
    assert pump.owed() and not pump.owed()  # told once
    assert pump.begin(lambda w: WAITERS[w][0]) and pump.turn() == "urgent"


def test_a_newcomer_queues_behind_a_waiter_no_harder_to_admit():
    pump = _pump("loose")
    assert pump.holds_one_no_harder(Demand(20))  # a tighter newcomer: the looser waiter is no harder
    assert not _pump().holds_one_no_harder(Demand(20))
