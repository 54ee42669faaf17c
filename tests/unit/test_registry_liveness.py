"""The gateway's view of its workers: its own stalls are not their silence, a worker with
work that stops stepping leaves routing, a pair that cannot move KV is refused at the door."""

from __future__ import annotations

import pytest

from common.kv_transfer.pairing import TransportMismatch
from gateway.loop_lag import LoopLag
from gateway.registry import WorkerRegistry, transport_between
from wire.v1 import worker_pb2


def _run_loop(clock: list[float], lag: LoopLag, seconds: float) -> None:
    """Time passes with the event loop responsive: every probe wakes on time."""
    for _ in range(round(seconds / lag.period_s)):
        clock[0] += lag.period_s
        lag.record(clock[0])


def _descriptor(worker_id: str, role: str, **fields: object) -> worker_pb2.WorkerDescriptor:
    defaults: dict[str, object] = {"address": f"127.0.0.1:{1000 + len(worker_id)}", "host_id": "host-a",
                                   "device": "cpu", "device_kind": "cpu", "incarnation": f"{worker_id}-1"}
    return worker_pb2.WorkerDescriptor(worker_id=worker_id, role=role, **{**defaults, **fields})  # type: ignore[arg-type]


def test_loop_lag_counts_a_stall_while_it_lasts_and_after():
    lag = LoopLag(period_s=0.05)
    start = lag._expected
    assert lag.stalled_s(start) == 0.0
    assert lag.stalled_s(start + 7.0) == pytest.approx(7.0)  # still stalled: counted already
    lag.record(start + 7.0)
    assert lag.stalled_s(start + 7.0) == pytest.approx(7.0) and lag.worst_recent_s == pytest.approx(7.0)
    assert lag.stalled_s(start + 7.05) == pytest.approx(7.0)  # on time again


async def test_a_gateway_stall_is_not_counted_as_worker_silence(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    lag = LoopLag(period_s=0.05)
    registry = WorkerRegistry(timeout_s=1.5, loop_lag=lag)
    registry.register(_descriptor("decode-0", "decode"), worker_pb2.WorkerLoad())
    clock[0] += 7.0  # the loop was busy for 7 s: no heartbeat could be read, no probe ran
    registry.expire()
    assert "decode-0" in registry.workers
    lag.record(clock[0])
    _run_loop(clock, lag, 2.0)  # now the worker really is silent
    registry.expire()
    assert "decode-0" not in registry.workers


async def test_the_same_process_registering_again_keeps_its_record_and_a_restart_replaces_it():
    registry = WorkerRegistry(timeout_s=1.5)
    left: list[str] = []
    registry.on_leave.append(lambda record, reason: left.append(reason))
    first = registry.register(_descriptor("decode-0", "decode"), worker_pb2.WorkerLoad())
    assert registry.register(_descriptor("decode-0", "decode"), worker_pb2.WorkerLoad()) is first
    assert left == []
    restarted = registry.register(_descriptor("decode-0", "decode", incarnation="decode-0-2"), worker_pb2.WorkerLoad())
    assert restarted is not first and left == ["registered again"]


async def test_a_worker_with_work_that_stops_stepping_leaves_routing_until_it_steps(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    lag = LoopLag(period_s=0.05)
    registry = WorkerRegistry(timeout_s=1.5, loop_lag=lag, stall_timeout_s=10.0)
    record = registry.register(_descriptor("prefill-0", "prefill"), worker_pb2.WorkerLoad())

    def beat(seconds: float, steps: int, waiting: int) -> None:
        _run_loop(clock, lag, seconds)
        registry.heartbeat("prefill-0", worker_pb2.WorkerLoad(steps=steps, waiting=waiting))
        registry.expire()

    for _ in range(30):  # idle for 15 s: nothing to do is not a stall
        beat(0.5, 0, 0)
    assert record.routable
    for i in range(20):  # busy and stepping
        beat(0.5, i + 1, 2)
    assert record.routable
    for _ in range(21):  # busy, steps stuck at 20 for 10.5 s
        beat(0.5, 20, 2)
    assert record.stalled and not record.routable and "prefill-0" in registry.workers
    beat(0.5, 21, 2)
    assert record.routable


async def test_an_explicit_transport_that_cannot_work_is_refused_at_registration():
    registry = WorkerRegistry(timeout_s=1.5)
    registry.register(_descriptor("decode-0", "decode", device="cuda:0", device_kind="cuda", gpu_uuid="GPU-0",
                                  kv_receives=["cuda_ipc", "nccl", "grpc"]), worker_pb2.WorkerLoad())
    with pytest.raises(TransportMismatch, match="--kv-transport shm"):
        registry.register(_descriptor("prefill-0", "prefill", device="cuda:0", device_kind="cuda", gpu_uuid="GPU-0",
                                      kv_transport="shm"), worker_pb2.WorkerLoad())
    assert "prefill-0" not in registry.workers
    with pytest.raises(TransportMismatch, match="same GPU"):
        registry.register(_descriptor("prefill-0", "prefill", device="cuda:0", device_kind="cuda", gpu_uuid="GPU-0",
                                      kv_transport="nccl"), worker_pb2.WorkerLoad())
    ok = registry.register(_descriptor("prefill-0", "prefill", device="cuda:0", device_kind="cuda", gpu_uuid="GPU-0",
                                       kv_transport="auto"), worker_pb2.WorkerLoad())
    assert transport_between(ok.descriptor, registry.workers["decode-0"].descriptor) == "cuda_ipc"
