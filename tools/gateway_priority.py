"""Use when the gateway's CPU priority or place is in question on a host where it shares the
workers' cores.

It compares a gateway (``pdserve up --gateway-nice``, ``--gateway-cores``; ``common.worker.cpu_plan``)
niced by ``--nice`` and placed by ``--cores`` against the plan's default (the workers' own priority,
where the OS puts it; chosen by measurement: docs/decisions.md, "CPU plan: the gateway's priority
and cores").

Fresh clusters of each kind take turns (tried, default, tried, ...), ``--rounds`` of each, so
the machine's drift falls on both alike; every cluster serves the same seeded arrivals at each
rate. ``--workload scaled`` (the default): ``bench/slo.py``'s requests over gRPC, six SLO classes
scaled to the first cluster's unloaded latency; ``mixed``: ``bench/vs_vllm.py``'s (400-token
prompts, TTFT 100 / 300 / 1,000 ms × TPOT 15 / 50 ms) through the OpenAI HTTP front door.

    python tools/gateway_priority.py [--nice 10] [--cores any|decode] [--workload scaled|mixed]
                                     [--rates 24,32] [--policies scorpio,fcfs] [--rounds 2]
                                     [--out f.json] [--plot f.png]

Last line: ``{"points": [{"policy", "rate", "gateway_nice", "gateway_cores", "round", "goodput",
"admitted_attainment", "rejected", "p99_ttft_ms", "p99_tpot_ms"}, ...], "ratios": [{"policy", "rate",
"goodput_ratio"}, ...]}`` where ``goodput_ratio`` is the tried gateway's mean goodput over the default's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress, run_load_tester  # noqa: E402
from bench.slo import RANDOM, bench_point, point_seed, point_summary, slo_classes  # noqa: E402
from bench.lib.serving_systems import wait_for_models  # noqa: E402
from bench.vs_vllm import WORKLOADS as VS_VLLM_WORKLOADS  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from common.worker.cpu_plan import GATEWAY_PLACES  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402
from pdserve.commands_serve import niceness  # noqa: E402

MIXED = VS_VLLM_WORKLOADS["mixed"]  # (load tester flags, SLO classes)
DEFAULT = (0, "any")  # the plan's gateway: the workers' own priority, where the OS puts it


def run_cluster(policy: str, arm: tuple[int, str], args: argparse.Namespace, slo_mix: str,
                work: Path) -> tuple[list[dict], str]:
    """One fresh cluster, its gateway niced and placed by ``arm`` (nice, cores), through every rate;
    its points and the SLO mix (scaled to its unloaded run when none is given yet)."""
    spec = ClusterSpec(port=0, policy=policy, preset=args.preset, gateway_nice=arm[0], gateway_cores=arm[1],
                       http_port=0 if args.workload == "mixed" else None)
    with LocalCluster(spec, work / "logs").start() as cluster:
        if args.workload == "mixed":
            base_url = f"http://{cluster.http_address}"
            wait_for_models(base_url, 60.0)
            run_load_tester(("--backend", "openai", "--base-url", base_url), 2.0, 20, MIXED[0], "", work / "warm")
            return [_mixed_point(policy, rate, base_url, args, work) for rate in args.rates], MIXED[1]
        unloaded = bench_point(cluster.address, 2.0, args, "", work / "unloaded", num_prompts=40, requests=RANDOM)
        slo_mix = slo_mix or slo_classes(unloaded["median_ttft_ms"], unloaded["median_tpot_ms"])
        points = [point_summary(policy, rate, bench_point(cluster.address, rate, args, slo_mix, work / "points",
                                                          requests=RANDOM, seed=point_seed(rate)))
                  for rate in args.rates]
    return points, slo_mix


def _mixed_point(policy: str, rate: float, base_url: str, args: argparse.Namespace, work: Path) -> dict:
    target = ("--backend", "openai", "--base-url", base_url)
    n = max(args.min_prompts, round(rate * args.duration_s))
    return point_summary(policy, rate, run_load_tester(target, rate, n, MIXED[0], MIXED[1], work / "points",
                                                       seed=point_seed(rate)))


def ratios(points: list[dict]) -> list[dict]:
    out = []
    for policy, rate in sorted({(p["policy"], p["rate"]) for p in points}):
        mine = [p for p in points if (p["policy"], p["rate"]) == (policy, rate)]
        tried = [p["goodput"] for p in mine if not _is_default(p)]
        default = [p["goodput"] for p in mine if _is_default(p)]
        if tried and default:
            out.append({"policy": policy, "rate": rate,
                        "goodput_ratio": statistics.mean(tried) / max(statistics.mean(default), 1e-9)})
    return out


def _is_default(point: dict) -> bool:
    return (point["gateway_nice"], point["gateway_cores"]) == DEFAULT


def describe(arm: tuple[int, str]) -> str:
    nice, cores = arm
    return (f"niced by {nice}" if nice else "at the workers' priority") + (
        ", on the decode workers' cores" if cores == "decode" else ", where the OS puts it")


def plot(points: list[dict], tried: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = sorted({p["policy"] for p in points})
    fig, axes = plt.subplots(1, len(policies), figsize=(5.5 * len(policies), 4), squeeze=False)
    for ax, policy in zip(axes[0], policies):
        for is_default, color, label in ((False, "tab:green", f"gateway {tried}"),
                                         (True, "tab:gray", f"gateway {describe(DEFAULT)}")):
            ps = [p for p in points if p["policy"] == policy and _is_default(p) == is_default]
            ax.plot([p["rate"] for p in ps], [p["goodput"] for p in ps], "o", color=color, label=label)
            rates = sorted({p["rate"] for p in ps})
            ax.plot(rates, [statistics.mean(p["goodput"] for p in ps if p["rate"] == r) for r in rates], "-", color=color)
        ax.set(title=f"{policy}: goodput (good req/s), each round a dot", xlabel="request rate (req/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nice", type=niceness, default=10, help="the tried gateway's niceness (0 to 19)")
    parser.add_argument("--cores", choices=GATEWAY_PLACES, default="any", help="where the tried gateway runs")
    parser.add_argument("--workload", choices=("scaled", "mixed"), default="scaled")
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")], default=[24.0, 32.0])
    parser.add_argument("--policies", default="scorpio,fcfs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration-s", type=float, default=20.0, help="seconds of arrivals per point")
    parser.add_argument("--min-prompts", type=int, default=100)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    arm = (args.nice, args.cores)
    if arm == DEFAULT:
        parser.error("with --cores any, --nice must be at least 1 (else nothing differs)")
    ensure_model(args.preset)
    work = Path(tempfile.mkdtemp(prefix="pdserve-gateway-priority-"))
    slo_mix, points = "", []
    for policy in args.policies.split(","):
        for round_ in range(args.rounds):
            for nice, cores in (arm, DEFAULT):
                progress(f"[{policy} round {round_ + 1}/{args.rounds}] gateway {describe((nice, cores))} ...")
                got, slo_mix = run_cluster(policy, (nice, cores), args, slo_mix,
                                           work / f"{policy}-{round_}-{nice}-{cores}")
                for p in got:
                    points.append({**p, "gateway_nice": nice, "gateway_cores": cores, "round": round_})
                    progress(f"  nice {nice}, {cores} cores @ {p['rate']:g} req/s: goodput {p['goodput']:.2f}, "
                             f"admitted meeting both {p['admitted_attainment']:.1%}, rejected {p['rejected']}, "
                             f"p99 TPOT {p['p99_tpot_ms']:.1f} ms")
    summary = ratios(points)
    for r in summary:
        progress(f"{r['policy']} @ {r['rate']:g} req/s: goodput with the gateway {describe(arm)}: "
                 f"{r['goodput_ratio']:.2f}x")
    if args.plot:
        plot(points, describe(arm), args.plot)
    emit({"device": device_name(), "workload": args.workload, "slo_classes": slo_mix, "duration_s": args.duration_s,
          "points": [{k: p[k] for k in ("policy", "rate", "gateway_nice", "gateway_cores", "round", "goodput", "admitted_attainment",
                                        "rejected", "p99_ttft_ms", "p99_tpot_ms")} for p in points],
          "ratios": summary}, args.out)


if __name__ == "__main__":
    main()
