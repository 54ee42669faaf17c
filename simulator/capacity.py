"""``pdserve simulate --plan``: the cheapest prefill/decode split for a workload at a rate.

Every split of N workers (1..N−1 prefill) is simulated on the same arrival sequence, N from 2
up: the first N with a split that keeps the admitted requests' attainment at ``--slo-target``
and the SLO adherence (good / sent) at ``--min-adherence`` wins, and of its splits the one with
the most goodput. Each split tried is printed with its goodput per worker.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from client.bench.metrics import summarize
from client.bench.plan import build_plan
from common.slo.cost_models import CostModels
from simulator.run import simulate


def plan_capacity(args: argparse.Namespace, models: CostModels) -> int:
    from simulator.cli import sim_config

    if math.isinf(args.request_rate):
        raise ValueError("--plan needs a finite --request-rate: the rate the split must serve")
    plan = build_plan(args, args.request_rate)
    tried: list[dict[str, object]] = []
    print(f"{'split':>8} {'goodput':>9} {'per worker':>11} {'adherence':>10} {'admitted ok':>12}", flush=True)
    for total in range(2, args.plan_max_workers + 1):
        fits = []
        for prefill in range(1, total):
            point = _split(plan, args, models, prefill, total - prefill, sim_config)
            tried.append(point)
            ok = point["admitted_attainment"] >= args.slo_target and point["adherence"] >= args.min_adherence
            print(f"{point['split']:>8} {point['goodput']:9.2f} {point['goodput_per_worker']:11.2f} "
                  f"{point['adherence']:10.1%} {point['admitted_attainment']:12.1%}{'  serves it' if ok else ''}",
                  flush=True)
            if ok:
                fits.append(point)
        if fits:
            best = max(fits, key=lambda p: float(p["goodput"]))  # type: ignore[arg-type]
            print(f"cheapest: {best['split']} ({total} workers) at {args.request_rate:g} req/s", file=sys.stderr)
            print(json.dumps({"rate": args.request_rate, "cheapest": best, "tried": tried}))
            return 0
    print(f"no split of up to {args.plan_max_workers} workers serves {args.request_rate:g} req/s "
          f"at {args.slo_target:.0%} admitted attainment and {args.min_adherence:.0%} adherence", file=sys.stderr)
    print(json.dumps({"rate": args.request_rate, "cheapest": None, "tried": tried}))
    return 1


def _split(plan, args: argparse.Namespace, models: CostModels, prefill: int, decode: int,  # type: ignore[no-untyped-def]
           sim_config) -> dict[str, object]:
    run = simulate(plan, sim_config(args, prefill=prefill, decode=decode), models)
    result = summarize(run.records, run.duration, [99.0], ["ttft", "tpot"])
    admitted = result["num_prompts"] - result["rejected"]  # type: ignore[operator]
    good = sum(r.good() for r in run.records)
    return {"split": f"{prefill}P{decode}D", "prefill": prefill, "decode": decode,
            "goodput": result["request_goodput"],
            "goodput_per_worker": float(result["request_goodput"]) / (prefill + decode),  # type: ignore[arg-type]
            "adherence": result["slo_adherence"], "admitted_attainment": good / admitted if admitted else 0.0,
            "rejected": result["rejected"]}
