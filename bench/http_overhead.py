"""What the OpenAI-compatible HTTP front door costs against gRPC, on one cluster, same run.

One 1P1D cluster (``pdserve up``'s defaults, the default model unless ``--preset``), driven by the
load tester's own backends with the same token-id prompts: ``pdserve`` (gRPC) and ``openai``
(``/v1/completions``, SSE), and ``openai-chat`` (``/v1/chat/completions``; its prompts are words,
so its figures are for reference, not part of the ratio). Rounds interleave the backends, in a
rotating order, so drift on a shared machine falls on all of them alike.

- ``ttft_p50_ms``: one request at a time (``--output-len-ttft`` tokens each), client-side TTFT p50;
- ``output_tok_s``: ``--concurrency`` streams at once, output tokens per second;
- ``http_vs_grpc``: each figure of ``openai`` over ``pdserve``'s (median over rounds).

    python bench/http_overhead.py [--rounds 3] [--out bench/results/http-overhead-cpu.json]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress  # noqa: E402
from client.bench.metrics import RequestRecord  # noqa: E402
from client.bench.openai_runner import OpenAITarget, run_plan_openai, served_model  # noqa: E402
from client.bench.runner import run_plan  # noqa: E402
from client.bench.workload import PlannedRequest, token_prompt  # noqa: E402
from common.model.presets import DEFAULT_PRESET  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

import numpy as np  # noqa: E402

BACKENDS = ("pdserve", "openai", "openai-chat")


def plan(n: int, prompt_len: int, output_len: int, seed: int) -> list[PlannedRequest]:
    rng = np.random.default_rng(seed)
    return [PlannedRequest(i, token_prompt(prompt_len, rng), output_len, None, 0.0) for i in range(n)]


async def drive(cluster: LocalCluster, backend: str, requests: list[PlannedRequest],
                concurrency: int) -> tuple[list[RequestRecord], float]:
    def ignore(record: RequestRecord) -> None:
        """The load tester's per-request callback: this bench reads the records at the end."""

    if backend == "pdserve":
        return await run_plan(cluster.address, requests, True, concurrency, (None, None), ignore)
    base = f"http://{cluster.http_address}"
    target = OpenAITarget(base, backend, await served_model(base))
    return await run_plan_openai(target, requests, True, concurrency, (None, None), ignore)


def one_round(cluster: LocalCluster, backend: str, args: argparse.Namespace, seed: int) -> dict[str, float]:
    """``seed``: different in every round and backend, so no prompt is served from the prefix cache."""
    single = plan(args.ttft_requests, args.prompt_len, args.output_len_ttft, seed=2 * seed)
    records, _ = asyncio.run(drive(cluster, backend, single, 1))
    _check(records, backend)
    ttft_ms = statistics.median(r.ttft * 1000 for r in records)
    batch = plan(args.requests, args.prompt_len, args.output_len, seed=2 * seed + 1)
    records, duration = asyncio.run(drive(cluster, backend, batch, args.concurrency))
    _check(records, backend)
    return {"ttft_p50_ms": ttft_ms, "output_tok_s": sum(r.output_len for r in records) / duration,
            "tpot_p50_ms": statistics.median(r.tpot * 1000 for r in records)}


def _check(records: list[RequestRecord], backend: str) -> None:
    failed = [r.error for r in records if not r.ok]
    if failed:
        raise SystemExit(f"{backend}: {len(failed)} requests failed: {sorted(set(failed))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--output-len-ttft", type=int, default=2)
    parser.add_argument("--ttft-requests", type=int, default=20)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ensure_model(args.preset)
    spec = ClusterSpec(port=0, preset=args.preset, http_port=0)
    rounds: dict[str, list[dict[str, float]]] = {b: [] for b in BACKENDS}
    progress(f"1 prefill + 1 decode cluster ({args.preset}), gRPC and HTTP on the same gateway ...")
    with LocalCluster(spec, Path(tempfile.mkdtemp(prefix="pdserve-bench-"))).start(progress=True) as cluster:
        for backend in BACKENDS:  # warm-up: every path once
            asyncio.run(drive(cluster, backend, plan(2, args.prompt_len, 4, seed=3), 2))
        for i in range(args.rounds):
            order = BACKENDS[i % len(BACKENDS):] + BACKENDS[:i % len(BACKENDS)]
            for backend in order:
                figures = one_round(cluster, backend, args, seed=10 + i * len(BACKENDS) + BACKENDS.index(backend))
                rounds[backend].append(figures)
                progress(f"round {i + 1}/{args.rounds} {backend:12s} TTFT p50 {figures['ttft_p50_ms']:7.1f} ms  "
                         f"{figures['output_tok_s']:7.1f} output tok/s  TPOT p50 {figures['tpot_p50_ms']:6.1f} ms")
    medians = {b: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for b, rs in rounds.items()}
    ratio = {k: medians["openai"][k] / medians["pdserve"][k] for k in medians["pdserve"]}
    progress(f"HTTP over gRPC: TTFT p50 ×{ratio['ttft_p50_ms']:.3f}, output tok/s ×{ratio['output_tok_s']:.3f}")
    result: dict[str, Any] = {"device": device_name(), "preset": args.preset, "prompt_len": args.prompt_len,
                              "output_len": args.output_len, "concurrency": args.concurrency, "rounds": args.rounds,
                              "median": medians, "http_vs_grpc": ratio, "per_round": rounds}
    emit(result, args.out)


if __name__ == "__main__":
    main()
