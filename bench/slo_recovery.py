"""Admission that recovers: one fresh cluster driven through load → overload → overload → load,
then idle, then lone requests, with SLOs set relative to the cluster's own unloaded latency.

The cluster starts as ``pdserve up`` starts it (its defaults: the real default model, ``scorpio``,
cores by plan). First a few lone requests measure its unloaded TTFT and TPOT (medians, through the
front measured); every request after that carries one SLO class: TTFT ``--ttft-multiple`` × the
unloaded TTFT, TPOT ``--tpot-multiple`` × the unloaded TPOT (1.3: tight, a step of batching
beside one request alone; 3: loose). The load is ``--low-rate`` (default: half the rate one prefill
worker serves the prompts at unloaded, ``0.5 / TTFT``) and ``--overload`` times that, each phase
``--phase-s`` of Poisson arrivals; after the last phase the cluster idles ``--idle-s`` and then gets
``--lone`` requests one at a time, each of which must be admitted: a guard's margin may never shut
a worker out.

Per phase: requests sent, admitted (not refused), good (both SLOs met), goodput, the share of
admitted requests meeting both SLOs, the gateway's refusals by reason and its ε for the class at the
end. The summary gives goodput in the overload and back at load over the first phase's.

    python bench/slo_recovery.py [--front openai-chat|grpc] [--tpot-multiple 1.3] [--preset tiny]
                                 [--out bench/results/slo-recovery-cpu.json] [--plot slo-recovery.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.cluster_readings import guards_now  # noqa: E402
from bench.lib.common import device_name, emit, progress, run_load_tester  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from common.model.presets import DEFAULT_PRESET  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

PHASES = ("load", "overload", "overload", "load")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--front", choices=("openai-chat", "openai", "grpc"), default="openai-chat",
                        help="the API the load comes through")
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--policy", default="scorpio")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--range-ratio", type=float, default=0.25)
    parser.add_argument("--ttft-multiple", type=float, default=3.0)
    parser.add_argument("--tpot-multiple", type=float, default=1.3)
    parser.add_argument("--low-rate", type=float, default=0.0, help="req/s of the load phases (0: 0.5 / unloaded TTFT)")
    parser.add_argument("--overload", type=float, default=4.0, help="the overload phases' rate over the load's")
    parser.add_argument("--phase-s", type=float, default=100.0, help="seconds of arrivals a phase")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--lone", type=int, default=5, help="requests sent one at a time after the idle time")
    parser.add_argument("--unloaded", type=int, default=4, help="lone requests the unloaded latency is the median of")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    return parser.parse_args(argv)


def target(cluster: LocalCluster, front: str) -> tuple[str, ...]:
    if front == "grpc":
        host, port = cluster.address.rsplit(":", 1)
        return ("--host", host, "--port", port)
    return ("--backend", front, "--base-url", f"http://{cluster.http_address}")


def phase(name: str, result: dict, refused_before: dict[str, float], cluster: LocalCluster) -> dict:
    """One phase's figures from the load tester's result and the gateway's counters around it."""
    refused_now, margins = guards_now(cluster)
    sent, rejected = result["num_prompts"], result["rejected"]
    good = round(result["slo_adherence"] * sent)
    admitted = sent - rejected
    return {"phase": name, "rate": result.get("request_rate"), "sent": sent, "admitted": admitted, "good": good,
            "failed": result["failed"], "goodput": result["request_goodput"],
            "admitted_attainment": good / admitted if admitted else None,
            "p99_ttft_ms": result.get("p99_ttft_ms"), "p99_tpot_ms": result.get("p99_tpot_ms"),
            "refused_by_reason": {k: v - refused_before.get(k, 0.0) for k, v in refused_now.items()
                                  if v > refused_before.get(k, 0.0)},
            "margins": {k: round(v, 3) for k, v in margins.items() if k.startswith("tpot")}}


