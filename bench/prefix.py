"""Prefix caching and KV-aware routing on multi-turn conversations, against caching off and
against round-robin prefill routing, same workload, same run.

Three 2 prefill + 1 decode clusters (``pdserve up``'s defaults otherwise, the default model unless
``--preset``), one after the other, each driven by ``pdserve bench --dataset-name multi-turn``
with the same sessions: each turn resends the history (earlier prompts and answers) plus
``--turn-input-len`` new tokens after a think time.

- ``cache_kv_routing``: the defaults (prefix caching on, KV-aware prefill routing);
- ``cache_round_robin``: caching on, prefill workers taken in turn (``--prefill-routing round_robin``);
- ``no_cache``: ``--no-enable-prefix-caching`` on the workers.

Each reports ``ttft_p50_ms``, ``ttft_p99_ms``, ``prefill_tokens_per_request`` (prompt tokens
computed: prompt less what the worker's cache served, as its usage says) and ``hit_rate``
(cached over prompt tokens). Last line: ``{"configs": {...}, "ratios": {...}}``.

    python bench/prefix.py [--sessions 12] [--out bench/results/prefix-cpu.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress  # noqa: E402
from client.bench import metrics  # noqa: E402
from client.bench.cli import run_multi_turn  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from common.model.presets import DEFAULT_PRESET  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

CONFIGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # name -> (worker flags, gateway flags)
    "cache_kv_routing": ((), ()),
    "cache_round_robin": ((), ("--prefill-routing", "round_robin")),
    "no_cache": (("--no-enable-prefix-caching",), ()),
}


def bench_args(args: argparse.Namespace, port: int) -> argparse.Namespace:
    return argparse.Namespace(
        backend="pdserve", host="127.0.0.1", port=port, api_key="", num_prompts=args.sessions * args.turns,
        turns=args.turns, random_input_len=args.first_len, turn_input_len=args.turn_input_len,
        random_output_len=args.output_len, burstiness=1.0, slo_mix="", seed=args.seed, goodput=[],
        think_time_s=args.think_time_s, ignore_eos=True)


def run_config(name: str, args: argparse.Namespace) -> dict[str, Any]:
    worker_flags, gateway_flags = CONFIGS[name]
    spec = ClusterSpec(port=0, preset=args.preset, prefill=2, decode=1, worker_args=worker_flags,
                       gateway_args=gateway_flags)
    progress(f"{name}: 2 prefill + 1 decode ({' '.join(worker_flags + gateway_flags) or 'defaults'}) ...")
    with LocalCluster(spec, Path(tempfile.mkdtemp(prefix="pdserve-bench-"))).start(progress=True) as cluster:
        port = int(cluster.address.rsplit(":", 1)[1])
        records, duration = run_multi_turn(bench_args(args, port), args.request_rate)
    summary = metrics.summarize(records, duration, [50, 99], ["ttft"])
    failed = [r.error for r in records if r.error]
    figures = {"ttft_p50_ms": summary["median_ttft_ms"], "ttft_p99_ms": summary["p99_ttft_ms"],
               "prefill_tokens_per_request": summary["prefill_tokens_per_request"],
               "hit_rate": summary["prefix_hit_rate"], "completed": summary["completed"],
               "errors": sorted(set(failed)), "duration_s": duration}
    progress(f"  TTFT p50 {figures['ttft_p50_ms']:.1f} ms, p99 {figures['ttft_p99_ms']:.1f} ms; "
             f"{figures['prefill_tokens_per_request']:.0f} prefill tokens/request; hit rate {figures['hit_rate']:.2f}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--first-len", type=int, default=256, help="the opening prompt's tokens")
    parser.add_argument("--turn-input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--think-time-s", type=float, default=1.0)
    parser.add_argument("--request-rate", type=float, default=1.0, help="requests/s (sessions start at rate/turns)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ensure_model(args.preset)
    configs = {name: run_config(name, args) for name in CONFIGS}
    best, off = configs["cache_kv_routing"], configs["no_cache"]
    ratios = {"prefill_tokens_no_cache_over_cache": off["prefill_tokens_per_request"] / max(best["prefill_tokens_per_request"], 1e-9),
              "ttft_p50_no_cache_over_cache": off["ttft_p50_ms"] / best["ttft_p50_ms"],
              "ttft_p50_round_robin_over_kv_routing": configs["cache_round_robin"]["ttft_p50_ms"] / best["ttft_p50_ms"]}
    progress("no cache / cache+KV routing: prefill tokens ×{prefill_tokens_no_cache_over_cache:.2f}, "
             "TTFT p50 ×{ttft_p50_no_cache_over_cache:.2f}; round robin / KV routing TTFT p50 "
             "×{ttft_p50_round_robin_over_kv_routing:.2f}".format(**ratios))
    emit({"device": device_name(), "preset": args.preset, "workload": {k: v for k, v in vars(args).items() if k != "out"},
          "configs": configs, "ratios": ratios}, args.out)


if __name__ == "__main__":
    main()
