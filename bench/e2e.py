"""End-to-end cost of disaggregation: a 1 prefill + 1 decode cluster against the bare engine.

- ``e2e_tok_s``: output tokens/s through the gateway with ``--batch`` concurrent requests
  (all decoding together), against ``engine_tok_s``: the same prompts in one in-process
  engine at the same batch size on the cores and threads the cluster's plan gives its decode
  worker (``pdserve up``'s plan: each worker its own cores), same run.
  ``engine_all_threads_tok_s`` is the engine with every core, for reference.
- ``ttft_overhead_ms_p50``: p50 time to first token at low load (one request at a time),
  measured by the client, minus the bare engine's p50 prefill time for the same prompt.

    python bench/e2e.py [--batch 32] [--prompt-len 128] [--output-len 128]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
import torch  # noqa: E402

from bench.lib.common import device_name, emit, progress  # noqa: E402
from common.engine.config import EngineConfig  # noqa: E402
from common.worker.cpu_plan import CoreAssignment, available_cores, plan_cores  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from common.model.sampling_params import SamplingParams  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402
from wire.v1 import gateway_pb2, gateway_pb2_grpc  # noqa: E402


def prompts(n: int, length: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (length,), generator=gen).tolist() for _ in range(n)]


def engine_figures(batch: list[list[int]], single: list[int], output_len: int, repeats: int,
                   cores: CoreAssignment) -> tuple[float, float]:
    everywhere = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores.cores)
    torch.set_num_threads(cores.threads)
    try:
        return _engine_figures(batch, single, output_len, repeats)
    finally:
        os.sched_setaffinity(0, everywhere)


def _engine_figures(batch: list[list[int]], single: list[int], output_len: int, repeats: int) -> tuple[float, float]:
    # no prefix caching: the timed prefills repeat one prompt, and what is timed is computing it
    engine = LLMEngine(EngineConfig(preset="tiny", num_kv_blocks=4096, max_batch_size=len(batch),
                                    enable_prefix_caching=False))
    params = SamplingParams(max_tokens=output_len, ignore_eos=True)
    engine.generate(batch[:2], params)  # warm-up
    started = time.perf_counter()
    engine.generate(batch, params)
    tok_s = len(batch) * output_len / (time.perf_counter() - started)
    prefill_ms = []
    for i in range(repeats):
        engine.add_request(f"p{i}", single, SamplingParams(max_tokens=1))
        started = time.perf_counter()
        while engine.has_unfinished_requests():
            engine.step()
        prefill_ms.append((time.perf_counter() - started) * 1000)
    return tok_s, statistics.median(prefill_ms)


async def one_request(stub, prompt: list[int], output_len: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Returns (client-side TTFT in ms, tokens received)."""
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt),
                                          sampling=gateway_pb2.SamplingParams(max_tokens=output_len, ignore_eos=True))
    started, ttft, count = time.perf_counter(), 0.0, 0
    async for message in stub.Generate(request):
        ttft = ttft or (time.perf_counter() - started) * 1000
        count += len(message.token_ids)
    return ttft, count


async def cluster_figures(address: str, batch: list[list[int]], single: list[int], output_len: int,
                          repeats: int) -> tuple[float, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        await asyncio.gather(*(one_request(stub, p, 4) for p in batch[:2]))  # warm-up
        started = time.perf_counter()
        results = await asyncio.gather(*(one_request(stub, p, output_len) for p in batch))
        tok_s = sum(count for _, count in results) / (time.perf_counter() - started)
        # distinct prompts: a repeated one would be served from the prefill worker's prefix cache
        singles = prompts(repeats, len(single), seed=2)
        ttfts = [(await one_request(stub, p, 2))[0] for p in singles]
    return tok_s, statistics.median(ttfts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ensure_model("tiny")
    device = device_name()
    batch, single = prompts(args.batch, args.prompt_len), prompts(1, args.prompt_len, seed=1)[0]
    progress(f"bare engine: batch {args.batch}, {args.prompt_len}+{args.output_len} tokens ...")
    every_core = CoreAssignment("engine", available_cores(), len(available_cores()))
    decode_cores = plan_cores(["prefill-0", "decode-0"])[-1]  # what `pdserve up` gives the decode worker
    engine_all_tok_s, _ = engine_figures(batch, single, args.output_len, 1, every_core)
    engine_tok_s, prefill_ms = engine_figures(batch, single, args.output_len, args.repeats, decode_cores)
    progress(f"  {engine_tok_s:.0f} output tok/s on a worker's share ({decode_cores.describe()}), "
             f"{engine_all_tok_s:.0f} on every core; prefill p50 {prefill_ms:.1f} ms")
    spec = ClusterSpec(port=0, preset="tiny", worker_args=("--num-kv-blocks", "4096", "--max-batch-size", str(args.batch)))
    progress("1 prefill + 1 decode cluster, cores as pdserve up plans them ...")
    with LocalCluster(spec, Path(tempfile.mkdtemp(prefix="pdserve-bench-"))).start(progress=True) as cluster:
        e2e_tok_s, ttft_ms = asyncio.run(cluster_figures(cluster.address, batch, single, args.output_len,
                                                         args.repeats))
    progress(f"  {e2e_tok_s:.0f} output tok/s through the gateway; TTFT p50 {ttft_ms:.1f} ms")
    emit({"device": device, "batch": args.batch, "prompt_len": args.prompt_len,
          "output_len": args.output_len, "worker_threads": decode_cores.threads, "e2e_tok_s": e2e_tok_s,
          "engine_tok_s": engine_tok_s, "engine_all_threads_tok_s": engine_all_tok_s,
          "e2e_vs_engine": e2e_tok_s / engine_tok_s, "ttft_p50_ms": ttft_ms, "bare_prefill_p50_ms": prefill_ms,
          "ttft_overhead_ms_p50": ttft_ms - prefill_ms}, args.out)


if __name__ == "__main__":
    main()
