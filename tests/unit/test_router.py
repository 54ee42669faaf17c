"""The TTFT guard's view of a prefill queue: least slack first, so only earlier deadlines are ahead."""

from __future__ import annotations

import pytest

from common.slo.load_report import LoadReport
from common.slo.class_margins import ClassMargins
from common.slo.ttft_guard import TtftGuard
from common.rpc.convert import prefill_model_from_proto
from gateway.registry import WorkerRecord, WorkerRegistry
from wire.v1 import worker_pb2


def _worker(queued: dict[str, tuple[float, int]], reported_tokens: int = 0, tested: bool = True) -> WorkerRecord:
    """A prefill worker with a fitted model; ``tested``: one call observed, exactly as predicted."""
    cost = worker_pb2.CostModel(present=True, prefill_threshold=100, prefill_base_s=0.010, prefill_per_token_s=1e-4)
    descriptor = worker_pb2.WorkerDescriptor(cost_model=cost)
    load = LoadReport(queued_tokens=reported_tokens)
    record = WorkerRecord(descriptor=descriptor, load=load, last_seen=0.0, heard_at=0.0, channel=None, stub=None,  # type: ignore[arg-type]
                          ttft=TtftGuard(prefill_model_from_proto(descriptor.cost_model), descriptor.max_num_tokens,
                                         headrooms=ClassMargins(1.0)))  # predictions exactly as the fit
    record.guard.queued.update({rid: (*q, 0.0) for rid, q in queued.items()})  # sent before the worker's report: it counts them
    record.guard.heard(load.queued_tokens, load.running)
    if tested:
        record.guard.calibration.observe(0.010, 0.010)
    return record


def test_earlier_deadlines_and_what_the_forward_under_way_may_hold_are_ahead():
    worker = _worker({"oldest": (5.0, 300), "urgent": (1.0, 200), "loose": (9.0, 400)})
    # brute force over the queue as the worker's scheduler orders it (least slack first), with a
    # forward of later requests possibly under way: the whole queue when one forward takes it all
    assert all(worker.guard.queued_ahead(deadline=d) == 900 for d in (0.5, 2.0, 6.0, float("inf")))
    worker.guard.forward_tokens = 350  # at most 350 tokens, or the oldest request whole, are running
    assert worker.guard.queued_ahead(deadline=2.0) == 200 + 350  # urgent, plus one forward
    assert worker.guard.queued_ahead(deadline=6.0) == 200 + 300 + 350  # urgent and oldest, plus one forward
    assert worker.guard.queued_ahead(deadline=0.5) == 350
    assert worker.guard.queued_ahead(deadline=float("inf")) == 900


def test_work_from_other_gateways_counts_as_ahead_and_predictions_use_the_fit():
    worker = _worker({"mine": (1.0, 200)}, reported_tokens=700)
    assert worker.guard.queued_ahead(deadline=0.5) == 200 + 500
    # 700 ahead + 50 of its own through 10 ms + 0.1 ms/token above 100 tokens
    assert worker.guard.predict_s(50, deadline=0.5, calibrated=False) == pytest.approx(0.010 + 1e-4 * 650)


def test_a_newcomer_is_not_sent_where_it_would_make_a_queued_request_late():
    # "queued" alone: 10 ms + 0.1 ms x (300 - 100) = 30 ms, due at 50 ms: on time
    worker = _worker({"queued": (0.050, 300)})
    # an earlier deadline goes ahead of it: 200 more tokens -> 50 ms, still on time
    assert not worker.guard.pushes_queued_past(200, deadline=0.020, now=0.0)
    # 250 more tokens -> 55 ms: it would be late
    assert worker.guard.pushes_queued_past(250, deadline=0.020, now=0.0)
    # a later deadline queues behind it and delays nobody
    assert not worker.guard.pushes_queued_past(5000, deadline=0.060, now=0.0)


def test_a_queued_request_already_predicted_late_does_not_block_newcomers():
    worker = _worker({"doomed": (0.020, 300)})  # predicted 30 ms, due at 20 ms
    assert not worker.guard.pushes_queued_past(250, deadline=0.010, now=0.0)


def routable_guards(registry: WorkerRegistry) -> list[TtftGuard]:
    return [w.guard for w in registry.routable("prefill")]


def check_ttft(registry: WorkerRegistry, tokens: int, ttft_ms: float, started: float) -> None:
    """The gateway's TTFT check now (``path_rules.ttft_refusal``), as the error it ends the request in."""
    import time

    from gateway.decode_reservation import refusal_error
    from gateway.path_rules import ttft_refusal
    from gateway.prefix_view import PromptBlocks

    refusal = ttft_refusal(registry, PromptBlocks([0] * tokens), ttft_ms / 1000, started, time.perf_counter())
    if refusal is not None:
        raise refusal_error(refusal)


