"""The gateway's gRPC work alone, without the gateway: the floor its event loop cannot go below.

A stand-in gateway process serves ``Generate`` and, per request, makes the calls the real one
makes (``Reserve`` on a worker, ``Prefill``, ``Commit``) with the real messages (the prompt's ids
in each), then writes ``messages`` token messages ``interval_s`` apart; a stand-in worker
process answers the calls at once and, as a decode worker does, streams the gateway one
``StepEvents`` message every ``step_s`` while requests decode, a token event for each (a request
decodes from its ``Commit`` for as long as its messages take), which the stand-in gateway reads. A driver process sends ``requests`` at ``rate`` a second
(Poisson), all on uvloop as the cluster's processes run. What comes back is the stand-in
gateway's event-loop thread CPU per request: what gRPC and the event loop cost for that traffic,
none of it pdserve's own code (validation, guards, routing, detokenization, accounting).
``bench/front_end_cost.py --grpc-floor`` runs it beside the real gateway, on the traffic that
gateway carried.

    python bench/lib/grpc_floor.py [--rate 32] [--requests 320] [--messages 5] [--interval-ms 25] [--step-ms 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import emit, progress  # noqa: E402
from common.rpc.server import CHANNEL_OPTIONS, SERVER_OPTIONS, install_uvloop  # noqa: E402
from pdserve.ports import free_port  # noqa: E402
from wire.v1 import gateway_pb2, worker_pb2  # noqa: E402

PROMPT_LEN = 192  # bench/slo.py's workloads' mean prompt
CPU_PROBE = "floor-cpu"  # a request id that asks the stand-in gateway for its loop's CPU seconds


def _unary(handler, request_type):  # type: ignore[no-untyped-def]
    return grpc.unary_unary_rpc_method_handler(handler, request_type.FromString, lambda m: m.SerializeToString())


async def _worker(port: int, decode_s: float, step_s: float) -> None:
    server = grpc.aio.server(options=SERVER_OPTIONS)
    decoding: dict[str, float] = {}  # request id -> when its decode ends

    async def reserve(request: worker_pb2.ReserveRequest, context: object) -> worker_pb2.ReserveResponse:
        return worker_pb2.ReserveResponse(block_ids=list(range(12)), lease_id="lease", lease_ms=10_000)

    async def prefill(request: worker_pb2.PrefillRequest, context: object) -> worker_pb2.PrefillResponse:
        return worker_pb2.PrefillResponse(first_token=7, prefill_ms=1.0, transfer_ms=0.1)

    async def commit(request: worker_pb2.CommitRequest, context: object) -> worker_pb2.CommitResponse:
        decoding[request.request_id] = time.perf_counter() + decode_s
        return worker_pb2.CommitResponse()

    async def stream(request: worker_pb2.StreamRequest, context: object) -> AsyncIterator[worker_pb2.StepEvents]:
        yield worker_pb2.StepEvents()  # the handshake
        while True:
            await asyncio.sleep(step_s)
            now = time.perf_counter()
            for request_id in [r for r, ends in decoding.items() if ends <= now]:
                del decoding[request_id]
            if decoding:
                yield worker_pb2.StepEvents(events=[worker_pb2.TokenEvent(request_id=r, token_ids=[7])
                                                    for r in decoding])

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Worker", {
        "Reserve": _unary(reserve, worker_pb2.ReserveRequest), "Prefill": _unary(prefill, worker_pb2.PrefillRequest),
        "Commit": _unary(commit, worker_pb2.CommitRequest),
        "Stream": grpc.unary_stream_rpc_method_handler(stream, worker_pb2.StreamRequest.FromString,
                                                       lambda m: m.SerializeToString())}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def _gateway(port: int, worker_port: int, messages: int, interval_s: float) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{worker_port}", options=CHANNEL_OPTIONS)
    await asyncio.wait_for(channel.channel_ready(), 60)  # the worker process may start after this one

    def call(name: str, response_type):  # type: ignore[no-untyped-def]
        return channel.unary_unary(f"/floor.Worker/{name}", lambda m: m.SerializeToString(), response_type.FromString)

    reserve, prefill = call("Reserve", worker_pb2.ReserveResponse), call("Prefill", worker_pb2.PrefillResponse)
    commit = call("Commit", worker_pb2.CommitResponse)
    steps = channel.unary_stream("/floor.Worker/Stream", lambda m: m.SerializeToString(),
                                 worker_pb2.StepEvents.FromString)
    tokens: dict[str, int] = {}

    async def follow() -> None:  # the decode stream: every step's events read and counted
        async for message in steps(worker_pb2.StreamRequest(stream_id="floor")):
            for event in message.events:
                tokens[event.request_id] = tokens.get(event.request_id, 0) + len(event.token_ids)

    following = asyncio.get_running_loop().create_task(follow())
    server = grpc.aio.server(options=SERVER_OPTIONS)

    async def generate(request: gateway_pb2.GenerateRequest, context: object) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        if request.request_id == CPU_PROBE:
            yield gateway_pb2.GenerateResponse(text=repr(time.thread_time()))
            return
        ids = list(request.token_ids.ids)
        lease = await reserve(worker_pb2.ReserveRequest(request_id=request.request_id, prompt_tokens=len(ids),
                                                        max_tokens=48), timeout=10)
        first = await prefill(worker_pb2.PrefillRequest(request_id=request.request_id, prompt_token_ids=ids,
                                                        destination=worker_pb2.KVDestination(
                                                            block_ids=lease.block_ids, lease_id=lease.lease_id)),
                              timeout=10)
        yield gateway_pb2.GenerateResponse(request_id=request.request_id, token_ids=[first.first_token], text="x")
        await commit(worker_pb2.CommitRequest(request_id=request.request_id, lease_id=lease.lease_id,
                                              prompt_token_ids=ids, first_token=first.first_token), timeout=10)
        for i in range(messages - 1):
            await asyncio.sleep(interval_s)
            yield gateway_pb2.GenerateResponse(request_id=request.request_id, token_ids=[7] * 12, text="x" * 12,
                                               finish_reason="length" if i == messages - 2 else "")
        tokens.pop(request.request_id, None)

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Gateway", {
        "Generate": grpc.unary_stream_rpc_method_handler(generate, gateway_pb2.GenerateRequest.FromString,
                                                         lambda m: m.SerializeToString())}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()
    following.cancel()


def _serve(main, *args) -> None:  # type: ignore[no-untyped-def]
    install_uvloop()
    asyncio.run(main(*args))


async def _drive(port: int, rate: float, requests: int, seed: int) -> float:
    """Sends the load; returns the stand-in gateway's loop CPU seconds over it."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    generate = channel.unary_stream("/floor.Gateway/Generate", lambda m: m.SerializeToString(),
                                    gateway_pb2.GenerateResponse.FromString)
    rng = random.Random(seed)

    async def one(request_id: str) -> list[gateway_pb2.GenerateResponse]:
        ids = [rng.randrange(1000) for _ in range(PROMPT_LEN)]
        request = gateway_pb2.GenerateRequest(request_id=request_id, token_ids=gateway_pb2.TokenIds(ids=ids))
        return [m async for m in generate(request, timeout=60)]

    async def loop_cpu() -> float:
        return float((await one(CPU_PROBE))[0].text)

    for i in range(20):  # warm: channels, the servers' first calls
        await one(f"warm-{i}")
    before = await loop_cpu()
    sent = []
    for i in range(requests):
        sent.append(asyncio.ensure_future(one(f"r{i}")))
        await asyncio.sleep(rng.expovariate(rate))
    await asyncio.gather(*sent)
    return await loop_cpu() - before


