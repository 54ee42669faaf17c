"""fcfs against scorpio on one arrival sequence per rate, through ``pdserve bench``, on a 1+1
cluster started as ``pdserve up`` starts it (its defaults: cores by plan, no worker flags, each
worker measuring or loading its own cost models).

Workloads (``--workload``, repeatable, or ``all``):

- ``scaled``: random prompts of 192 tokens ± 50%, outputs of 48 ± 50%, Poisson arrivals; six SLO
  classes (TTFT tight/medium/loose × TPOT tight/loose) as multiples of the cluster's own unloaded
  latency (median TTFT and TPOT of a short run at a low rate, measured first), so every class is
  attainable when the cluster is idle.
- ``fixed``: the same requests with six fixed classes, TTFT 100 / 300 / 1,000 ms × TPOT 15 / 50 ms.
- ``bursty``: bursty arrivals (gamma, CV² = 2), long-tailed prompts up to 3,500 tokens and short
  outputs (up to 128), six fixed classes TTFT 0.5/2/3/0.5/1/7.5 s × TPOT 30/30/30/50/50/50 ms.
- ``trace``: the Azure LLM conversation trace (2023) as it came, its bursts and its lengths (token
  counts divided by 4 to fit the tiny model's context: prompts 289 tokens on average, up to 3,512;
  outputs 53, up to 250), its arrival times stretched to each rate; ``fixed``'s six classes.

Rates: a grid up to the first rate where fcfs meets fewer than 90% of SLOs (the knee; past the
grid's end by its last step, up to four more rates, while fcfs still meets there), then 1.5× and
2× the knee. Each point runs ``--duration-s`` of arrivals (at least ``--min-prompts``), so an
overload is measured in its steady state. Every cluster gets a short unloaded run first (so
neither policy pays for cold connections in its measurements). Each rate draws its own prompts
(``point_seed``), the same for both policies: one seed for all would repeat a run's prompts
wherever two rates send as many requests (``--min-prompts``), and the prefix cache would serve
the repeats.

Each workload also fits what the gateway's event loop spends on a served and on a refused request
(``gateway_loop_ms``, from its thread's CPU over each point): ``pdserve simulate --gateway-loop-ms``.

    python bench/slo.py [--workload scaled --workload fixed] [--out bench/results/slo-cpu.json] [--plot slo.png]
                        [--device cuda --preset 1b --mps]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress, run_load_tester  # noqa: E402
from client.bench.workload import BUILTIN_TRACE, read_trace  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from bench.lib.cluster_readings import gateway_counts  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402
from bench.lib.process_cores import busiest_thread_during  # noqa: E402
from simulator.config import gateway_loop_from_points  # noqa: E402

TTFT_MULTIPLES = {"ttft_tight": 4.0, "ttft_medium": 12.0, "ttft_loose": 40.0}
TPOT_MULTIPLES = {"tpot_tight": 3.0, "tpot_loose": 10.0}
# A real model's step (tens of ms on a CPU core) is long beside the front end's noise, so its
# scaled classes sit nearer its unloaded latency: TPOT 1.3x (a step of batching beside one request
# alone) and 3x; TTFT 1.5 / 3 / 10x.
REAL_TTFT_MULTIPLES = {"ttft_tight": 1.5, "ttft_medium": 3.0, "ttft_loose": 10.0}
REAL_TPOT_MULTIPLES = {"tpot_tight": 1.3, "tpot_loose": 3.0}
# ``--grid auto``: rates as multiples of what one prefill worker serves unloaded (1 / unloaded TTFT)
AUTO_GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    requests: tuple[str, ...]  # `pdserve bench` flags: dataset, lengths, arrivals
    slo_mix: str  # "" : scaled to the unloaded latency


TRACE_LENGTH_SCALE = 4  # the Azure trace's prompts (up to 14,050 tokens) within the tiny model's 4,096
TRACE_REQUESTS = ("--dataset-name", "trace", "--length-scale", str(TRACE_LENGTH_SCALE))


def fixed_classes(ttfts_ms: tuple[int, ...], tpots_ms: tuple[int, ...]) -> str:
    """``--slo-mix`` of every TTFT × TPOT pair in equal shares, each named ``t<TTFT>-p<TPOT>``."""
    return ",".join(f"t{t}-p{p}:{t}:{p}" for t in ttfts_ms for p in tpots_ms)


FIXED_CLASSES = fixed_classes((100, 300, 1000), (15, 50))
RANDOM = ("--random-input-len", "192", "--random-output-len", "48", "--random-range-ratio", "0.5")
WORKLOADS = {
    "scaled": Workload("scaled", RANDOM, ""),
    "fixed": Workload("fixed", RANDOM, FIXED_CLASSES),
    "bursty": Workload("bursty", ("--dataset-name", "sharegpt-like", "--max-input-len", "3500", "--max-output-len",
                                  "128", "--burstiness", "0.5"),
                       "a:500:30,b:2000:30,c:3000:30,d:500:50,e:1000:50,f:7500:50"),
    "trace": Workload("trace", TRACE_REQUESTS, FIXED_CLASSES),
}


TESTER_LAG_WARN_MS = 10.0  # p99 of the load tester's lateness that a point's figures should be read with
GRID_EXTENSION = 4  # rates tried past the grid's end, by its last step, while fcfs still meets there
FRONT_END_GAP_WARN = 0.02  # the gateway's own attainment above the tester's by more than this: said so


def trace_means(rows: int) -> tuple[int, int]:
    """The mean prompt and output of the trace's first ``rows`` requests as ``TRACE_REQUESTS`` sends them."""
    picked = read_trace(BUILTIN_TRACE, rows, 1.0, TRACE_LENGTH_SCALE)
    return round(statistics.fmean(p for _, p, _ in picked)), round(statistics.fmean(o for _, _, o in picked))


