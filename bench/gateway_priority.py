"""The gateway's CPU priority where it shares the workers' cores (``pdserve up --gateway-nice``,
``common.worker.cpu_plan``): niced by ``--nice`` against the workers' own priority (the default).

Fresh clusters of each kind take turns (niced, same priority, niced, ...), ``--rounds`` of each, so
the machine's drift falls on both alike; every cluster serves the same seeded arrivals at each
rate with six SLO classes scaled to the first cluster's unloaded latency (as ``bench/slo.py``).

    python bench/gateway_priority.py [--nice 10] [--rates 24,32] [--policies scorpio,fcfs] [--rounds 2]
                                     [--out f.json] [--plot f.png]

Last line: ``{"points": [{"policy", "rate", "gateway_nice", "round", "goodput", "admitted_attainment",
"rejected", "p99_ttft_ms", "p99_tpot_ms"}, ...], "ratios": [{"policy", "rate", "goodput_ratio"}, ...]}``
where ``goodput_ratio`` is the niced gateway's mean goodput over the same priority's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit, progress  # noqa: E402
from bench.slo import RANDOM, bench_point, point_seed, point_summary, slo_classes  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

SAME = 0  # the workers' own priority


def run_cluster(policy: str, nice: int, args: argparse.Namespace, slo_mix: str, work: Path) -> tuple[list[dict], str]:
    """One fresh cluster, its gateway niced by ``nice``, through every rate; its points and the SLO
    mix (scaled to its unloaded run when none is given yet)."""
    spec = ClusterSpec(port=0, policy=policy, preset=args.preset, gateway_nice=nice)
    with LocalCluster(spec, work / "logs").start() as cluster:
        unloaded = bench_point(cluster.address, 2.0, args, "", work / "unloaded", num_prompts=40, requests=RANDOM)
        slo_mix = slo_mix or slo_classes(unloaded["median_ttft_ms"], unloaded["median_tpot_ms"])
        points = [point_summary(policy, rate, bench_point(cluster.address, rate, args, slo_mix, work / "points",
                                                          requests=RANDOM, seed=point_seed(rate)))
                  for rate in args.rates]
    return points, slo_mix


def ratios(points: list[dict]) -> list[dict]:
    out = []
    for policy, rate in sorted({(p["policy"], p["rate"]) for p in points}):
        mine = [p for p in points if (p["policy"], p["rate"]) == (policy, rate)]
        niced = [p["goodput"] for p in mine if p["gateway_nice"] != SAME]
        same = [p["goodput"] for p in mine if p["gateway_nice"] == SAME]
        if niced and same:
            out.append({"policy": policy, "rate": rate,
                        "goodput_ratio": statistics.mean(niced) / max(statistics.mean(same), 1e-9)})
    return out


def plot(points: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = sorted({p["policy"] for p in points})
    fig, axes = plt.subplots(1, len(policies), figsize=(5.5 * len(policies), 4), squeeze=False)
    for ax, policy in zip(axes[0], policies):
        for nice_is_same, color, label in ((False, "tab:green", "gateway niced"),
                                           (True, "tab:gray", "gateway at the workers' priority")):
            ps = [p for p in points if p["policy"] == policy and (p["gateway_nice"] == SAME) == nice_is_same]
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
    parser.add_argument("--nice", type=int, default=10, help="the niced gateway's offset (1 to 19)")
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")], default=[24.0, 32.0])
    parser.add_argument("--policies", default="scorpio,fcfs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration-s", type=float, default=20.0, help="seconds of arrivals per point")
    parser.add_argument("--min-prompts", type=int, default=100)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    if not 1 <= args.nice <= 19:
        parser.error("--nice must be 1 to 19")
    ensure_model(args.preset)
    work = Path(tempfile.mkdtemp(prefix="pdserve-gateway-priority-"))
    slo_mix, points = "", []
    for policy in args.policies.split(","):
        for round_ in range(args.rounds):
            for nice in (args.nice, SAME):
                progress(f"[{policy} round {round_ + 1}/{args.rounds}] gateway "
                         + (f"niced by {nice}" if nice else "at the workers' priority") + " ...")
                got, slo_mix = run_cluster(policy, nice, args, slo_mix, work / f"{policy}-{round_}-{nice}")
                for p in got:
                    points.append({**p, "gateway_nice": nice, "round": round_})
                    progress(f"  nice {nice} @ {p['rate']:g} req/s: goodput {p['goodput']:.2f}, admitted meeting "
                             f"both {p['admitted_attainment']:.1%}, rejected {p['rejected']}, p99 TPOT "
                             f"{p['p99_tpot_ms']:.1f} ms")
    summary = ratios(points)
    for r in summary:
        progress(f"{r['policy']} @ {r['rate']:g} req/s: goodput with the gateway niced {r['goodput_ratio']:.2f}x")
    if args.plot:
        plot(points, args.plot)
    emit({"device": device_name(), "slo_classes": slo_mix, "duration_s": args.duration_s,
          "points": [{k: p[k] for k in ("policy", "rate", "gateway_nice", "round", "goodput", "admitted_attainment",
                                        "rejected", "p99_ttft_ms", "p99_tpot_ms")} for p in points],
          "ratios": summary}, args.out)


if __name__ == "__main__":
    main()
