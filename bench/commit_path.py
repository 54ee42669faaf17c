"""What a direct prefill → decode commit would save, measured before building it.

Today the prefill worker answers the gateway, and the gateway sends ``Commit`` (with the prompt
ids) to the decode worker: between the prefill's end and the decode worker taking the request
there are two hops, prefill → gateway → decode. A direct commit would make it one. Two figures,
same run:

- **the cluster** (``pdserve up``'s defaults, tiny model, one request at a time): client-side
  TTFT, the gap from the first to the second token (it holds the commit path, the request
  joining the decode batch, and a decode step), and the steady gap between later tokens;
- **the hop**: three real gRPC processes on loopback; a ``CommitRequest`` of the same prompt
  length sent A → B → C (B forwards, as the gateway does) against A → C, one at a time. The
  difference is what removing the middle hop saves, at best (the gateway does more than
  forward).

    python bench/commit_path.py [--prompt-len 128] [--requests 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

from bench.common import device_name, emit, progress  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402
from pdserve.ports import free_port  # noqa: E402
from wire.v1 import gateway_pb2, gateway_pb2_grpc, worker_pb2  # noqa: E402

METHOD = "/bench.Hop/Call"


def _identity(data: bytes) -> bytes:
    return data


def _serve(port: int, forward_to: int | None, ready: multiprocessing.synchronize.Event) -> None:
    """A process that answers ``METHOD``, after forwarding the payload to ``forward_to`` if set."""
    async def run() -> None:
        server = grpc.aio.server()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{forward_to}") if forward_to else None
        call = channel.unary_unary(METHOD, _identity, _identity) if channel else None

        async def handle(payload: bytes, context: grpc.aio.ServicerContext) -> bytes:
            if call is not None:
                await call(payload)
            return b""

        handler = grpc.unary_unary_rpc_method_handler(handle, _identity, _identity)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Hop", {"Call": handler}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    asyncio.run(run())


async def _time_calls(port: int, payload: bytes, n: int) -> list[float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD, _identity, _identity)
        for _ in range(20):  # warm the connections
            await call(payload)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await call(payload)
            times.append((time.perf_counter() - started) * 1000)
    return times


def hop_figures(prompt_len: int, n: int) -> tuple[float, float]:
    """(p50 ms through a forwarding middle process, p50 ms direct)."""
    payload = worker_pb2.CommitRequest(request_id="r" * 32, lease_id="l" * 32, first_token=7,
                                       prompt_token_ids=list(range(prompt_len))).SerializeToString()
    ports = _free_ports(2)
    ctx = multiprocessing.get_context("spawn")
    events = [ctx.Event(), ctx.Event()]
    procs = [ctx.Process(target=_serve, args=(ports[0], None, events[0]), daemon=True),  # the decode side
             ctx.Process(target=_serve, args=(ports[1], ports[0], events[1]), daemon=True)]  # the middle hop
    for p in procs:
        p.start()
    try:
        for e in events:
            e.wait(30)
        relayed, direct = [], []
        for _ in range(3):  # interleaved, so drift on a shared machine hits both alike
            relayed += asyncio.run(_time_calls(ports[1], payload, n))
            direct += asyncio.run(_time_calls(ports[0], payload, n))
        return statistics.median(relayed), statistics.median(direct)
    finally:
        for p in procs:
            p.terminate()
            p.join(5)


def _free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


async def token_gaps(address: str, prompt_len: int, requests: int, output_len: int) -> dict[str, float]:
    """Client-side p50 TTFT, first → second token gap and later gaps, one request at a time."""
    ttfts, second, steady = [], [], []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for i in range(requests + 3):  # the first three warm the path
            ids = [(i * 7 + k) % 250 + 3 for k in range(prompt_len)]
            request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=ids), sampling=gateway_pb2.SamplingParams(
                max_tokens=output_len, ignore_eos=True))
            started, stamps = time.perf_counter(), []
            async for message in stub.Generate(request):
                stamps += [time.perf_counter()] * len(message.token_ids)
            if i < 3 or len(stamps) < 4:
                continue
            ttfts.append((stamps[0] - started) * 1000)
            second.append((stamps[1] - stamps[0]) * 1000)
            steady.append(statistics.median(b - a for a, b in zip(stamps[2:], stamps[3:])) * 1000)
    return {"ttft_p50_ms": statistics.median(ttfts), "first_to_second_token_p50_ms": statistics.median(second),
            "steady_token_gap_p50_ms": statistics.median(steady)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--hop-calls", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ensure_model("tiny")
    progress("1 prefill + 1 decode cluster (pdserve up defaults), one request at a time ...")
    with LocalCluster(ClusterSpec(port=0, preset="tiny"), Path(tempfile.mkdtemp(prefix="pdserve-bench-"))).start(progress=True) as cluster:
        gaps = asyncio.run(token_gaps(cluster.address, args.prompt_len, args.requests, args.output_len))
    progress(f"  TTFT p50 {gaps['ttft_p50_ms']:.1f} ms, first → second token {gaps['first_to_second_token_p50_ms']:.1f} ms, "
             f"later tokens {gaps['steady_token_gap_p50_ms']:.1f} ms apart")
    progress(f"a CommitRequest of {args.prompt_len} ids through a forwarding process, and direct ...")
    relayed, direct = hop_figures(args.prompt_len, args.hop_calls)
    saved = relayed - direct
    progress(f"  relayed {relayed:.2f} ms, direct {direct:.2f} ms: a direct commit saves ~{saved:.2f} ms "
             f"({saved / gaps['first_to_second_token_p50_ms']:.1%} of the first → second token gap)")
    emit({"device": device_name(), "prompt_len": args.prompt_len, **gaps, "commit_relayed_p50_ms": relayed,
          "commit_direct_p50_ms": direct, "direct_commit_saves_ms": saved,
          "saved_share_of_second_token_gap": saved / gaps["first_to_second_token_p50_ms"],
          "saved_share_of_ttft": saved / gaps["ttft_p50_ms"]}, args.out)


if __name__ == "__main__":
    main()
