"""Reserving a decode place at the gateway: a request that arrives while a waiter at least as easy
to admit is waiting queues behind it without a ``Reserve`` call of its own."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest

import gateway.decode_reservation as decode_reservation
from common.slo.admission_round import Demand
from gateway.admission import AdmissionQueue
from gateway.decode_reservation import DecodeReservations
from gateway.request_path import RequestPath
from wire.v1 import worker_pb2


class FakeStub:
    """A decode worker's ``Reserve``: admits while it has free places, refuses as VBS does otherwise."""

    def __init__(self) -> None:
        self.places = 0
        self.calls: list[str] = []

    async def Reserve(self, request: worker_pb2.ReserveRequest, timeout: float) -> worker_pb2.ReserveResponse:
        self.calls.append(request.request_id)
        if self.places == 0:
            raise grpc.aio.AioRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       "TPOT SLO unattainable")
        self.places -= 1
        return worker_pb2.ReserveResponse(lease_id=f"lease-{request.request_id}")


class FakeEpsilons:
    def margin(self, tpot_s: float) -> float:
        return 1.3

    def of(self, tpot_s: float) -> SimpleNamespace:
        return SimpleNamespace(refused=lambda: None)


def _request(request_id: str, tpot_ms: float) -> SimpleNamespace:
    return SimpleNamespace(request_id=request_id, prompt_token_ids=[1, 2, 3], params=SimpleNamespace(max_tokens=8),
                           tpot_ms=tpot_ms, ttft_ms=1000.0, deadline=None)


def _path(router: object, registry: object, req: SimpleNamespace, prompt: object,
          last_useful_at: float = float("inf")) -> RequestPath:
    """The request's path, its last useful moment for a decode admission pinned at ``last_useful_at``."""
    path = RequestPath(router, registry, prompt, req.ttft_ms / 1000, req.tpot_ms / 1000,  # type: ignore[arg-type]
                       Demand(req.tpot_ms, 3, 8), time.perf_counter(), time.perf_counter, req.deadline)
    path.last_useful = lambda readings=None, now=None: last_useful_at  # type: ignore[method-assign]
    return path


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


@pytest.fixture
def cluster() -> SimpleNamespace:
    stub = FakeStub()
    worker = SimpleNamespace(worker_id="decode-0", prefix=None, stub=stub, load=SimpleNamespace(tpot_alone_ms=0.0),
                             view=SimpleNamespace(epsilons=FakeEpsilons(), routed={}, handoff_s=lambda prior=0.0: prior))
    router = SimpleNamespace(ttft_guard=True, decode_candidates=lambda registry, tpot_s, prompt: [worker])
    queue = AdmissionQueue(tick_s=60)  # rounds only when notified
    registry = SimpleNamespace(routable=lambda role: [])
    reservations = DecodeReservations(registry, router, "stream", queue, lambda call: None)
    return SimpleNamespace(stub=stub, queue=queue, reservations=reservations, router=router, registry=registry)


async def test_a_newcomer_waits_behind_an_as_easy_waiter_without_a_call_and_a_looser_one_tries(cluster):
    prompt = SimpleNamespace(cached_hashes=lambda prefix: [])
    now = time.perf_counter()

    def reserve(request_id: str, tpot_ms: float, wait_s: float) -> asyncio.Task[object]:
        req = _request(request_id, tpot_ms)
        path = _path(cluster.router, cluster.registry, req, prompt, now + wait_s)  # may wait until then
        return asyncio.create_task(cluster.reservations.reserve(req, path))

    first = reserve("a", 50.0, 5.0)
    await settle()
    assert cluster.stub.calls == ["a"]  # nobody waited: it tried at once, was refused, and waits
    second = reserve("b", 50.0, 6.0)
    await settle()
    assert cluster.stub.calls == ["a"]  # "a" (as easy) waits: "b" joins the queue without a call
    looser = reserve("c", 100.0, 0.3)
    await settle()
    assert cluster.stub.calls == ["a", "c"]  # looser than every waiter: it may fit where they did not
    assert len(cluster.queue) == 3

    cluster.stub.places = 2
    cluster.queue.notify()  # places came free: a round, least slack first
    await settle()
    # "c" (least slack) is admitted; "a" too; "b" is refused, and no later waiter as tight is asked
    assert cluster.stub.calls == ["a", "c", "c", "a", "b"]
    assert (await looser)[1].lease_id == "lease-c" and (await first)[1].lease_id == "lease-a"
    assert not second.done()
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    await cluster.queue.close()