def slo_classes(base_ttft_ms: float, base_tpot_ms: float, real_model: bool = False) -> str:
    """``name:ttft_ms:tpot_ms`` for the six classes, as multiples of the unloaded latency (a real
    model's nearer it: ``REAL_*_MULTIPLES``)."""
    ttfts, tpots = (REAL_TTFT_MULTIPLES, REAL_TPOT_MULTIPLES) if real_model else (TTFT_MULTIPLES, TPOT_MULTIPLES)
    return ",".join(f"{t}-{p}:{base_ttft_ms * tm:.0f}:{base_tpot_ms * pm:.1f}"
                    for t, tm in ttfts.items() for p, pm in tpots.items())


def auto_grid(unloaded_ttft_ms: float) -> list[float]:
    """``--grid auto``: ``AUTO_GRID`` times the rate one prefill worker serves this load's prompts unloaded."""
    capacity = 1000 / unloaded_ttft_ms
    return [float(f"{capacity * k:.3g}") for k in AUTO_GRID]


def bench_point(address: str, rate: float, args: argparse.Namespace, slo_mix: str, out_dir: Path,
                num_prompts: int | None = None, requests: tuple[str, ...] = RANDOM, seed: int = 7,
                extra: tuple[str, ...] = ()) -> dict:
    host, port = address.rsplit(":", 1)
    n = num_prompts or max(args.min_prompts, round(rate * args.duration_s))
    if not getattr(args, "detailed", False):
        return run_load_tester(("--host", host, "--port", port), rate, n, requests, slo_mix, out_dir, seed, extra)
    result = run_load_tester(("--host", host, "--port", port), rate, n, requests, slo_mix, out_dir, seed,
                             extra=("--save-detailed", *extra))
    result.pop("itls", None)  # every token's gap: megabytes a point, and tools/front_end_gap.py needs none
    (out_dir / f"{rate:g}.json").write_text(json.dumps(result))
    return result


def point_seed(rate: float) -> int:
    """The load tester's seed for a measured point at ``rate``: one per rate (the unloaded runs use 7)."""
    return 1000 + round(rate * 100)


