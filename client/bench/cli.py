"""``pdserve bench`` / ``python -m client.bench``: flags and result keys as in ``vllm bench serve``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from client.bench import metrics
from client.bench.openai_runner import BACKENDS, OpenAITarget, run_plan_openai, served_model
from client.bench.plan import build_plan
from client.bench.processes import auto_processes, run_plan_in_processes
from client.bench.sessions import plan_sessions, run_sessions
from client.bench.workload import PlannedRequest, parse_slo_mix
from client.bench.report import ProgressBar, summary_table

METRICS = ("ttft", "tpot", "itl", "e2el")


Execute = Callable[[argparse.Namespace, list[PlannedRequest], str], "tuple[list[metrics.RequestRecord], float]"]


def add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=BACKENDS, default="pdserve",
                   help="pdserve: the gateway's gRPC API; openai / openai-chat: any OpenAI-compatible HTTP "
                        "server's /v1/completions / /v1/chat/completions")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50051, help="the gRPC port (pdserve backend)")
    p.add_argument("--gateways", default="", metavar="HOST:PORT,...",
                   help="pdserve backend: several gateways over one pool, in place of --host/--port: the load is "
                        "split over them, and a request one cannot take (UNAVAILABLE) goes to the next")
    p.add_argument("--base-url", default=None, help="openai backends: the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--endpoint", default="", help="openai backends: the path, if not the backend's usual one")
    p.add_argument("--model", default=None, help="openai backends: the model to ask for (default: the "
                                                  "first one /v1/models lists)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""),
                   help="sent as a bearer token, over gRPC and HTTP alike (default: $OPENAI_API_KEY)")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--processes", default="auto",
                   help="load-tester processes sending the plan between them (gRPC backend): a number, or auto: "
                        "enough for the token messages the plan asks for, at most a quarter of the cores "
                        "(client.bench.processes)")
    add_workload_args(p)
    add_report_args(p)


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """What to send and when (shared by ``pdserve bench`` and ``pdserve simulate``)."""
    p.add_argument("--request-rate", type=float, default=float("inf"), help="req/s; inf sends all at once")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps; 1 = Poisson")
    p.add_argument("--num-prompts", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset-name", choices=("random", "sharegpt-like", "trace", "multi-turn"), default="random",
                   help="multi-turn: sessions whose turns resend the history (gRPC backend)")
    p.add_argument("--dataset-path", default=None, help="trace CSV (arrived_at, num_prefill_tokens, num_decode_tokens)")
    p.add_argument("--time-scale", type=float, default=1.0, help="trace: multiply arrival times")
    p.add_argument("--length-scale", type=float, default=1.0, help="trace: divide token counts")
    p.add_argument("--random-input-len", type=int, default=128)
    p.add_argument("--random-output-len", type=int, default=64)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--max-input-len", type=int, default=1024, help="sharegpt-like: cap on prompt tokens")
    p.add_argument("--max-output-len", type=int, default=512, help="sharegpt-like: cap on output tokens")
    p.add_argument("--shared-prefix-len", type=int, default=0,
                   help="random: every prompt starts with the same this many tokens (a shared system prompt)")
    p.add_argument("--turns", type=int, default=4, help="multi-turn: turns per session")
    p.add_argument("--turn-input-len", type=int, default=32, help="multi-turn: new user tokens per later turn "
                                                                     "(the first turn: --random-input-len)")
    p.add_argument("--think-time-s", type=float, default=1.0, help="multi-turn: pause after an answer")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--goodput", nargs="*", default=[], metavar="KEY:MS", help="SLOs, e.g. ttft:500 tpot:50")
    p.add_argument("--slo-mix", default="", help="classes name:ttft_ms:tpot_ms[:weight],... sent with requests")


def add_report_args(p: argparse.ArgumentParser, default_metrics: str = "ttft,tpot,itl") -> None:
    """Which figures, which rates, and where results go (shared by bench and simulate)."""
    p.add_argument("--percentile-metrics", default=default_metrics)
    p.add_argument("--metric-percentiles", default="99")
    p.add_argument("--sweep", default="", help="comma-separated request rates, one run each")
    p.add_argument("--save-result", action="store_true")
    p.add_argument("--save-detailed", action="store_true")
    p.add_argument("--result-dir", default=".")
    p.add_argument("--result-filename", default=None)
    p.add_argument("--plot", action="store_true", help="write PNG figures next to the result")


def parse_goodput(items: list[str]) -> tuple[float | None, float | None]:
    slo: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition(":")
        if key not in ("ttft", "tpot") or not value:
            raise ValueError(f"--goodput entries are ttft:MS or tpot:MS, got {item!r}")
        slo[key] = float(value)
    return slo.get("ttft"), slo.get("tpot")


def run_point(args: argparse.Namespace, rate: float,
              execute: Execute | None = None) -> tuple[dict[str, Any], list[metrics.RequestRecord]]:
    if args.dataset_name == "multi-turn":
        records, duration = run_multi_turn(args, rate)
    else:
        plan = build_plan(args, rate)
        records, duration = (execute or _backend(args))(args, plan, f"rate {rate:g}")
    wanted = [m for m in args.percentile_metrics.split(",") if m in METRICS]
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]
    result = metrics.summarize(records, duration, percentiles, wanted)
    result.update({"request_rate": rate, "burstiness": args.burstiness, "max_concurrency": getattr(args, "max_concurrency", None),
                   "dataset_name": args.dataset_name, "per_class": metrics.per_class(records, duration)})
    if args.save_detailed:
        result.update(metrics.detailed(records))
    print(summary_table(result, result["per_class"], wanted, percentiles), flush=True)
    return result, records


def grpc_address(args: argparse.Namespace) -> str:
    """The gateway (or comma-separated gateways) the pdserve backend sends to."""
    return getattr(args, "gateways", "") or f"{args.host}:{args.port}"


def parse_processes(value: str, plan: list[PlannedRequest]) -> int:
    if value == "auto":
        return auto_processes(plan)
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"--processes is a whole number of at least 1, or auto; got {value!r}")
    return int(value)


def _over_grpc(args: argparse.Namespace, plan: list[PlannedRequest],
               label: str) -> tuple[list[metrics.RequestRecord], float]:
    processes = parse_processes(getattr(args, "processes", "1"), plan)
    bar = ProgressBar(len(plan), label + (f", {processes} processes" if processes > 1 else ""))
    return run_plan_in_processes(grpc_address(args), plan, processes, args.ignore_eos, args.max_concurrency,
                                 parse_goodput(args.goodput), bar.update, api_key=getattr(args, "api_key", ""))


def run_multi_turn(args: argparse.Namespace, rate: float) -> tuple[list[metrics.RequestRecord], float]:
    """``--dataset-name multi-turn`` at ``rate`` requests/s, over gRPC: the records and the wall time."""
    if getattr(args, "backend", "pdserve") != "pdserve":
        raise ValueError("--dataset-name multi-turn runs over gRPC (--backend pdserve): a turn resends the answer's token ids")
    sessions = plan_sessions(args.num_prompts, args.turns, args.random_input_len, args.turn_input_len,
                             args.random_output_len, rate, args.burstiness, list(parse_slo_mix(args.slo_mix or "")),
                             args.seed)
    bar = ProgressBar(len(sessions) * args.turns, f"rate {rate:g}, {len(sessions)} sessions")
    return asyncio.run(run_sessions(grpc_address(args), sessions, args.think_time_s, args.ignore_eos,
                                    parse_goodput(args.goodput), bar.update, api_key=getattr(args, "api_key", "")))


def _backend(args: argparse.Namespace) -> Execute:
    return _over_grpc if getattr(args, "backend", "pdserve") == "pdserve" else _over_openai


def _over_openai(args: argparse.Namespace, plan: list[PlannedRequest],
                 label: str) -> tuple[list[metrics.RequestRecord], float]:
    if not args.base_url:
        raise ValueError(f"--backend {args.backend} needs --base-url (e.g. http://127.0.0.1:8000)")
    if getattr(args, "processes", "auto") not in ("auto", "1"):
        raise ValueError(f"--processes sends over gRPC (--backend pdserve); --backend {args.backend} sends from one")

    async def go() -> tuple[list[metrics.RequestRecord], float]:
        model = args.model or await served_model(args.base_url, args.api_key)
        target = OpenAITarget(args.base_url, args.backend, model, args.api_key, args.endpoint)
        print(f"{label}: {target.url} model {model}", file=sys.stderr, flush=True)
        bar = ProgressBar(len(plan), label)
        return await run_plan_openai(target, plan, args.ignore_eos, args.max_concurrency,
                                     parse_goodput(args.goodput), bar.update)

    return asyncio.run(go())


def run(args: argparse.Namespace, execute: Execute | None = None, prefix: str = "pdserve-bench") -> int:
    """Every rate of ``--sweep`` (or ``--request-rate``) through ``execute`` (default: a running
    gateway over gRPC); prints, plots and saves the results."""
    rates = [float(r) for r in args.sweep.split(",")] if args.sweep else [args.request_rate]
    out_dir = Path(args.result_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    points = []
    if args.plot:
        from client.bench import plots  # matplotlib only when asked for: it doubles the start-up time
    for rate in rates:
        result, records = run_point(args, rate, execute)
        points.append(result)
        if args.plot:
            base = out_dir / f"{prefix}-{rate:g}qps-{stamp}"
            written = [plots.latency_cdfs(records, base.with_name(base.name + "-cdf.png")),
                       plots.timeline(records, result["duration"], base.with_name(base.name + "-timeline.png"))]
            print("plots: " + ", ".join(map(str, written)), file=sys.stderr)
    if args.plot and len(points) > 1:
        print(f"plots: {plots.sweep_curves(points, out_dir / f'{prefix}-sweep-{stamp}.png')}", file=sys.stderr)
    if args.save_result or args.save_detailed:
        name = args.result_filename or f"{prefix}-{'sweep' if len(points) > 1 else f'{rates[0]:g}qps'}-{stamp}.json"
        out_dir.mkdir(parents=True, exist_ok=True)
        body = {"points": points} if len(points) > 1 else points[0]
        (out_dir / name).write_text(json.dumps(body, indent=2, default=str))
        print(f"saved {out_dir / name}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdserve bench", description="Load-test a running pdserve gateway.")
    add_bench_args(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as exc:
        print(f"pdserve bench: error: {exc}", file=sys.stderr)
        return 2
