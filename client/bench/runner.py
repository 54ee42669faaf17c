"""Sends the planned requests at their times (under a concurrency cap) and records each token's
arrival; ``run_plan`` speaks pdserve's gRPC API, ``client.bench.openai_runner`` the OpenAI HTTP API
of any server, through the same schedule and the same records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import grpc

from client.async_client import auth_metadata
from client.bench.metrics import RequestRecord
from client.bench.read_lag import ReadLag
from client.bench.workload import PlannedRequest, SloClass
from client.failover import gateway_addresses
from wire.request_start import stamp
from wire.slo import slo_to_proto
from wire.v1 import gateway_pb2, gateway_pb2_grpc

Goodput = tuple[float | None, float | None]  # default TTFT and TPOT SLOs (ms) for requests without a class
Send = Callable[[PlannedRequest, float], Awaitable[RequestRecord]]  # (request, the run's start) → its record


async def schedule(plan: list[PlannedRequest], max_concurrency: int | None, send: Send,
                   on_done: Callable[[RequestRecord], None]) -> tuple[list[RequestRecord], float]:
    """Returns the records (in plan order) and the wall time from the first send to the last finish."""
    gate = asyncio.Semaphore(max_concurrency or len(plan) or 1)
    started = time.perf_counter()
    read_lag = ReadLag(started)
    probe = asyncio.create_task(read_lag.run())

    async def one(item: PlannedRequest) -> RequestRecord:
        await asyncio.sleep(max(0.0, item.send_at - (time.perf_counter() - started)))
        now = time.perf_counter() - started
        late = max(0.0, now - item.send_at)  # this process's own delay
        read_lag.watch(now)  # its send, and so the start of what it asks about, comes at or after now
        try:
            async with gate:
                record = await send(item, started)
            record.send_late_s = late
            if record.token_times:  # the probe's wake-ups up to two periods past the first token are in
                await asyncio.sleep(max(0.0, started + record.token_times[0] + 2 * read_lag.period_s
                                        - time.perf_counter()))
                record.read_lag_s = read_lag.worst(record.start, record.token_times[0])
        finally:
            read_lag.unwatch(now)
        on_done(record)
        return record

    try:
        records = await asyncio.gather(*(one(item) for item in plan))
    finally:
        probe.cancel()
    return list(records), time.perf_counter() - started


def new_record(item: PlannedRequest, goodput: Goodput, started: float) -> RequestRecord:
    """The record of a request sent now: its class's SLOs, else the run's ``--goodput`` ones."""
    cls = item.slo_class
    return RequestRecord(item.index, len(item.prompt), time.perf_counter() - started, cls.name if cls else "",
                         cls.ttft_ms if cls else goodput[0], cls.tpot_ms if cls else goodput[1])


async def run_plan(address: str, plan: list[PlannedRequest], ignore_eos: bool, max_concurrency: int | None,
                   goodput: Goodput, on_done: Callable[[RequestRecord], None],
                   timeout_s: float = 600, api_key: str = "") -> tuple[list[RequestRecord], float]:
    """``address``: one gateway, or several comma-separated: the plan is split over them in turn, and
    a request one answers UNAVAILABLE before its first token goes to the next (``client.failover``)."""
    metadata = auth_metadata(api_key)
    channels = [grpc.aio.insecure_channel(a) for a in gateway_addresses(address)]
    stubs = [gateway_pb2_grpc.GatewayStub(ch) for ch in channels]
    try:
        async def send(item: PlannedRequest, started: float) -> RequestRecord:
            for k in range(len(stubs)):
                record = await send_one(stubs[(item.index + k) % len(stubs)], item, ignore_eos, goodput, started,
                                        timeout_s, metadata)
                if record.error != "UNAVAILABLE" or record.token_times:
                    break
            return record

        return await schedule(plan, max_concurrency, send, on_done)
    finally:
        for channel in channels:
            await channel.close()


def slo_message(cls: SloClass | None) -> gateway_pb2.SLO:
    """The class's SLOs as judged (5.7 ms stays 5.7 ms, not 5: ``wire.slo``); none without a class."""
    return slo_to_proto(cls.ttft_ms, cls.tpot_ms) if cls is not None else gateway_pb2.SLO()


async def send_one(stub: gateway_pb2_grpc.GatewayStub, item: PlannedRequest, ignore_eos: bool,
                goodput: Goodput, started: float, timeout_s: float,
                metadata: tuple[tuple[str, str], ...] | None) -> RequestRecord:
    record = new_record(item, goodput, started)
    cls = item.slo_class
    request = gateway_pb2.GenerateRequest(
        token_ids=gateway_pb2.TokenIds(ids=item.prompt),
        sampling=gateway_pb2.SamplingParams(max_tokens=item.output_len, ignore_eos=ignore_eos),
        slo=slo_message(cls))
    try:
        async for message in stub.Generate(request, timeout=timeout_s, metadata=(*(metadata or ()), stamp())):
            record.request_id = record.request_id or message.request_id
            if message.token_ids:
                record.token_times.append(time.perf_counter() - started)
                record.tokens_per_message.append(len(message.token_ids))
                record.output_token_ids.extend(message.token_ids)
            if message.finish_reason:
                record.cached_tokens = message.usage.cached_tokens
    except grpc.aio.AioRpcError as exc:
        record.error = exc.code().name
    return record