def point_summary(policy: str, rate: float, r: dict) -> dict:
    admitted = r["num_prompts"] - r["rejected"]
    good = round(r["slo_adherence"] * r["num_prompts"])
    return {"policy": policy, "rate": rate, "num_prompts": r["num_prompts"], "duration_s": r["duration"],
            "goodput": r["request_goodput"], "adherence": r["slo_adherence"],
            "admitted_attainment": good / admitted if admitted else 0.0, "rejected": r["rejected"],
            "failed": r["failed"], "p99_ttft_ms": r["p99_ttft_ms"], "p99_tpot_ms": r["p99_tpot_ms"],
            # the load tester's own lag (its latencies carry it): large, and the point measures the tester
            "p99_send_late_ms": r.get("p99_send_late_ms", 0.0),
            # its lag while first tokens waited to be read, and the misses that lag alone could explain
            "p99_read_lag_ms": r.get("p99_read_lag_ms", 0.0), "misses_within_read_lag": r.get("misses_within_read_lag", 0),
            "per_class": {k: {"good": v["good"], "sent": v["sent"], "rejected": v["rejected"]}
                          for k, v in r["per_class"].items()}}


def run_policy(policy: str, rates: list[float] | None, args: argparse.Namespace, workload: Workload, slo_mix: str,
               work: Path, stop_below: float | None = None) -> tuple[list[dict], str]:
    """Runs ``rates`` in order on one cluster (stopping after the first point under ``stop_below``
    adherence), after an unloaded run; returns the points and the SLO mix (scaled to that run when
    none is given). ``rates`` None: ``auto_grid`` of that run, extended."""
    spec = ClusterSpec(port=0, policy=policy, preset=args.preset, device=args.device, mps=args.mps, metrics=True)
    points = []
    progress(f"[{workload.name}] starting a {policy} cluster ...")
    with LocalCluster(spec, work / f"logs-{policy}").start(progress=True) as cluster:
        r = bench_point(cluster.address, args.base_rate or float("inf"), args, "", work / f"unloaded-{policy}",
                        num_prompts=args.base_prompts, requests=workload.requests,
                        extra=() if args.base_rate else ("--max-concurrency", "1"))
        progress(f"  unloaded ({args.base_rate or 'one at a time'} req/s): median TTFT {r['median_ttft_ms']:.1f} ms, "
                 f"median TPOT {r['median_tpot_ms']:.2f} ms")
        if not slo_mix:
            slo_mix = slo_classes(r["median_ttft_ms"], r["median_tpot_ms"], args.preset != "tiny")
            progress(f"  SLO classes (name:TTFT ms:TPOT ms): {slo_mix}")
        if rates is None:
            rates = extended_grid(auto_grid(r["median_ttft_ms"]))
            progress(f"  rates: {rates}")
        gateway = cluster.pid("gateway")
        _, idle_s, idle_wall = busiest_thread_during(gateway, lambda: time.sleep(1.0))  # heartbeats, its probe
        for rate in rates:
            met_before, missed_before, refused_before = gateway_counts(cluster)
            r, loop_s, wall = busiest_thread_during(gateway, lambda: bench_point(
                cluster.address, rate, args, slo_mix, work / policy, requests=workload.requests, seed=point_seed(rate)))
            result = point_summary(policy, rate, r)
            # the gateway's event loop's CPU for these requests (``gateway_loop_ms`` below), less its idle
            # turns over the same time
            result["gateway_loop_cpu_s"] = max(0.0, loop_s - idle_s / idle_wall * wall)
            met_after, missed_after, refused_after = gateway_counts(cluster)
            met, missed = met_after - met_before, missed_after - missed_before
            result["gateway_admitted_attainment"] = met / (met + missed) if met + missed else None
            # why the gateway refused (ttft_unattainable, decode_admission, gateway_busy, ...)
            result["refused_by_reason"] = {reason: n - refused_before.get(reason, 0.0)
                                           for reason, n in refused_after.items() if n > refused_before.get(reason, 0.0)}
            points.append(result)
            progress(f"  [{policy} @ {rate:g} req/s, {result['num_prompts']} requests] goodput "
                     f"{result['goodput']:.2f}, adherence {result['adherence']:.0%}, admitted meeting SLOs "
                     f"{result['admitted_attainment']:.1%}, rejected {result['rejected']}"
                     + "".join(f", {n:.0f} {reason}" for reason, n in sorted(result["refused_by_reason"].items())))
            _say_what_the_front_end_lost(result)
            if stop_below is not None and result["adherence"] < stop_below:
                break
    return points, slo_mix


