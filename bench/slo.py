"""fcfs against scorpio on one arrival sequence, through ``pdserve bench``, on a 1+1 cluster.

Six SLO classes (TTFT tight/medium/loose × TPOT tight/loose) are scaled to the measured
prefill and decode step times of the model in use. Rates: a geometric grid up to the first
rate where fcfs meets fewer than 90% of SLOs, then on to twice that rate.

    python bench/slo.py [--num-prompts 200] [--out bench/results/slo-cpu.json] [--plot slo.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.common import device_name, emit, progress  # noqa: E402
from common.config import EngineConfig  # noqa: E402
from common.engine import LLMEngine  # noqa: E402
from common.model_create import ensure_model  # noqa: E402
from common.slo.profile import profile  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

WORKER_ARGS = ("--num-kv-blocks", "4096", "--max-batch-size", "64")


def slo_classes(prompt_len: int, batch: int, mean_len: int, cost_model: Path) -> tuple[str, dict[str, float]]:
    """Classes scaled to this machine: TTFT multiples of one prefill, TPOT multiples of one step.
    The fit is saved to ``cost_model`` for the workers, so they do not each profile at start-up
    at the same moment on the same cores (which skews both fits)."""
    torch.set_num_threads(1)  # as each worker runs
    models = profile(LLMEngine(EngineConfig(num_kv_blocks=2048)))
    models.save(cost_model)
    progress(f"prefill fit: {models.prefill.describe()}")
    progress(f"decode fit: {models.decode.describe()}")
    prefill_ms = models.prefill.predict(prompt_len) * 1000
    step_ms = models.decode.predict(batch, mean_len) * 1000
    ttfts = {"ttft_tight": 3 * prefill_ms, "ttft_medium": 10 * prefill_ms, "ttft_loose": 40 * prefill_ms}
    tpots = {"tpot_tight": 1.5 * step_ms, "tpot_loose": 5 * step_ms}
    spec = ",".join(f"{t}-{p}:{ttfts[t]:.0f}:{tpots[p]:.0f}" for t in ttfts for p in tpots)
    return spec, {"prefill_ms": prefill_ms, "step_ms": step_ms}


def bench_point(address: str, rate: float, args: argparse.Namespace, slo_mix: str, out_dir: Path) -> dict:
    host, port = address.rsplit(":", 1)
    name = f"{rate:g}.json"
    cmd = [sys.executable, "-m", "client.bench", "--host", host, "--port", port, "--num-prompts",
           str(args.num_prompts), "--request-rate", str(rate), "--seed", "7", "--random-input-len",
           str(args.prompt_len), "--random-output-len", str(args.output_len), "--random-range-ratio", "0.5",
           "--ignore-eos", "--slo-mix", slo_mix, "--save-result", "--result-dir", str(out_dir),
           "--result-filename", name, "--percentile-metrics", "ttft,tpot"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
    return json.loads((out_dir / name).read_text())


def point_summary(policy: str, rate: float, r: dict) -> dict:
    admitted = r["num_prompts"] - r["rejected"]
    good = round(r["slo_adherence"] * r["num_prompts"])
    return {"policy": policy, "rate": rate, "goodput": r["request_goodput"], "adherence": r["slo_adherence"],
            "admitted_attainment": good / admitted if admitted else 0.0, "rejected": r["rejected"],
            "failed": r["failed"], "p99_ttft_ms": r["p99_ttft_ms"], "p99_tpot_ms": r["p99_tpot_ms"],
            "per_class": {k: {"good": v["good"], "sent": v["sent"], "rejected": v["rejected"]}
                          for k, v in r["per_class"].items()}}


def run_policy(policy: str, rates: list[float], args: argparse.Namespace, slo_mix: str, work: Path,
               stop_below: float | None = None) -> list[dict]:
    worker_args = (*WORKER_ARGS, "--cost-model", str(work / "cost_model.json"))
    spec = ClusterSpec(port=0, worker_args=worker_args, threads_per_worker=1, policy=policy)
    points = []
    with LocalCluster(spec, work / f"logs-{policy}") as cluster:
        for rate in rates:
            result = point_summary(policy, rate, bench_point(cluster.address, rate, args, slo_mix,
                                                             work / policy))
            points.append(result)
            progress(f"[{policy} @ {rate:g} req/s] goodput {result['goodput']:.2f}, adherence "
                     f"{result['adherence']:.0%}, admitted meeting SLOs {result['admitted_attainment']:.0%}, "
                     f"rejected {result['rejected']}")
            if stop_below is not None and result["adherence"] < stop_below:
                break
    return points


def plot(points: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for policy in ("fcfs", "scorpio"):
        ps = [p for p in points if p["policy"] == policy]
        axes[0].plot([p["rate"] for p in ps], [p["goodput"] for p in ps], marker="o", label=policy)
        axes[1].plot([p["rate"] for p in ps], [p["adherence"] for p in ps], marker="o", label=policy)
    axes[0].set(title="Goodput", xlabel="request rate (req/s)", ylabel="good requests / s")
    axes[1].set(title="SLO adherence (good / sent)", xlabel="request rate (req/s)", ylabel="fraction")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-prompts", type=int, default=200)
    parser.add_argument("--prompt-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--grid", default="4,8,16,32,64")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    ensure_model("tiny")
    device = device_name()
    work = Path(tempfile.mkdtemp(prefix="pdserve-slo-"))
    slo_mix, scale = slo_classes(args.prompt_len, 16, args.prompt_len + args.output_len // 2,
                                 work / "cost_model.json")
    progress(f"SLO classes (ms): {slo_mix}")
    grid = [float(r) for r in args.grid.split(",")]
    fcfs = run_policy("fcfs", grid, args, slo_mix, work, stop_below=0.9)
    knee = fcfs[-1]["rate"]
    rates = sorted({r for r in grid if r <= knee} | {knee * 1.5, knee * 2})
    fcfs += run_policy("fcfs", [r for r in rates if r > knee], args, slo_mix, work)
    scorpio = run_policy("scorpio", rates, args, slo_mix, work)
    points = sorted(fcfs + scorpio, key=lambda p: (p["policy"], p["rate"]))
    if args.plot:
        plot(points, args.plot)
    top = max(rates)
    f_top = next(p for p in points if p["policy"] == "fcfs" and p["rate"] == top)
    s_top = next(p for p in points if p["policy"] == "scorpio" and p["rate"] == top)
    emit({"device": device, "slo_classes": slo_mix, "scale": scale, "knee_rate": knee, "points": points,
          "at_top_rate": {"rate": top, "goodput_ratio": s_top["goodput"] / max(f_top["goodput"], 1e-9),
                          "scorpio_admitted_attainment": s_top["admitted_attainment"]}}, args.out)


if __name__ == "__main__":
    main()
