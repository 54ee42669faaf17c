"""A request's life at the gateway: the moves it may make, and what an early end leaves to clean up."""

from __future__ import annotations

import pytest

from gateway.request_stages import EXIT_CLEAN_UP, LIVE, CleanUp, Stage
from gateway.request_state import Progress


def test_what_an_early_end_cleans_up_depends_on_the_stage_alone():
    assert EXIT_CLEAN_UP[Stage.RESERVING] == CleanUp()
    assert EXIT_CLEAN_UP[Stage.RESERVED] == CleanUp(release=True)
    assert EXIT_CLEAN_UP[Stage.PREFILLING] == CleanUp(abort_prefill=True, release=True)
    assert EXIT_CLEAN_UP[Stage.PREFILLED] == CleanUp(release=True)
    assert EXIT_CLEAN_UP[Stage.COMMITTING] == CleanUp(release=True, abort_decode=True)
    assert EXIT_CLEAN_UP[Stage.STREAMING] == CleanUp(abort_decode=True)
    assert EXIT_CLEAN_UP[Stage.DONE] == CleanUp()
    assert set(EXIT_CLEAN_UP) == LIVE | {Stage.DONE}


def test_a_request_moves_only_forward_and_ends_once():
    p = Progress(started=0.0)
    p.reserved(None, "lease-1")  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        p.to(Stage.STREAMING)  # no commit without a prefill
    p.prefilling(None)  # type: ignore[arg-type]
    p.attempt_forgotten()  # retried elsewhere: nothing held
    assert p.stage is Stage.RESERVING and p.lease_id == ""
    p.reserved(None, "lease-2")  # type: ignore[arg-type]
    assert p.end(Stage.CANCELLED) is Stage.RESERVED
    assert p.stage is Stage.CANCELLED and p.end(Stage.FAILED) is None
    p.to(Stage.PREFILLING)  # a step the torn-down task still takes changes nothing
    assert p.stage is Stage.CANCELLED


def test_an_abort_names_how_the_request_ended_and_a_finished_one_stays_done():
    aborted = Progress(started=0.0)
    aborted.abort_requested = True
    assert aborted.end(Stage.FAILED) is Stage.RESERVING and aborted.stage is Stage.ABORTED
    done = Progress(started=0.0, stage=Stage.STREAMING)
    done.to(Stage.DONE)
    assert done.end(Stage.CANCELLED) is Stage.DONE and done.stage is Stage.DONE