def gateway_loop_ms(points: list[dict]) -> tuple[float, float]:
    """The gateway's event loop's milliseconds a served and a refused request, fitted over the
    points (``simulator.config.gateway_loop_from_points``): ``pdserve simulate --gateway-loop-ms``."""
    served_s, refused_s = gateway_loop_from_points(
        [(p["num_prompts"] - p["rejected"], p["rejected"], p["gateway_loop_cpu_s"]) for p in points])
    return served_s * 1000, refused_s * 1000


def _say_what_the_front_end_lost(result: dict) -> None:
    """Warnings for a point whose figures carry the front end's own delays: the gateway counting
    far more admitted requests meeting both SLOs than the load tester (the difference lost between
    them: the tester's backlog, or a wait before the gateway's handler), or the tester sending late."""
    seen = result["gateway_admitted_attainment"]
    if seen is not None and seen - result["admitted_attainment"] > FRONT_END_GAP_WARN:
        progress(f"    the gateway counted {seen:.1%} of admitted meeting both SLOs, the load tester "
                 f"{result['admitted_attainment']:.1%}: the difference is lost in the front end")
    if result["misses_within_read_lag"]:
        progress(f"    {result['misses_within_read_lag']} of the misses are within the load tester's own lag "
                 f"while they waited for their first token (p99 {result['p99_read_lag_ms']:.0f} ms)")
    if result["p99_send_late_ms"] > TESTER_LAG_WARN_MS:
        progress(f"    the load tester ran {result['p99_send_late_ms']:.0f} ms late (p99 of its sends): its "
                 "latencies carry its own backlog (pdserve bench --processes)")


def extended_grid(grid: list[float], more: int = GRID_EXTENSION) -> list[float]:
    """``grid`` and ``more`` rates past its end by its last step: tried only while fcfs still meets
    its SLOs there (``run_policy`` stops at the knee), so a device faster than the one the grid was
    made for finds its knee instead of reporting twice the grid's end (docs/decisions.md, "GPU
    checks: the rates they run at")."""
    step = grid[-1] - grid[-2] if len(grid) > 1 else grid[-1]
    return grid + [grid[-1] + step * k for k in range(1, more + 1)]


def run_workload(workload: Workload, args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"pdserve-slo-{workload.name}-"))
    progress(f"[{workload.name}] the clusters' logs and each point's results go under {work}")
    grid = None if args.grid == "auto" else extended_grid([float(r) for r in args.grid.split(",")])
    fcfs, slo_mix = run_policy("fcfs", grid, args, workload, workload.slo_mix, work / "knee", stop_below=0.9)
    grid = grid or sorted(p["rate"] for p in fcfs)
    knee = fcfs[-1]["rate"]
    knee_found = fcfs[-1]["adherence"] < 0.9
    if not knee_found:  # a fast device: "twice the knee" below is only twice the grid's last rate
        progress(f"[{workload.name}] fcfs met {fcfs[-1]['adherence']:.0%} of SLOs at the grid's last rate ({knee:g} "
                 "req/s): its knee lies beyond the grid (give --grid with higher rates)")
    rates = sorted({r for r in grid if r <= knee} | {knee * 1.5, knee * 2})
    fcfs += run_policy("fcfs", [r for r in rates if r > knee], args, workload, slo_mix, work)[0]
    scorpio = run_policy("scorpio", rates, args, workload, slo_mix, work)[0]
    points = sorted(fcfs + scorpio, key=lambda p: (p["policy"], p["rate"]))
    top = max(rates)
    f_top = next(p for p in points if p["policy"] == "fcfs" and p["rate"] == top)
    s_top = next(p for p in points if p["policy"] == "scorpio" and p["rate"] == top)
    s_knee = next(p for p in points if p["policy"] == "scorpio" and p["rate"] == knee)
    summary = {"rate": top, "goodput_ratio": s_top["goodput"] / max(f_top["goodput"], 1e-9),
               "scorpio_vs_its_knee": s_top["goodput"] / max(s_knee["goodput"], 1e-9),
               "scorpio_admitted_attainment": s_top["admitted_attainment"]}
    progress(f"[{workload.name}] at twice the knee ({top:g} req/s): scorpio goodput {summary['goodput_ratio']:.1f}x "
             f"fcfs and {summary['scorpio_vs_its_knee']:.2f}x its own at the knee, "
             f"{summary['scorpio_admitted_attainment']:.1%} of admitted requests meeting both SLOs")
    served_ms, refused_ms = gateway_loop_ms(points)
    progress(f"[{workload.name}] the gateway's event loop: {served_ms:.2f} ms of its thread a served request, "
             f"{refused_ms:.2f} ms a refused one (pdserve simulate --gateway-loop-ms {served_ms:.2f},{refused_ms:.2f})")
    return {"requests": list(workload.requests), "slo_classes": slo_mix, "knee_rate": knee, "knee_found": knee_found,
            "points": points, "at_twice_the_knee": summary,
            "gateway_loop_ms": {"served": served_ms, "refused": refused_ms}}