def best_prefill_now_s(registry: WorkerRegistry, tokens: int, deadline: float) -> float:
    import time

    from common.slo.ttft_decision import best_prefill_s

    return best_prefill_s(routable_guards(registry), tokens, deadline, time.perf_counter())


def _registry(*workers: WorkerRecord) -> WorkerRegistry:
    registry = WorkerRegistry(timeout_s=60)
    for i, worker in enumerate(workers):
        worker.descriptor.worker_id, worker.descriptor.role = f"prefill-{i}", "prefill"
        worker.ready = True
        registry.workers[worker.worker_id] = worker
    return registry


def test_the_ttft_guard_refuses_when_every_worker_would_make_a_queued_request_late():
    import time

    import grpc

    from gateway.errors import RequestError

    now = time.perf_counter()
    crowded = _worker({"queued": (now + 0.050, 300)})  # predicted 30 ms, due in 50 ms
    registry = _registry(crowded)
    # 250 tokens ahead of it would make it late (55 ms): no worker is usable
    assert best_prefill_now_s(registry, 250, deadline=now + 0.020) == float("inf")
    with pytest.raises(RequestError) as refused:
        check_ttft(registry, 250, ttft_ms=20, started=now)
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.value.reason == "ttft_unattainable"
    assert "queued requests" in refused.value.message
    # a second, idle worker serves it: 10 ms + 0.1 ms x 150 = 25 ms (uncalibrated)
    registry = _registry(crowded, _worker({}))
    assert best_prefill_now_s(registry, 250, deadline=now + 0.020) == pytest.approx(0.025)


def test_the_ttft_guard_refuses_what_the_best_worker_is_predicted_to_serve_too_late():
    import time

    from gateway.errors import RequestError

    now = time.perf_counter()
    registry = _registry(_worker({}), _worker({"urgent": (now + 0.001, 400)}))
    # best: the idle worker, 10 ms + 0.1 ms x (250 - 100) = 25 ms; the busy one would need 65 ms
    check_ttft(registry, 250, ttft_ms=40, started=now)
    with pytest.raises(RequestError) as refused:
        check_ttft(registry, 250, ttft_ms=20, started=now)
    assert "predicted to need 25 ms" in refused.value.message and refused.value.reason == "ttft_unattainable"


def test_an_idle_worker_no_call_has_tested_yet_never_refuses_on_its_model_alone():
    import time


    now = time.perf_counter()
    untested = _worker({}, tested=False)
    assert best_prefill_now_s(_registry(untested), 250, deadline=now + 0.001) == 0.0
    check_ttft(_registry(untested), 250, ttft_ms=1, started=now)  # the first call teaches the calibration
    busy = _worker({"queued": (now + 5.0, 300)}, tested=False)
    assert best_prefill_now_s(_registry(busy), 250, deadline=now + 0.001) > 0.0  # busy: the model decides


async def test_a_prefill_worker_gets_its_guard_at_registration_and_heartbeats_update_it():
    registry = WorkerRegistry(timeout_s=60)
    cost = worker_pb2.CostModel(present=True, prefill_threshold=100, prefill_base_s=0.010, prefill_per_token_s=1e-4)
    prefill = registry.register(worker_pb2.WorkerDescriptor(worker_id="p", role="prefill", cost_model=cost,
                                                            max_num_tokens=256, address="127.0.0.1:1"),
                                worker_pb2.WorkerLoad(queued_tokens=50))
    decode = registry.register(worker_pb2.WorkerDescriptor(worker_id="d", role="decode", address="127.0.0.1:2"),
                               worker_pb2.WorkerLoad())
    assert decode.ttft is None and prefill.ttft is not None
    assert prefill.guard.model is not None and prefill.guard.model.predict(300) == pytest.approx(0.030)
    assert prefill.guard.forward_tokens == 256 and prefill.guard.queued_ahead(float("inf")) == 50
    registry.heartbeat("p", worker_pb2.WorkerLoad(queued_tokens=0, running=1))
    assert prefill.guard.queued_ahead(float("inf")) == 0 and not prefill.guard.idle_and_untested()
    fcfs = registry.register(worker_pb2.WorkerDescriptor(worker_id="q", role="prefill", address="127.0.0.1:3"),
                             worker_pb2.WorkerLoad())
    assert fcfs.guard.model is None and fcfs.guard.predict_s(100) is None