async def test_a_newcomer_that_queued_without_trying_is_refused_with_the_decode_admission_reason(cluster):
    prompt = SimpleNamespace(cached_hashes=lambda prefix: [])
    now = time.perf_counter()
    a, b = _request("a", 0.0), _request("b", 30.0)
    waiter = asyncio.create_task(cluster.reservations.reserve(a, _path(cluster.router, cluster.registry, a, prompt,
                                                                       now + 5.0)))
    await settle()
    with pytest.raises(decode_reservation.RequestError) as refused:
        # its last useful moment already past: it gives up at its first look, with no wait on the clock
        await cluster.reservations.reserve(b, _path(cluster.router, cluster.registry, b, prompt, now))
    assert cluster.stub.calls == ["a"]  # "b" never tried: the waiter without a TPOT SLO is the easiest
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.reason == "decode_admission"
    assert "no decode worker admits the request" in str(refused.value)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await cluster.queue.close()


class SilentStub:
    """A decode worker that reserves, but whose replies never reach the gateway (their deadline
    passes on the way); it records what is released."""

    def __init__(self) -> None:
        self.leases: set[str] = set()
        self.released: list[str] = []

    async def Reserve(self, request: worker_pb2.ReserveRequest, timeout: float) -> worker_pb2.ReserveResponse:
        self.leases.add(request.lease_id)
        raise grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   "Deadline Exceeded")

    async def Release(self, request: worker_pb2.ReleaseRequest, timeout: float) -> worker_pb2.ReleaseResponse:
        self.released.append(request.lease_id)
        self.leases.discard(request.lease_id)
        return worker_pb2.ReleaseResponse()


async def test_a_reserve_whose_reply_is_lost_to_the_clients_deadline_releases_the_lease_it_named():
    stub = SilentStub()
    worker = SimpleNamespace(worker_id="decode-0", prefix=None, stub=stub, load=SimpleNamespace(tpot_alone_ms=0.0),
                             view=SimpleNamespace(epsilons=FakeEpsilons(), routed={}, handoff_s=lambda prior=0.0: prior))
    router = SimpleNamespace(ttft_guard=False, decode_candidates=lambda registry, tpot_s, prompt: [worker])
    spawned: list[asyncio.Task[None]] = []
    reservations = DecodeReservations(SimpleNamespace(routable=lambda role: []), router, "stream",
                                      AdmissionQueue(tick_s=60), lambda call: spawned.append(asyncio.ensure_future(call)))
    req = _request("a", 0.0)
    req.deadline = time.perf_counter() - 0.5  # the client stopped waiting
    registry = SimpleNamespace(routable=lambda role: [])
    with pytest.raises(decode_reservation.RequestError) as ended:
        await reservations.reserve(req, _path(router, registry, req, SimpleNamespace(cached_hashes=lambda prefix: [])))
    await asyncio.gather(*spawned)
    assert ended.value.code == grpc.StatusCode.DEADLINE_EXCEEDED  # the client's deadline, not the cluster's fault
    assert len(stub.released) == 1 and stub.leases == set()  # the lease the worker made is given back by name


class SlowStub:
    """A decode worker whose ``Reserve`` answers after a moment, admitting everything."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def Reserve(self, request: worker_pb2.ReserveRequest, timeout: float) -> worker_pb2.ReserveResponse:
        self.calls.append(request.request_id)
        await asyncio.sleep(0.01)
        return worker_pb2.ReserveResponse(lease_id=request.lease_id)


@pytest.mark.parametrize("policy", ["scorpio", "fcfs"])
async def test_a_burst_arriving_together_spreads_over_the_decode_workers(policy):
    from common.slo.tpot_guard import DecodeView
    from gateway.router import LeastLoadedRouter, SloAwareRouter

    workers = [SimpleNamespace(worker_id=f"decode-{i}", prefix=None, stub=SlowStub(), view=DecodeView(), inflight=0, tpot_alone_s=None,
                               free_blocks=100, load=SimpleNamespace(free_blocks=100, tpot_alone_ms=0.0)) for i in range(2)]
    router = SloAwareRouter() if policy == "scorpio" else LeastLoadedRouter()
    registry = SimpleNamespace(routable=lambda role: workers if role == "decode" else [])
    reservations = DecodeReservations(registry, router, "stream", AdmissionQueue(tick_s=60), lambda call: None)
    prompt = SimpleNamespace(cached_hashes=lambda prefix: [])
    # every ask starts before any reply: what was answered cannot tell them apart
    requests = [_request(f"r{i}", 0.0) for i in range(10)]
    await asyncio.gather(*(reservations.reserve(r, _path(router, registry, r, prompt)) for r in requests))
    assert [len(w.stub.calls) for w in workers] == [5, 5]
