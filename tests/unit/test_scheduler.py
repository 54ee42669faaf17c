"""The scheduler alone, driven by fabricated model outputs (no forward pass)."""

from __future__ import annotations

from common.engine.block_pool import BlockPool
from common.engine.request import Request, RequestStatus
from common.model.sampling_params import SamplingParams
from common.engine.scheduler import Scheduler, SchedulerConfig


def _scheduler(blocks: int, policy: str = "max_utilization", batch: int = 8, tokens: int = 64) -> Scheduler:
    config = SchedulerConfig(max_batch_size=batch, max_num_tokens=tokens, block_size=4, max_model_len=1024,
                             memory_policy=policy, eos_token_ids=(0,))
    return Scheduler(config, BlockPool(blocks))


def _request(rid: str, prompt_len: int, max_tokens: int = 8) -> Request:
    return Request(rid, [5] * prompt_len, SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def _step(s: Scheduler):  # type: ignore[no-untyped-def]
    batch = s.schedule()
    s.update_from_output(batch, {seq.request_id: 7 for seq in batch.seqs if seq.sample})
    return batch


def test_decodes_are_scheduled_before_prompt_chunks_within_the_token_budget():
    s = _scheduler(blocks=64, tokens=10)
    s.add(_request("a", 3))
    _step(s)  # a prefilled, now decoding
    s.add(_request("b", 30))
    batch = _step(s)
    assert [(q.request_id, len(q.token_ids)) for q in batch.seqs] == [("a", 1), ("b", 9)]
    assert not batch.seqs[1].sample  # b's prompt is only partly computed
    s.pool.check_integrity()


def test_max_batch_size_caps_running_requests():
    s = _scheduler(blocks=64, batch=2)
    for rid in "abc":
        s.add(_request(rid, 2))
    batch = _step(s)
    assert {q.request_id for q in batch.seqs} == {"a", "b"}
    assert [r.request_id for r in s.waiting] == ["c"]


def test_guaranteed_no_evict_reserves_prompt_plus_max_tokens_at_admission():
    s = _scheduler(blocks=5, policy="guaranteed_no_evict")
    s.add(_request("a", 4, max_tokens=12))  # 16 tokens -> 4 blocks of 4
    s.add(_request("b", 4, max_tokens=12))
    _step(s)
    assert len(s.requests["a"].block_ids) == 4
    assert [r.request_id for r in s.waiting] == ["b"]  # only 1 block left
    for _ in range(12):
        _step(s)
    assert "a" not in s.requests and s.requests["b"].status == RequestStatus.RUNNING


def test_max_utilization_preempts_the_most_recently_admitted_request():
    s = _scheduler(blocks=3, policy="max_utilization")
    s.add(_request("a", 4, max_tokens=8))
    s.add(_request("b", 4, max_tokens=8))
    _step(s)  # a and b hold one full block each
    _step(s)  # both need a second block: only one is free, so b (newest) is preempted
    b = s.requests["b"]
    assert b.status == RequestStatus.PREEMPTED and b.block_ids == [] and b.num_computed_tokens == 0
    assert s.waiting[0] is b and len(b.output_token_ids) == 1  # keeps its tokens, recomputed later
    s.pool.check_integrity()


def test_request_finishes_when_max_tokens_is_reached_and_frees_its_blocks():
    s = _scheduler(blocks=8)
    s.add(_request("a", 2, max_tokens=3))
    outputs = []
    for _ in range(3):
        batch = s.schedule()
        outputs += s.update_from_output(batch, {q.request_id: 9 for q in batch.seqs})
    assert [o.finished for o in outputs] == [False, False, True] and outputs[-1].finish_reason == "length"
    assert s.pool.num_free == 8


def test_aborting_a_waiting_request_removes_it_without_touching_blocks():
    s = _scheduler(blocks=8)
    s.add(_request("a", 2))
    assert s.abort("a")
    outputs = s.apply_aborts()
    assert [(o.request_id, o.finish_reason) for o in outputs] == [("a", "abort")]
    assert not s.waiting and not s.has_unfinished()


def _slo_scheduler(policy: str) -> Scheduler:
    config = SchedulerConfig(max_batch_size=8, max_num_tokens=64, block_size=4, max_model_len=1024,
                             memory_policy="guaranteed_no_evict", eos_token_ids=(0,), policy=policy)
    return Scheduler(config, BlockPool(64))


def test_scorpio_decodes_tpot_slos_2_4_6_every_1_2_and_3_steps():
    s = _slo_scheduler("scorpio")
    for rid, tpot in (("a", 2.0), ("b", 4.0), ("c", 6.0)):
        request = _request(rid, 2, max_tokens=40)
        request.tpot_slo_ms = tpot
        s.add(request)
    _step(s)  # prefill all three
    ran: dict[str, int] = {"a": 0, "b": 0, "c": 0}
    for _ in range(12):
        for seq in _step(s).seqs:
            ran[seq.request_id] += 1
    assert ran == {"a": 12, "b": 6, "c": 4}


def test_fcfs_runs_every_decode_every_step():
    s = _slo_scheduler("fcfs")
    for rid, tpot in (("a", 2.0), ("b", 6.0)):
        request = _request(rid, 2, max_tokens=40)
        request.tpot_slo_ms = tpot
        s.add(request)
    _step(s)
    assert all(len(_step(s).seqs) == 2 for _ in range(6))


def test_ttft_guard_prefills_the_earliest_deadline_first():
    s = _slo_scheduler("ttft_guard")
    s.config = SchedulerConfig(1, 64, 4, 1024, "guaranteed_no_evict", (0,), "ttft_guard")  # one at a time
    for rid, ttft, arrival in (("late", 5000.0, 0.0), ("soon", 100.0, 0.5), ("none", 0.0, 0.1)):
        request = _request(rid, 3, max_tokens=1)
        request.ttft_slo_ms, request.arrival_time = ttft, arrival
        s.add(request)
    order = [_step(s).seqs[0].request_id for _ in range(3)]
    assert order == ["soon", "late", "none"]


def test_a_fast_forward_of_decode_steps_leaves_what_as_many_single_steps_leave():
    """``advance_decodes`` (the simulator's fast-forward) against real steps, credit batching included."""
    from common.engine.block_pool import BlockPool
    from common.engine.request import Request
    from common.engine.run_ahead import advance_decodes
    from common.model.sampling_params import SamplingParams
    from common.engine.scheduler import Scheduler, SchedulerConfig

    def scheduler() -> Scheduler:
        s = Scheduler(SchedulerConfig(8, 512, 16, 4096, "guaranteed_no_evict", (), "scorpio"), BlockPool(256))
        for rid, slo in (("a", 20.0), ("b", 40.0), ("c", 60.0)):
            s.add(Request(rid, [1] * 30, SamplingParams(max_tokens=50, ignore_eos=True), tpot_slo_ms=slo))
        batch = s.schedule()  # the prompts
        s.update_from_output(batch, {q.request_id: 7 for q in batch.seqs})
        return s

    stepped, forwarded = scheduler(), scheduler()
    for _ in range(12):
        batch = stepped.schedule()
        stepped.update_from_output(batch, {q.request_id: 7 for q in batch.seqs})
    produced: dict[str, int] = {}
    for _ in range(12):
        for rid in forwarded.credit_selection(forwarded.running) or ():
            produced[rid] = produced.get(rid, 0) + 1
    advance_decodes(forwarded, produced, 7)
    for rid in ("a", "b", "c"):
        a, b = stepped.requests[rid], forwarded.requests[rid]
        assert (a.output_token_ids, a.num_computed_tokens) == (b.output_token_ids, b.num_computed_tokens)
    assert [len(stepped.requests[r].output_token_ids) for r in "abc"] == [13, 7, 5]  # every 1, 2, 3 steps
    batch = stepped.schedule()  # and the credit left behind is the same
    assert {q.request_id for q in batch.seqs} == {q.request_id for q in forwarded.schedule().seqs}


def test_under_credit_batching_a_request_waits_a_credit_period_after_its_first_token():
    """The token a request samples when it joins (its prompt's last chunk, or its first step after
    a commit) counts: the next one comes 1/TRP steps later, not in the very next step."""
    from common.engine.block_pool import BlockPool
    from common.engine.request import Request
    from common.model.sampling_params import SamplingParams
    from common.engine.scheduler import Scheduler, SchedulerConfig

    s = Scheduler(SchedulerConfig(8, 512, 16, 4096, "guaranteed_no_evict", (), "scorpio"), BlockPool(256))
    s.add(Request("tight", [1] * 8, SamplingParams(max_tokens=50, ignore_eos=True), tpot_slo_ms=10.0))
    s.add(Request("loose", [1] * 8, SamplingParams(max_tokens=50, ignore_eos=True), tpot_slo_ms=30.0))
    ran: dict[str, list[int]] = {"tight": [], "loose": []}
    for step in range(10):
        batch = s.schedule()
        for q in batch.seqs:
            if q.sample:
                ran[q.request_id].append(step)
        s.update_from_output(batch, {q.request_id: 3 for q in batch.seqs if q.sample})
    assert ran["tight"] == list(range(10))  # the prompt's token at step 0, then every step
    assert ran["loose"] == [0, 3, 6, 9]  # the prompt's token at step 0, then every third step


def test_a_step_names_the_decodes_credit_batching_holds_back():
    s = _slo_scheduler("scorpio")
    requests = {}
    for rid, tpot in (("a", 2.0), ("b", 4.0)):
        requests[rid] = request = _request(rid, 2, max_tokens=40)
        request.tpot_slo_ms = tpot
        s.add(request)
    _step(s)  # prefill both
    steps = [_step(s) for _ in range(4)]
    for batch in steps:
        ran = {seq.request_id for seq in batch.seqs}
        assert set(batch.resting) == {requests[r].uid for r in ("a", "b") if r not in ran}
    assert any(batch.resting for batch in steps)  # b rests every other step
    assert not _slo_scheduler("fcfs").schedule().resting
