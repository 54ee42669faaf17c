"""fcfs against scorpio on one arrival sequence, through ``pdserve bench``, on a 1+1 cluster.

Six SLO classes (TTFT tight/medium/loose × TPOT tight/loose) are scaled to the latency the
cluster itself shows when nearly idle (median TTFT and TPOT of a short run at a low rate,
measured first): a class is a multiple of what this model, machine and deployment can do,
RPC hops and all, so every class is attainable when the cluster is not loaded. Rates: a
grid up to the first rate where fcfs meets fewer than 90% of SLOs (the knee), then 1.5× and
2× the knee. Each point runs ``--duration-s`` of arrivals (at least ``--min-prompts``), so an
overload is measured in its steady state, not only its first seconds.

Every cluster gets the same short unloaded run before its first point (so neither policy pays
for cold connections in its measurements). Clusters start as ``pdserve up`` starts them, with
its defaults: cores divided by its plan, each worker measuring (or loading from its cache)
its own cost models at start-up.

    python bench/slo.py [--duration-s 20] [--out bench/results/slo-cpu.json] [--plot slo.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit, progress  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

# A small prefill token budget: a forward of at most ~2 prompts, so least-slack-first order
# decides who goes next (a 4096-token forward finishes every prompt in it together).
WORKER_ARGS = ("--num-kv-blocks", "4096", "--max-batch-size", "64", "--max-num-tokens", "512")


TTFT_MULTIPLES = {"ttft_tight": 4.0, "ttft_medium": 12.0, "ttft_loose": 40.0}
TPOT_MULTIPLES = {"tpot_tight": 3.0, "tpot_loose": 10.0}


def slo_classes(base_ttft_ms: float, base_tpot_ms: float) -> str:
    """``name:ttft_ms:tpot_ms`` for the six classes, as multiples of the unloaded latency."""
    return ",".join(f"{t}-{p}:{base_ttft_ms * tm:.0f}:{base_tpot_ms * pm:.1f}"
                    for t, tm in TTFT_MULTIPLES.items() for p, pm in TPOT_MULTIPLES.items())


def unloaded_latency(address: str, args: argparse.Namespace, out_dir: Path) -> tuple[float, float]:
    """Median TTFT and TPOT (ms) of a short run at a low rate without SLOs."""
    r = bench_point(address, args.base_rate, args, "", out_dir, num_prompts=args.base_prompts)
    progress(f"unloaded ({args.base_rate:g} req/s): median TTFT {r['median_ttft_ms']:.1f} ms, "
             f"median TPOT {r['median_tpot_ms']:.2f} ms")
    return r["median_ttft_ms"], r["median_tpot_ms"]


def bench_point(address: str, rate: float, args: argparse.Namespace, slo_mix: str, out_dir: Path,
                num_prompts: int | None = None) -> dict:
    host, port = address.rsplit(":", 1)
    name = f"{rate:g}.json"
    n = num_prompts or max(args.min_prompts, round(rate * args.duration_s))
    cmd = [sys.executable, "-m", "client.bench", "--host", host, "--port", port, "--num-prompts",
           str(n), "--request-rate", str(rate), "--seed", "7", "--random-input-len",
           str(args.prompt_len), "--random-output-len", str(args.output_len), "--random-range-ratio", "0.5",
           "--ignore-eos", "--save-result", "--result-dir", str(out_dir),
           "--result-filename", name, "--percentile-metrics", "ttft,tpot"] + (["--slo-mix", slo_mix] if slo_mix else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=900)
    return json.loads((out_dir / name).read_text())


def point_summary(policy: str, rate: float, r: dict) -> dict:
    admitted = r["num_prompts"] - r["rejected"]
    good = round(r["slo_adherence"] * r["num_prompts"])
    return {"policy": policy, "rate": rate, "num_prompts": r["num_prompts"], "duration_s": r["duration"],
            "goodput": r["request_goodput"], "adherence": r["slo_adherence"],
            "admitted_attainment": good / admitted if admitted else 0.0, "rejected": r["rejected"],
            "failed": r["failed"], "p99_ttft_ms": r["p99_ttft_ms"], "p99_tpot_ms": r["p99_tpot_ms"],
            "per_class": {k: {"good": v["good"], "sent": v["sent"], "rejected": v["rejected"]}
                          for k, v in r["per_class"].items()}}


def run_policy(policy: str, rates: list[float], args: argparse.Namespace, slo_mix: str, work: Path,
               stop_below: float | None = None) -> tuple[list[dict], tuple[float, float]]:
    """Runs ``rates`` in order on one cluster (stopping after the first point under
    ``stop_below`` adherence), after its unloaded run; returns the points and that run's
    median TTFT and TPOT. With no ``slo_mix``, the classes come from that unloaded run."""
    spec = ClusterSpec(port=0, worker_args=(*WORKER_ARGS, "--device", args.device), policy=policy,
                       preset=args.preset)
    points = []
    progress(f"starting a {policy} cluster ...")
    with LocalCluster(spec, work / f"logs-{policy}").start(progress=True) as cluster:
        unloaded = unloaded_latency(cluster.address, args, work / f"unloaded-{policy}")
        if not slo_mix:
            slo_mix = slo_classes(*unloaded)
            progress(f"SLO classes (name:TTFT ms:TPOT ms): {slo_mix}")
        for rate in rates:
            result = point_summary(policy, rate, bench_point(cluster.address, rate, args, slo_mix,
                                                             work / policy))
            points.append(result)
            progress(f"[{policy} @ {rate:g} req/s, {result['num_prompts']} requests] goodput {result['goodput']:.2f}, "
                     f"adherence {result['adherence']:.0%}, admitted meeting SLOs "
                     f"{result['admitted_attainment']:.0%}, rejected {result['rejected']}")
            if stop_below is not None and result["adherence"] < stop_below:
                break
    return points, unloaded


def plot(points: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = (("goodput", "Goodput", "good requests / s"), ("adherence", "SLO adherence (good / sent)", "fraction"),
              ("admitted_attainment", "Admitted requests meeting both SLOs", "fraction"))
    for ax, (key, title, ylabel) in zip(axes, panels):
        for policy in ("fcfs", "scorpio"):
            ps = [p for p in points if p["policy"] == policy]
            ax.plot([p["rate"] for p in ps], [p[key] for p in ps], marker="o", label=policy)
        ax.set(title=title, xlabel="request rate (req/s)", ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=20.0, help="seconds of arrivals per point")
    parser.add_argument("--min-prompts", type=int, default=100)
    parser.add_argument("--prompt-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--base-rate", type=float, default=2.0, help="the low rate the unloaded latency is taken at")
    parser.add_argument("--base-prompts", type=int, default=40)
    parser.add_argument("--grid", default="4,8,12,16,20,24,32,40,48,64", help="rates tried until fcfs's knee")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--preset", default="tiny", help="embedded model preset (tiny, small, 1b)")
    parser.add_argument("--device", default="cpu", help="the workers' device, e.g. cuda (both share it)")
    args = parser.parse_args()
    ensure_model(args.preset)
    device = device_name(args.device)
    work = Path(tempfile.mkdtemp(prefix="pdserve-slo-"))
    grid = [float(r) for r in args.grid.split(",")]
    fcfs, (base_ttft, base_tpot) = run_policy("fcfs", grid, args, "", work, stop_below=0.9)
    scale = {"unloaded_ttft_ms": base_ttft, "unloaded_tpot_ms": base_tpot}
    slo_mix = slo_classes(base_ttft, base_tpot)
    knee = fcfs[-1]["rate"]
    rates = sorted({r for r in grid if r <= knee} | {knee * 1.5, knee * 2})
    fcfs += run_policy("fcfs", [r for r in rates if r > knee], args, slo_mix, work)[0]
    scorpio = run_policy("scorpio", rates, args, slo_mix, work)[0]
    points = sorted(fcfs + scorpio, key=lambda p: (p["policy"], p["rate"]))
    if args.plot:
        plot(points, args.plot)
    top = max(rates)
    f_top = next(p for p in points if p["policy"] == "fcfs" and p["rate"] == top)
    s_top = next(p for p in points if p["policy"] == "scorpio" and p["rate"] == top)
    emit({"device": device, "cores": "pdserve up's plan", "worker_args": list(WORKER_ARGS),
          "slo_classes": slo_mix, "scale": scale, "knee_rate": knee, "duration_s": args.duration_s, "points": points,
          "at_top_rate": {"rate": top, "goodput_ratio": s_top["goodput"] / max(f_top["goodput"], 1e-9),
                          "scorpio_admitted_attainment": s_top["admitted_attainment"]}}, args.out)


if __name__ == "__main__":
    main()
