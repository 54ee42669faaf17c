"""The guards at scale, in the simulator: a 16 prefill + 16 decode cluster on the Azure
conversation trace, scorpio (least predicted TTFT, decode placement by VBS headroom, both guards)
against fcfs (least loaded) and round-robin routing, at rates from light to past capacity.

The trace (its own arrival pattern, stretched to each mean rate) is replayed with a GPU cost
profile (``simulator/profiles/h100-1b-bfloat16.json`` by default) and six SLO classes: TTFT
0.5/2/3/0.5/1/7.5 s × TPOT 30/30/30/50/50/50 ms. Prompts longer than the model's limit are
refused by all policies alike.

    python bench/sim_scale.py [--rates 100,200,300,400,500] [--policies scorpio,fcfs,round_robin] [--local-prefill on|off]
                              [--out bench/results/sim-scale.json] [--plot f.png]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import emit, progress  # noqa: E402
from client.bench.cli import add_workload_args  # noqa: E402
from client.bench.metrics import summarize  # noqa: E402
from client.bench.plan import build_plan  # noqa: E402
from common.slo.cost_models import CostModels  # noqa: E402
from simulator.config import SimConfig  # noqa: E402
from simulator.run import simulate  # noqa: E402

PROFILE = Path(__file__).resolve().parents[1] / "simulator" / "profiles" / "h100-1b-bfloat16.json"
CLASSES = "a:500:30,b:2000:30,c:3000:30,d:500:50,e:1000:50,f:7500:50"
POLICIES = ("scorpio", "fcfs", "round_robin")


def workload(rate: float, num_prompts: int) -> list:  # type: ignore[type-arg]
    parser = argparse.ArgumentParser()
    add_workload_args(parser)
    args = parser.parse_args(["--dataset-name", "trace", "--num-prompts", str(num_prompts), "--request-rate",
                              str(rate), "--slo-mix", CLASSES, "--ignore-eos"])
    return build_plan(args, rate)


def point(policy: str, rate: float, plan: list, args: argparse.Namespace, models: CostModels) -> dict:  # type: ignore[type-arg]
    config = SimConfig(prefill=args.prefill, decode=args.decode, policy=policy, local_prefill=args.local_prefill == "on")
    run = simulate(plan, config, models)
    result = summarize(run.records, run.duration, [99.0], ["ttft", "tpot"])
    admitted = int(result["num_prompts"]) - int(result["rejected"])  # type: ignore[call-overload]
    good = sum(r.good() for r in run.records)
    return {"policy": policy, "rate": rate, "goodput": result["request_goodput"], "adherence": result["slo_adherence"],
            "admitted_attainment": good / admitted if admitted else 0.0, "rejected": result["rejected"],
            "failed": result["failed"], "p99_ttft_ms": result["p99_ttft_ms"], "p99_tpot_ms": result["p99_tpot_ms"],
            "wall_s": run.wall_s}


def plot(points: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "goodput", "Goodput (good req/s)"),
                           (axes[1], "admitted_attainment", "Admitted requests meeting both SLOs")):
        for policy in dict.fromkeys(p["policy"] for p in points):
            ps = [p for p in points if p["policy"] == policy]
            ax.plot([p["rate"] for p in ps], [p[key] for p in ps], marker="o", label=policy)
        ax.set(title=title, xlabel="offered rate (req/s)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("16P16D, Azure conversation trace, H100 1b profile (simulated)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--rates", default="100,200,300,400,500")
    parser.add_argument("--duration-s", type=float, default=60.0, help="seconds of the trace per point")
    parser.add_argument("--cost-model", type=Path, default=PROFILE)
    parser.add_argument("--policies", default=",".join(POLICIES), help="of " + ", ".join(POLICIES))
    parser.add_argument("--local-prefill", choices=("on", "off"), default="on",
                        help="conditional disaggregation (the gateway's default: on; TTFT-guarded policies only)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    if not policies or set(policies) - set(POLICIES):
        parser.error(f"--policies: some of {', '.join(POLICIES)}")
    models = CostModels.load(args.cost_model)
    started = time.perf_counter()
    points = []
    for rate in (float(r) for r in args.rates.split(",")):
        plan = workload(rate, min(19366, round(rate * args.duration_s)))
        for policy in policies:
            points.append(point(policy, rate, plan, args, models))
            p = points[-1]
            progress(f"{policy:12s} @ {rate:5g} req/s: goodput {p['goodput']:7.1f}, adherence {p['adherence']:6.1%}, "
                     f"admitted meeting SLOs {p['admitted_attainment']:7.2%} ({p['wall_s']:.1f} s)")
    if args.plot:
        plot(points, args.plot)
    emit({"cluster": f"{args.prefill}P{args.decode}D", "profile": str(args.cost_model.name), "slo_classes": CLASSES,
          "local_prefill": args.local_prefill,
          "points": points, "wall_s": time.perf_counter() - started}, args.out)


if __name__ == "__main__":
    main()