def loop_cpu_ms_per_request(rate: float, requests: int, messages: int, interval_s: float, step_s: float,
                            seed: int = 0) -> float:
    """The stand-in gateway's event-loop CPU a request, in milliseconds (``messages`` ≥ 1 token
    messages a request, the first right after the prefill, the rest ``interval_s`` apart; a decode
    step message every ``step_s`` while any request decodes)."""
    gateway_port, worker_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    context = multiprocessing.get_context("spawn")
    decode_s = max(0, messages - 1) * interval_s
    processes = [context.Process(target=_serve, args=(_worker, worker_port, decode_s, step_s), daemon=True),
                 context.Process(target=_serve, args=(_gateway, gateway_port, worker_port, max(1, messages),
                                                      interval_s), daemon=True)]
    for process in processes:
        process.start()
    try:
        install_uvloop()
        seconds = asyncio.run(_wait_then_drive(gateway_port, rate, requests, seed))
    finally:
        for process in processes:
            process.terminate()
            process.join(5)
    return 1000 * seconds / requests


async def _wait_then_drive(port: int, rate: float, requests: int, seed: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await asyncio.wait_for(channel.channel_ready(), 90)
    return await _drive(port, rate, requests, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=32.0)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--messages", type=int, default=5, help="token messages a request (the first included)")
    parser.add_argument("--interval-ms", type=float, default=25.0, help="between a request's later messages")
    parser.add_argument("--step-ms", type=float, default=1.5, help="between the decode stream's step messages")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    progress(f"a stand-in gateway and worker, {args.requests} requests at {args.rate:g} req/s ...")
    ms = loop_cpu_ms_per_request(args.rate, args.requests, args.messages, args.interval_ms / 1000, args.step_ms / 1000)
    progress(f"  its event loop: {ms:.3f} ms CPU a request")
    emit({"rate": args.rate, "requests": args.requests, "messages": args.messages, "interval_ms": args.interval_ms,
          "step_ms": args.step_ms, "loop_cpu_ms_per_request": ms}, args.out)


if __name__ == "__main__":
    main()
