"""The Python client against an in-process fake gateway (a real grpc.aio server with canned answers);
its request conversion alone: tests/unit/test_client.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from client import AsyncClient, Client, ClusterInfo, SamplingOptions, Usage
from wire.v1 import gateway_pb2, gateway_pb2_grpc

DELTAS = [("Hel", [11]), ("lo", [12]), (" world", [13, 14])]
TIMINGS = gateway_pb2.Timings(queue_ms=1.0, prefill_ms=2.0, transfer_ms=0.5, ttft_ms=4.0, e2e_ms=9.0,
                              prefill_worker="p0", decode_worker="d0", kv_transport="shm")


def worker(worker_id: str, role: str, state: str) -> gateway_pb2.WorkerStatus:
    return gateway_pb2.WorkerStatus(worker_id=worker_id, role=role, address=f"{worker_id}:1", state=state,
                                    free_blocks=90, total_blocks=100, running=1, waiting=2, device="cpu",
                                    heartbeat_age_ms=5.0)


class FakeGateway(gateway_pb2_grpc.GatewayServicer):
    """Canned behaviour: prompt "hang" streams one chunk then waits forever; top_p > 1 is rejected."""

    def __init__(self) -> None:
        self.requests: list[gateway_pb2.GenerateRequest] = []
        self.metadata: list[dict[str, str]] = []
        self.cancelled = asyncio.Event()
        self.aborted: list[str] = []
        self.workers = [worker("p0", "prefill", "ready"), worker("d0", "decode", "draining")]

    async def Generate(self, request: gateway_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        self.requests.append(request)
        self.metadata.append({k: v for k, v in context.invocation_metadata()})
        if request.sampling.HasField("top_p") and request.sampling.top_p > 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "top_p must be in (0, 1]")
        rid = request.request_id or "gen-1"
        if request.text == "hang":
            yield gateway_pb2.GenerateResponse(request_id=rid, text="x", token_ids=[1])
            await self._hang(context)
        for i, (text, ids) in enumerate(DELTAS):
            yield self._delta(rid, text, ids, last=i == len(DELTAS) - 1)

    async def _hang(self, context: grpc.aio.ServicerContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        if context.cancelled():
            self.cancelled.set()

    @staticmethod
    def _delta(rid: str, text: str, ids: list[int], last: bool) -> gateway_pb2.GenerateResponse:
        message = gateway_pb2.GenerateResponse(request_id=rid, text=text, token_ids=ids)
        if last:
            message.finish_reason = "length"
            message.usage.CopyFrom(gateway_pb2.Usage(prompt_tokens=5, completion_tokens=4))
            message.timings.CopyFrom(TIMINGS)
        return message

    async def Abort(self, request: gateway_pb2.AbortRequest,
                    context: grpc.aio.ServicerContext) -> gateway_pb2.AbortResponse:
        if request.request_id != "known":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no request {request.request_id!r}")
        self.aborted.append(request.request_id)
        return gateway_pb2.AbortResponse()

    async def Info(self, request: gateway_pb2.InfoRequest,
                   context: grpc.aio.ServicerContext) -> gateway_pb2.InfoResponse:
        return gateway_pb2.InfoResponse(model="tiny", max_model_len=256, vocab_size=1000, block_size=16,
                                        workers=self.workers)


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[FakeGateway, str]]:
    servicer, server = FakeGateway(), grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(None)


# --- request conversion -------------------------------------------------------------------------------------------

async def test_request_and_bearer_key_reach_the_gateway(gateway: tuple[FakeGateway, str]) -> None:
    servicer, address = gateway
    async with AsyncClient(address, api_key="sekret") as client:
        await client.complete([1, 2], SamplingOptions(max_tokens=3), request_id="r9", tenant="t")
    async with AsyncClient(address) as client:
        await client.complete("hello")
    sent = servicer.requests[0]
    assert list(sent.token_ids.ids) == [1, 2] and sent.sampling.max_tokens == 3 and not sent.sampling.HasField("seed")
    assert (sent.request_id, sent.tenant) == ("r9", "t")
    assert servicer.metadata[0]["authorization"] == "Bearer sekret"
    assert "authorization" not in servicer.metadata[1]


# --- streaming ---------------------------------------------------------------------------------------------------

async def test_stream_yields_every_delta_in_order_and_the_last_carries_usage(gateway: tuple[FakeGateway, str]) -> None:
    async with AsyncClient(gateway[1]) as client:
        chunks = [c async for c in client.stream("hello", request_id="r1")]
        texts = [t async for t in client.generate_text("hello")]
    assert [(c.text, list(c.token_ids)) for c in chunks] == DELTAS and texts == [t for t, _ in DELTAS]
    assert all(c.request_id == "r1" for c in chunks)
    assert [c.finish_reason for c in chunks] == [None, None, "length"]
    assert chunks[0].usage is None and chunks[0].timings is None
    assert chunks[-1].usage == Usage(5, 4) and chunks[-1].timings["kv_transport"] == "shm"
    assert chunks[0].received_at <= chunks[1].received_at <= chunks[2].received_at


async def test_complete_joins_the_deltas(gateway: tuple[FakeGateway, str]) -> None:
    async with AsyncClient(gateway[1]) as client:
        done = await client.complete("hello")
    assert done.text == "Hello world" and done.token_ids == (11, 12, 13, 14) and done.request_id == "gen-1"
    assert done.finish_reason == "length" and done.usage == Usage(5, 4) and done.completion_tokens == 4
    assert done.timings is not None and done.timings["e2e_ms"] == 9.0 and done.timings["decode_worker"] == "d0"
    assert done.ttft_s is not None and 0 < done.ttft_s < 1 and len(done.chunk_times) == 3


async def test_sync_client_streams_and_completes(gateway: tuple[FakeGateway, str]) -> None:
    def run() -> tuple[list[str], str, int]:
        with Client(gateway[1], api_key="k") as client:
            texts = list(client.generate_text("hello"))
            done = client.complete([1])
            return texts, done.text, done.completion_tokens

    assert await asyncio.to_thread(run) == (["Hel", "lo", " world"], "Hello world", 4)
    assert gateway[0].metadata[-1]["authorization"] == "Bearer k"


# --- leaving early cancels the call ------------------------------------------------------------------------------

async def test_breaking_out_of_the_stream_cancels_the_server_call(gateway: tuple[FakeGateway, str]) -> None:
    servicer, address = gateway
    async with AsyncClient(address) as client:
        async for part in client.stream("hang"):
            assert part.text == "x"
            break
        await asyncio.wait_for(servicer.cancelled.wait(), 1.0)


async def test_breaking_out_of_generate_text_cancels_the_server_call(gateway: tuple[FakeGateway, str]) -> None:
    servicer, address = gateway
    async with AsyncClient(address) as client:
        texts = client.generate_text("hang")
        async with contextlib.aclosing(texts):
            async for _ in texts:
                break
        await asyncio.wait_for(servicer.cancelled.wait(), 1.0)


async def test_cancelling_the_consuming_task_cancels_the_server_call(gateway: tuple[FakeGateway, str]) -> None:
    servicer, address = gateway
    async with AsyncClient(address) as client:
        task = asyncio.create_task(client.complete("hang"))
        while not servicer.requests:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(servicer.cancelled.wait(), 1.0)


async def test_sync_client_breaking_out_cancels_the_server_call(gateway: tuple[FakeGateway, str]) -> None:
    servicer, address = gateway

    def run() -> None:
        with Client(address) as client:
            for _ in client.generate_text("hang"):
                break

    await asyncio.to_thread(run)
    await asyncio.wait_for(servicer.cancelled.wait(), 1.0)


# --- errors ------------------------------------------------------------------------------------------------------

async def test_server_error_surfaces_as_aio_rpc_error_with_code_and_details(gateway: tuple[FakeGateway, str]) -> None:
    async with AsyncClient(gateway[1]) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.complete("hi", SamplingOptions(top_p=2.0))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "top_p" in err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.abort("nope")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        await client.abort("known")
    assert gateway[0].aborted == ["known"]


async def test_sync_client_error_carries_code_and_details(gateway: tuple[FakeGateway, str]) -> None:
    def run() -> grpc.RpcError:
        with Client(gateway[1]) as client, pytest.raises(grpc.RpcError) as err:
            client.complete("hi", SamplingOptions(top_p=2.0))
        return err.value

    error = await asyncio.to_thread(run)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "top_p" in error.details()


async def test_a_timeout_is_deadline_exceeded(gateway: tuple[FakeGateway, str]) -> None:
    async with AsyncClient(gateway[1], timeout_s=0.1) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.complete("hang")
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


# --- info and wait_ready -----------------------------------------------------------------------------------------

async def test_info_converts_every_worker(gateway: tuple[FakeGateway, str]) -> None:
    async with AsyncClient(gateway[1]) as client:
        info = await client.info()
    assert (info.model, info.max_model_len, info.vocab_size, info.block_size) == ("tiny", 256, 1000, 16)
    assert [(w.worker_id, w.role, w.state) for w in info.workers] == [("p0", "prefill", "ready"),
                                                                      ("d0", "decode", "draining")]
    assert info.workers[0].free_blocks == 90 and info.workers[0].heartbeat_age_ms == 5.0
    assert info.ready("prefill") == 1 and info.ready("decode") == 0


async def test_wait_ready_times_out_listing_what_is_there(gateway: tuple[FakeGateway, str]) -> None:
    async with AsyncClient(gateway[1]) as client:
        with pytest.raises(TimeoutError) as err:
            await client.wait_ready(1, 1, timeout_s=0.25)
    message = str(err.value)
    assert "wanted 1 prefill and 1 decode" in message and "p0 prefill ready, d0 decode draining" in message


async def test_wait_ready_returns_once_the_workers_are_ready(gateway: tuple[FakeGateway, str]) -> None:
    servicer, address = gateway

    async def ready_later() -> None:
        await asyncio.sleep(0.15)
        servicer.workers[1] = worker("d0", "decode", "ready")

    async with AsyncClient(address) as client:
        flip = asyncio.create_task(ready_later())
        info = await client.wait_ready(1, 1, timeout_s=1.0)
        await flip
    assert isinstance(info, ClusterInfo) and info.ready("decode") == 1


async def test_sync_wait_ready_times_out_and_names_an_unreachable_gateway(gateway: tuple[FakeGateway, str]) -> None:
    def run(address: str) -> str:
        with Client(address) as client, pytest.raises(TimeoutError) as err:
            client.wait_ready(2, 1, timeout_s=0.2)
        return str(err.value)

    assert "d0 decode draining" in await asyncio.to_thread(run, gateway[1])
    assert "UNAVAILABLE" in await asyncio.to_thread(run, "127.0.0.1:1")


# --- several gateways: failover before the first message ----------------------------------------------------------

class RefusingGateway(FakeGateway):
    """A gateway that cannot serve (UNAVAILABLE) the prompts in ``refuse``, or, after its first
    message, fails the prompt "break"."""

    def __init__(self, refuse: set[str]) -> None:
        super().__init__()
        self.refuse = refuse

    async def Generate(self, request: gateway_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        self.requests.append(request)
        if request.text in self.refuse:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no prefill worker is available")
        yield gateway_pb2.GenerateResponse(request_id=request.request_id, text="x", token_ids=[1])
        if request.text == "break":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "decode worker lost")
        yield self._delta(request.request_id, "y", [2], last=True)


async def test_a_client_of_several_gateways_fails_over_only_before_the_first_message() -> None:
    servers, servicers, addresses = [], [RefusingGateway({"a", "both"}), RefusingGateway({"both"})], []
    for servicer in servicers:
        server = grpc.aio.server()
        gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, server)
        addresses.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
        await server.start()
        servers.append(server)
    dead = "127.0.0.1:1"  # nothing listens there: UNAVAILABLE
    try:
        async with AsyncClient(f"{dead},{addresses[0]},{addresses[1]}") as client:
            assert (await client.complete("ok")).text == "xy"  # past the dead one, to the first live one
            assert client.address == addresses[0]
            assert (await client.complete("a")).text == "xy"  # the first cannot serve it: the second does
            assert client.address == addresses[1]  # and is asked first from now on
            with pytest.raises(grpc.aio.AioRpcError) as broke:  # begun, then failed: not made again
                await client.complete("break")
            assert broke.value.code() == grpc.StatusCode.UNAVAILABLE
            assert [r.text for r in servicers[1].requests].count("break") == 1
            assert [r.text for r in servicers[0].requests].count("break") == 0
            with pytest.raises(grpc.aio.AioRpcError) as none:  # every one refused it: the last refusal
                await client.complete("both")
            assert none.value.code() == grpc.StatusCode.UNAVAILABLE
            assert (await client.info()).model == "tiny"

        def sync() -> tuple[str, str]:
            with Client([dead, addresses[1]]) as blocking:
                return blocking.complete("ok").text, blocking.address

        assert await asyncio.to_thread(sync) == ("xy", addresses[1])
    finally:
        for server in servers:
            await server.stop(None)
