"""Two gateways over one worker pool against one gateway, on one cluster and one arrival sequence:
the same load sent all through one gateway, then split over both (``pdserve bench --gateways``),
in turn, at a multiple of the knee (default twice). Each gateway sees only what it sent, so
what keeps the two from admitting jointly what no worker can serve is the workers' own checks
(a decode worker's TPOT guard, a prefill worker's refusal of a prompt its whole queue would make
late): the share of admitted requests meeting both SLOs with two gateways is the figure.

The cluster first serves one uncounted point at the rate (its closed loops' margins start on the
safe side and settle under load; what that point met is reported beside the rounds), and the
rounds alternate which configuration goes first, so a cluster still settling favours neither.

    python bench/gateways.py [--preset tiny] [--knee 64] [--multiple 2] [--out bench/results/gateways-cpu.json]

The knee (where ``fcfs`` first meets fewer than 90% of SLOs) is ``--knee``, else the one
``bench/slo.py`` recorded for the scaled workload of this preset in ``bench/results/``; the SLO
classes are scaled to this cluster's unloaded latency, as ``bench/slo.py`` scales them. On a
host without a core per gateway, the two share the workers' cores: the figure is then about
admission across gateways, not about the gateways' own capacity.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.common import device_name, emit, progress  # noqa: E402
from bench.lib.cluster_readings import prefill_worker_refusals  # noqa: E402
from bench.slo import RANDOM, bench_point, point_seed, point_summary, slo_classes  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def recorded_knee(preset: str) -> float | None:
    """The scaled workload's knee ``bench/slo.py`` recorded for ``preset`` on a CPU, if any."""
    path = RESULTS / ("slo-cpu-tiny.json" if preset == "tiny" else f"slo-cpu-{preset.split('-')[0]}.json")
    if not path.exists():
        return None
    scaled = json.loads(path.read_text()).get("workloads", {}).get("scaled", {})
    return scaled.get("knee_rate") if scaled.get("knee_found") else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--prefill", type=int, default=1)
    parser.add_argument("--decode", type=int, default=2)
    parser.add_argument("--knee", type=float, default=None, help="req/s (default: bench/slo.py's recorded one)")
    parser.add_argument("--multiple", type=float, default=2.0, help="the rate, as a multiple of the knee")
    parser.add_argument("--duration-s", type=float, default=12.0)
    parser.add_argument("--min-prompts", type=int, default=100)
    parser.add_argument("--base-prompts", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3, help="one gateway and two, in turn, this many times")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false",
                        help="count from the first point (default: one uncounted point at the rate first)")
    parser.add_argument("--detailed", action="store_true",
                        help="keep every request's timings and id in each point's file, to match with the gateways' logs")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    knee = args.knee or recorded_knee(args.preset)
    if knee is None:
        parser.error("no knee recorded for this preset: run bench/slo.py --workload scaled first, or give --knee")
    rate = round(knee * args.multiple, 3)
    ensure_model(args.preset)
    work = Path(tempfile.mkdtemp(prefix="pdserve-gateways-"))
    spec = ClusterSpec(port=0, policy="scorpio", preset=args.preset, prefill=args.prefill, decode=args.decode,
                       gateways=2, metrics=True)
    progress(f"two gateways over {args.prefill} prefill + {args.decode} decode ({args.preset}); logs under {work}")
    points: list[dict] = []
    with LocalCluster(spec, work / "logs").start(progress=True) as cluster:
        one, two = cluster.addresses[0], ",".join(cluster.addresses)
        base = bench_point(one, float("inf"), args, "", work / "unloaded", num_prompts=args.base_prompts,
                           extra=("--max-concurrency", "1"))
        slo_mix = slo_classes(base["median_ttft_ms"], base["median_tpot_ms"], args.preset != "tiny")
        progress(f"  unloaded: median TTFT {base['median_ttft_ms']:.1f} ms, TPOT {base['median_tpot_ms']:.2f} ms; "
                 f"{args.multiple:g}x the knee ({knee:g} req/s): {rate:g} req/s")
        n = max(args.min_prompts, round(rate * args.duration_s))
        warmup = None
        if args.warmup:  # the closed loops' margins start on the safe side and settle under load
            r = bench_point(two, rate, args, slo_mix, work / "warmup", num_prompts=n, requests=RANDOM,
                            seed=point_seed(rate) + 1, extra=("--gateways", two))
            warmup = point_summary("scorpio", rate, r) | {"gateways": 2, "round": -1}
            progress(f"  [warm-up, not counted] admitted meeting both {warmup['admitted_attainment']:.1%}")
        for k in range(args.rounds):
            # one, two; then two, one: a cluster that still improves over the run favours neither
            for gateways, address in ((1, one), (2, two)) if k % 2 == 0 else ((2, two), (1, one)):
                extra = ("--gateways", address) if gateways == 2 else ()
                refused = prefill_worker_refusals(cluster)
                r = bench_point(one, rate, args, slo_mix, work / f"{gateways}-{k}", num_prompts=n, requests=RANDOM,
                                seed=point_seed(rate), extra=extra)
                point = point_summary("scorpio", rate, r) | {"gateways": gateways, "round": k,
                                                             "prefill_worker_refusals": prefill_worker_refusals(cluster) - refused}
                points.append(point)
                progress(f"  [{gateways} gateway{'s' if gateways > 1 else ''}, round {k + 1}] goodput "
                         f"{point['goodput']:.2f}, admitted meeting both {point['admitted_attainment']:.1%}, "
                         f"rejected {point['rejected']} (by the prefill worker's own check: "
                         f"{point['prefill_worker_refusals']:.0f})")
    by = {g: [p for p in points if p["gateways"] == g] for g in (1, 2)}
    goodput = {g: [p["goodput"] for p in by[g]] for g in (1, 2)}
    summary = {"rate": rate, "knee": knee, "multiple": args.multiple,
               "two_over_one_goodput": sum(goodput[2]) / sum(goodput[1]) if sum(goodput[1]) else None,
               "one_gateway_goodput_runs": goodput[1], "two_gateways_goodput_runs": goodput[2],
               "two_gateways_admitted_attainment_min": min(p["admitted_attainment"] for p in by[2]),
               "one_gateway_admitted_attainment_min": min(p["admitted_attainment"] for p in by[1]),
               "two_gateways_admitted_attainment_pooled": _pooled(by[2]),
               "one_gateway_admitted_attainment_pooled": _pooled(by[1]),
               "warmup_admitted_attainment": warmup["admitted_attainment"] if warmup else None}
    progress(f"two gateways: {summary['two_over_one_goodput']:.2f}x one gateway's goodput (runs "
             f"{goodput[2]} against {goodput[1]}), at least {summary['two_gateways_admitted_attainment_min']:.1%} of "
             f"admitted requests meeting both SLOs (one gateway: {summary['one_gateway_admitted_attainment_min']:.1%})")
    emit({"device": device_name("cpu"), "preset": args.preset, "prefill": args.prefill, "decode": args.decode,
          "slo_classes": slo_mix, "points": points, "summary": summary}, args.out)


def _pooled(points: list[dict]) -> float | None:
    """Admitted requests meeting both SLOs over all these points together."""
    admitted = sum(p["num_prompts"] - p["rejected"] - p["failed"] for p in points)
    good = sum(p["admitted_attainment"] * (p["num_prompts"] - p["rejected"] - p["failed"]) for p in points)
    return good / admitted if admitted else None


if __name__ == "__main__":
    main()
