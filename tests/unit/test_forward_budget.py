"""The cut of prefill forwards under a TTFT guard (``common.slo.forward_budget``), the scheduler
that applies it, and the gateway's guard that predicts queues with it."""

from __future__ import annotations

import pytest

from common.engine.block_pool import BlockPool
from common.engine.request import Request
from common.model.sampling_params import SamplingParams
from common.engine.scheduler import Scheduler, SchedulerConfig
from common.slo.cost_models import PrefillModel
from common.slo.forward_budget import TightestSlo, forward_budget
from common.slo.ttft_guard import new_guard

LINEAR = PrefillModel(threshold=0, base_s=0.002, per_token_s=1e-4)  # 2 ms + 0.1 ms a token


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_forward_is_cut_to_the_share_of_the_tightest_slo_by_brute_force():
    for ttft_s in (0.02, 0.05, 0.1, 0.3):
        cut = forward_budget(LINEAR, ttft_s, 4096)
        # brute force: the largest token count whose forward the model puts under half the SLO
        expected = max(n for n in range(4097) if LINEAR.predict(n) < 0.5 * ttft_s)
        assert cut == max(expected, 21)  # 21: the fewest tokens whose forward is twice its fixed 2 ms
    assert forward_budget(LINEAR, None, 4096) == 4096  # no SLO seen: the configured budget
    assert forward_budget(LINEAR, 100.0, 4096) == 4096  # loose SLOs never raise it


def test_a_model_flat_in_tokens_is_never_cut():
    # every forward costs its fixed 10 ms: chunks would only multiply it
    assert forward_budget(PrefillModel(0, 0.010, 0.0), 0.005, 4096) == 4096


def test_the_tightest_slo_is_the_windows_minimum():
    clock = Clock()
    tightest = TightestSlo(window_s=10.0, clock=clock)
    assert tightest.value() is None
    tightest.observe(1.0)
    clock.now = 1.0
    tightest.observe(0.1)
    clock.now = 2.0
    tightest.observe(0.3)
    tightest.observe(0)  # no SLO: not seen
    assert tightest.value() == 0.1
    clock.now = 11.5  # 0.1 (seen at 1 s) has left the window; 0.3 (at 2 s) has not
    assert tightest.value() == 0.3
    clock.now = 12.5
    assert tightest.value() is None


def _prefill_scheduler(cap: int | None, keeps=None) -> Scheduler:
    """A prefill worker's scheduler under a TTFT guard whose forward budget is ``cap`` (None: the
    configured one) and whose forward test is ``keeps`` (None: every forward keeps its deadline)."""
    from types import SimpleNamespace

    from common.engine.step_policy import SloGuarded

    config = SchedulerConfig(max_batch_size=8, max_num_tokens=1000, block_size=4, max_model_len=2048,
                             memory_policy="guaranteed_no_evict", eos_token_ids=(0,), policy="scorpio")
    engine = SimpleNamespace(prefill_cap=lambda: 1000 if cap is None else cap,
                             forward_keeps=keeps or (lambda tokens, work, deadline, share: True),
                             all_fit=lambda *a: False, stall_keeps=lambda tokens, work: True)
    return Scheduler(config, BlockPool(512), SloGuarded(engine, ttft_guard=True, tpot_guard=False, conserves_work=False))


def _prompt(rid: str, tokens: int, ttft_ms: float) -> Request:
    request = Request(rid, [5] * tokens, SamplingParams(max_tokens=1, ignore_eos=True), prefill_only=True)
    request.ttft_slo_ms = ttft_ms
    return request


def test_the_scheduler_computes_no_more_prompt_tokens_a_step_than_the_cap():
    uncut, cut = _prefill_scheduler(None), _prefill_scheduler(300)
    for scheduler in (uncut, cut):
        for rid in ("a", "b", "c"):
            scheduler.add(_prompt(rid, 250, 1000.0))
    assert [len(s.token_ids) for s in uncut.schedule().seqs] == [250, 250, 250]  # all in one forward
    steps = []
    for _ in range(4):
        batch = cut.schedule()
        steps.append([(s.request_id, len(s.token_ids)) for s in batch.seqs])
        cut.update_from_output(batch, {s.request_id: 7 for s in batch.seqs if s.sample})
    # 300 tokens a forward, and a prompt that does not fit whole waits for the next rather than
    # lengthen this one with a chunk: one prompt a forward
    assert steps == [[("a", 250)], [("b", 250)], [("c", 250)], []]