def plot(results: dict[str, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("goodput", "Goodput", "good requests / s"), ("adherence", "SLO adherence (good / sent)", "fraction"),
              ("admitted_attainment", "Admitted requests meeting both SLOs", "fraction"))
    fig, axes = plt.subplots(len(results), 3, figsize=(15, 4 * len(results)), squeeze=False)
    for row, (name, result) in zip(axes, results.items()):
        for ax, (key, title, ylabel) in zip(row, panels):
            for policy in ("fcfs", "scorpio"):
                ps = [p for p in result["points"] if p["policy"] == policy]
                ax.plot([p["rate"] for p in ps], [p[key] for p in ps], marker="o", label=policy)
            ax.set(title=f"{name}: {title}", xlabel="request rate (req/s)", ylabel=ylabel)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", choices=(*WORKLOADS, "all"), default=None,
                        help="repeatable (default: scaled and fixed)")
    parser.add_argument("--duration-s", type=float, default=20.0, help="seconds of arrivals per point")
    parser.add_argument("--min-prompts", type=int, default=100)
    parser.add_argument("--base-rate", type=float, default=2.0, help="the low rate the unloaded latency is taken at "
                        "(0: one request at a time)")
    parser.add_argument("--base-prompts", type=int, default=40)
    parser.add_argument("--grid", default="4,8,12,16,20,24,32,40,48,64", help="rates tried until fcfs's knee; "
                        "auto: multiples of what one prefill worker serves unloaded (a real model's few req/s)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--preset", default="tiny", help="model preset (tiny, small, 1b, smollm2-135m: the real "
                        "default model, whose classes sit nearer its unloaded latency)")
    parser.add_argument("--device", default="cpu", help="the workers' device, e.g. cuda (both share it)")
    parser.add_argument("--mps", action="store_true", help="run the workers under a CUDA MPS daemon, as `pdserve up "
                        "--mps` does (with --device cuda: two workers on one GPU without it time-slice between them)")
    parser.add_argument("--detailed", action="store_true", help="keep every request's timings and id in the load "
                        "tester's results, next to the clusters' logs (what tools/front_end_gap.py reads)")
    args = parser.parse_args()
    if args.mps and not args.device.startswith("cuda"):
        parser.error(f"--mps runs workers on a GPU under CUDA MPS; give --device cuda (not {args.device})")
    names = args.workload or ["scaled", "fixed"]
    names = list(WORKLOADS) if "all" in names else names
    ensure_model(args.preset)
    results = {name: run_workload(WORKLOADS[name], args) for name in names}
    if args.plot:
        plot(results, args.plot)
    emit({"device": device_name(args.device), "preset": args.preset, "cores": "pdserve up's plan", "worker_args": [], "mps": args.mps,
          "duration_s": args.duration_s, "workloads": results}, args.out)


if __name__ == "__main__":
    main()
