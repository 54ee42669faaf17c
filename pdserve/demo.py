"""``pdserve demo``: start a local cluster, stream a chat answer, run a short load, stop.

What ``make demo`` runs. Everything happens on this machine with the default model
(SmolLM2-135M-Instruct, converted from its package on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from common.model.location import ensure_model
from common.model.presets import DEFAULT_PRESET
from pdserve.cluster import ClusterSpec, LocalCluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

PROMPT = "Disaggregated serving runs prefill and decode on separate workers because"
QUESTION = "What is the capital of France, and what is it famous for?"


@dataclass(frozen=True, slots=True)
class Timing:
    ttft_ms: float
    tpot_ms: float
    tokens: int


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="local cluster + one streamed chat answer + a short load test")
    demo.add_argument("--requests", type=int, default=32)
    demo.add_argument("--concurrency", type=int, default=8)
    demo.add_argument("--max-tokens", type=int, default=32)
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print(f"model: {DEFAULT_PRESET} (set up once in the model cache) ...", flush=True)
    ensure_model(DEFAULT_PRESET)
    log_dir = Path(tempfile.mkdtemp(prefix="pdserve-demo-"))
    print(f"starting a local cluster: gateway + 1 prefill + 1 decode worker (logs in {log_dir})", flush=True)
    spec = ClusterSpec(port=0, worker_args=("--num-kv-blocks", "2048"))
    with LocalCluster(spec, log_dir).start(progress=True) as cluster:
        print(f"cluster ready at {cluster.address}\n", flush=True)
        asyncio.run(_demo(cluster.address, args))
        print("\nstopping the cluster ...", flush=True)
    print("done.")
    return 0


async def _demo(address: str, args: argparse.Namespace) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        await _stream_one(stub)
        await _load(stub, args)


async def _stream_one(stub: gateway_pb2_grpc.GatewayStub) -> None:
    print(f"user: {QUESTION}\nassistant: ", end="", flush=True)
    request = gateway_pb2.GenerateRequest(sampling=gateway_pb2.SamplingParams(max_tokens=96))
    request.messages.messages.add(role="user", content=QUESTION)
    async for message in stub.Generate(request):
        sys.stdout.write(message.text)
        sys.stdout.flush()
        if message.finish_reason:
            t = message.timings
            print(f"\n[{message.usage.completion_tokens} tokens, finish {message.finish_reason}, TTFT "
                  f"{t.ttft_ms:.1f} ms (prefill {t.prefill_ms:.1f} ms, KV transfer {t.transfer_ms:.2f} ms over "
                  f"{t.kv_transport}), total {t.e2e_ms:.0f} ms]")


async def _load(stub: gateway_pb2_grpc.GatewayStub, args: argparse.Namespace) -> None:
    print(f"\nload: {args.requests} requests, {args.concurrency} at a time, {args.max_tokens} tokens each",
          flush=True)
    gate = asyncio.Semaphore(args.concurrency)
    done: list[Timing] = []

    async def one(i: int) -> None:
        async with gate:
            done.append(await _timed(stub, i, args.max_tokens))
            if len(done) % 8 == 0:
                print(f"  {len(done)}/{args.requests} done", flush=True)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(args.requests)))
    _report(done, time.perf_counter() - started)


async def _timed(stub: gateway_pb2_grpc.GatewayStub, i: int, max_tokens: int) -> Timing:
    prompt = f"{PROMPT} (request {i}) " * (1 + i % 4)
    request = gateway_pb2.GenerateRequest(text=prompt, sampling=gateway_pb2.SamplingParams(
        max_tokens=max_tokens, ignore_eos=True))
    sent, first, tokens = time.perf_counter(), 0.0, 0
    async for message in stub.Generate(request):
        first = first or time.perf_counter()
        tokens += len(message.token_ids)
    end = time.perf_counter()
    tpot = (end - first) / (tokens - 1) * 1000 if tokens > 1 else 0.0
    return Timing((first - sent) * 1000, tpot, tokens)


def _report(done: list[Timing], seconds: float) -> None:
    def pct(values: list[float], p: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    ttft, tpot = [d.ttft_ms for d in done], [d.tpot_ms for d in done]
    print(f"\n{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}")
    for name, values in (("TTFT ms", ttft), ("TPOT ms", tpot)):
        print(f"{name:<10}{statistics.fmean(values):>10.1f}{pct(values, 50):>10.1f}{pct(values, 90):>10.1f}"
              f"{pct(values, 99):>10.1f}")
    tokens = sum(d.tokens for d in done)
    print(f"\n{len(done)} requests in {seconds:.2f}s: {len(done) / seconds:.1f} req/s, {tokens / seconds:.0f} output tok/s")