def test_under_the_cut_a_prompt_longer_than_it_runs_in_chunks_of_it_first_in_each_forward():
    cut = _prefill_scheduler(300)
    cut.add(_prompt("long", 700, 1000.0))
    cut.add(_prompt("short", 100, 2000.0))
    steps = []
    for _ in range(4):
        batch = cut.schedule()
        steps.append([(s.request_id, len(s.token_ids)) for s in batch.seqs])
        cut.update_from_output(batch, {s.request_id: 7 for s in batch.seqs if s.sample})
    # the long prompt's chunks go first (begun prompts run before newcomers); the short one
    # joins the forward its whole prompt fits in
    assert steps == [[("long", 300)], [("long", 300)], [("long", 100), ("short", 100)], []]


def test_the_guard_predicts_a_queue_in_forwards_of_the_workers_cut():
    clock = Clock()
    guard = new_guard(LINEAR, 4096, clock=clock)
    guard.sent("loose", deadline=10.0, tokens=300, ttft_s=10.0)
    assert guard.forward_cut == 4096
    guard.sent("tight", deadline=0.1, tokens=300, ttft_s=0.1)
    cut = forward_budget(LINEAR, 0.1, 4096)
    assert guard.forward_cut == cut < 600
    # a request with a deadline after both: the queue and its prompt run in forwards of the cut
    assert guard.predict_s(300, deadline=20.0, calibrated=False) == pytest.approx(LINEAR.predict_forwards(900, cut))


def test_a_prompt_joins_a_forward_only_if_the_prompts_in_it_still_make_their_deadlines():
    seconds_per_token = 0.001
    now = 0.0
    scheduler = _prefill_scheduler(None, lambda tokens, work, deadline, share: tokens * seconds_per_token <= share * (deadline - now))
    tight = _prompt("tight", 200, 300.0)  # a 0.2 s forward alone, due at 0.3 s
    loose = _prompt("loose", 200, 1000.0)  # with it: 0.4 s, past tight's deadline
    small = _prompt("small", 50, 2000.0)
    for request in (tight, loose, small):
        request.arrival_time = 0.0
        scheduler.add(request)
    first = [s.request_id for s in scheduler.schedule().seqs]
    assert first == ["tight"]  # loose would make tight late; small waits behind loose (order kept)


def test_a_joiner_leaves_the_forwards_requests_half_their_time_for_the_first_token():
    def first_forward(tight_tokens: int, joiner_tokens: int) -> list[str]:
        scheduler = _prefill_scheduler(None, lambda tokens, work, deadline, share: tokens * 0.001 <= share * deadline)
        for request in (_prompt("tight", tight_tokens, 300.0), _prompt("joiner", joiner_tokens, 1000.0)):
            request.arrival_time = 0.0
            scheduler.add(request)
        return [s.request_id for s in scheduler.schedule().seqs]

    assert first_forward(100, 100) == ["tight"]  # 0.2 s: by the 0.3 s deadline, past half of it
    assert first_forward(50, 50) == ["tight", "joiner"]  # 0.1 s: within half


def test_a_prompt_may_join_the_forward_of_one_already_late():
    scheduler = _prefill_scheduler(None, lambda tokens, work, deadline, share: tokens * 0.001 <= share * deadline)
    late, loose = _prompt("late", 200, 100.0), _prompt("loose", 200, 1000.0)  # late: 0.2 s for 0.1 s
    for request in (late, loose):
        request.arrival_time = 0.0
        scheduler.add(request)
    assert [s.request_id for s in scheduler.schedule().seqs] == ["late", "loose"]


def test_the_deadline_is_what_the_gateway_left_of_the_slo():
    request = _prompt("r", 10, 1000.0)
    request.arrival_time = 5.0
    assert request.ttft_deadline == pytest.approx(6.0)
    request.ttft_left_ms = 250.0  # the gateway spent 750 ms of it before sending
    assert request.ttft_deadline == pytest.approx(5.25)


def test_a_joiner_is_weighed_with_the_attention_of_the_prompts_in_the_forward_not_their_total_squared():
    quadratic = PrefillModel(threshold=0, base_s=0.0, per_token_s=0.0, per_token2_s=1e-5)  # attention alone
    asked: list[tuple[int, int]] = []

    def keeps(tokens: int, work: int, deadline: float, share: float) -> bool:
        asked.append((tokens, work))
        return quadratic.predict(tokens, work) <= share * deadline

    scheduler = _prefill_scheduler(None, keeps)
    for request in (_prompt("tight", 100, 300.0), _prompt("joiner", 50, 1000.0)):
        request.arrival_time = 0.0
        scheduler.add(request)
    batch = scheduler.schedule()
    # with the joiner: 100² + 50² of work, 0.125 s, within half of tight's 0.3 s; counted as one
    # prompt of 150 tokens it was 0.225 s, and the joiner would have waited for another forward
    assert asked == [(100, 100**2), (150, 100**2 + 50**2)]
    assert [s.request_id for s in batch.seqs] == ["tight", "joiner"] and batch.attention_work == 100**2 + 50**2