def run(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="pdserve-slo-recovery-"))
    progress(f"logs and load-tester results under {work}")
    lengths = ("--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
               "--random-range-ratio", str(args.range_ratio))
    spec = ClusterSpec(port=0, preset=args.preset, policy=args.policy, metrics=True,
                       http_port=None if args.front == "grpc" else 0)
    with LocalCluster(spec, work / "logs").start(progress=True) as cluster:
        to = target(cluster, args.front)
        unloaded = run_load_tester(to, float("inf"), args.unloaded, lengths, "", work / "unloaded",
                                   extra=("--max-concurrency", "1"))
        ttft_ms, tpot_ms = unloaded["median_ttft_ms"], unloaded["median_tpot_ms"]
        slo = f"slo:{ttft_ms * args.ttft_multiple:.0f}:{tpot_ms * args.tpot_multiple:.1f}"
        low = args.low_rate or 0.5 / (ttft_ms / 1000)
        progress(f"unloaded: TTFT {ttft_ms:.0f} ms, TPOT {tpot_ms:.1f} ms; SLO class {slo}; "
                 f"load {low:.3g} req/s, overload {low * args.overload:.3g} req/s")
        phases = []
        for i, name in enumerate(PHASES):
            rate = low * (args.overload if name == "overload" else 1.0)
            before, _ = guards_now(cluster)
            result = run_load_tester(to, rate, max(1, round(rate * args.phase_s)), lengths, slo, work / f"phase-{i}",
                                     seed=100 + i)
            phases.append(phase(name, result, before, cluster))
            p = phases[-1]
            met = "n/a" if p["admitted_attainment"] is None else f"{p['admitted_attainment']:.0%}"
            progress(f"  {name} @ {rate:.3g} req/s: {p['admitted']}/{p['sent']} admitted, {p['good']} good "
                     f"({p['goodput']:.3f} req/s), admitted meeting both SLOs {met}, "
                     f"refused {p['refused_by_reason']}, {p['margins']}")
        time.sleep(args.idle_s)
        before, _ = guards_now(cluster)
        lone = run_load_tester(to, float("inf"), args.lone, lengths, slo, work / "lone", seed=200,
                               extra=("--max-concurrency", "1"))
        phases.append(phase("lone", lone, before, cluster))
    first = phases[0]["goodput"] or 1e-9
    summary = {"overload_goodput_ratio": min(p["goodput"] for p in phases[1:3]) / first,
               "back_at_load_goodput_ratio": phases[3]["goodput"] / first,
               "lone_admitted": phases[4]["admitted"], "lone_sent": phases[4]["sent"],
               "least_admitted_attainment": min((p["admitted_attainment"] for p in phases
                                                 if p["admitted_attainment"] is not None), default=None)}
    progress(f"overload goodput {summary['overload_goodput_ratio']:.2f}x the first load's, back at load "
             f"{summary['back_at_load_goodput_ratio']:.2f}x; lone requests admitted "
             f"{summary['lone_admitted']}/{summary['lone_sent']}")
    return {"device": device_name(), "preset": args.preset, "front": args.front, "policy": args.policy,
            "unloaded_ttft_ms": ttft_ms, "unloaded_tpot_ms": tpot_ms, "slo_class": slo,
            "tpot_multiple": args.tpot_multiple, "ttft_multiple": args.ttft_multiple, "load_rate": low,
            "overload_rate": low * args.overload, "phase_s": args.phase_s, "phases": phases, "summary": summary}


def plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{p['phase']}\n{p['rate'] or 0:.2g}/s" for p in result["phases"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.bar(names, [p["goodput"] for p in result["phases"]])
    left.set(title=f"goodput by phase ({result['slo_class']}, {result['front']})", ylabel="good requests / s")
    right.bar(names, [p["admitted_attainment"] or 0 for p in result["phases"]])
    right.axhline(0.95, color="grey", ls="--")
    right.set(title="admitted requests meeting both SLOs", ylim=(0, 1.05))
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    args = parse_args()
    ensure_model(args.preset)
    result = run(args)
    if args.plot:
        plot(result, args.plot)
    emit(result, args.out)


if __name__ == "__main__":
    main()
