"""The simulator against the real cluster, on this machine: the same workload, the same rates.

A 1 prefill + 1 decode cluster as ``pdserve up`` starts it (the tiny model, cores by plan, each
worker's cost profile measured at start or loaded from the cache) serves random prompts with
six SLO classes scaled to its own unloaded latency (as ``bench/slo.py``); ``pdserve simulate``
replays the very same arrival sequence with workers that load the same profile.

What a worker costs inside this cluster is more than its profile (measured on an idle engine):
RPCs, token streaming and the gateway share the two cores. The simulator is told that cost from
runs that are not compared (and nothing from the compared ones): an RPC hop (the median round
trip of the gateway's Info call, halved); what prefill calls took at the gateway beyond the
worker's own time under the calibration load (``pdserve:prefill_call_overhead_seconds``, read
back as one draw per call), grown with the load as its mean grew from the calibration load to the
heavier one (``SimConfig.call_overhead_growth``; chosen by measurement: docs/decisions.md,
"Simulator: the call overhead grows with the load"); a prefill forward: the profile's scaled by
the prefill worker's own forwards under that load (their mean ratio to its model); and the decode step: the profile's (measured at every
batch size) scaled by what a step costs inside the cluster, the decode worker's
own model of the steps it ran under that load (``pdserve:cost_model_coefficient``, times its steps'
mean ratio to it) over the profile's, at one request. Each simulated forward and step then takes
that times a factor drawn from how the calibration load's fell around their mean
(``pdserve:cost_model_observed_ratio``): forwards and steps that never vary let the simulated
guards relax their margins, where the real ones are kept up by the misses a few stalled ones cause.
That load runs small batches only, so a model refitted from it knows nothing of large ones; the
profile does, and the cluster's cost (RPCs, token streaming, the gateway on the same cores) comes
as a factor on the step. Rates: fractions of the knee (where
fcfs meets fewer than 90% of SLOs in simulation), by default half, the knee and twice it; both
policies.

Two alternatives to that truth, for finding what the simulated cluster lacks (neither is the
default): ``--decode-truth refit`` runs the simulated decode steps at the decode worker's own
model as refitted in the cluster (in-cluster steps slow with
their batch more than the profile does), and ``--prefill-spread none`` runs every simulated
forward at the calibration's mean (its spread, drawn independently per forward, collapses the
simulated ``fcfs`` near saturation where the real one is not).

    python bench/sim_vs_real.py [--duration-s 20] [--out bench/results/sim-vs-real-cpu.json] [--plot f.png]
    python bench/sim_vs_real.py --workload trace   # the Azure conversation trace, as bench/slo.py's trace
    python bench/sim_vs_real.py --repeats 3        # each point three times, seeds of its own, real and simulated

The gateway and the load tester run on the workers' two cores here (``pdserve up`` pins one worker
to each, the rest where the OS puts them), and take more of them the higher the load: a prefill
forward's wall time grows with load while its CPU time does not. The simulated host charges that
(``simulator.host``): the front end's cores, measured at the unloaded and calibration loads and at a
heavier one (``--front-end-rate``, not compared either) and fitted as a power of the rate, stretch
the forwards of the workers whose cores they take (``bench/lib/sim_host.py``). The truth above
was measured with that share in it, so the simulated workers run at it divided by the stretch the
simulated host charges at the calibration load. Each point also shows the simulation without the
host (``sim_own_cores_*``: every worker on cores of its own, the truth as measured), the host with
the decode worker's stretch measured against the load rather than taken from its core's share
(``sim_decode_measured_*``: what a decode step took in the cluster over the profile's at the
calibration and the heavier load, at each load's mean batch, fitted as a power of the rate;
``SimConfig.decode_step_ratio``), the host with the decode worker's core counted in use for only
the share of its steps its engine computes (``sim_decode_by_cpu_*``: ``SimConfig.decode_cpu_share``, the decode
engine thread's CPU at the calibration load over the time the simulated decode worker computed
there; a simulated step's time includes the waits on its own threads that leave the core to the
front end), and the host with the prefill worker's in-cluster cost as a fixed cost per forward
(``sim_per_forward_*``: the profile plus what a calibration forward took beyond it, so that a loaded
worker's batched forwards pay it once, where the compared simulation scales every forward by it),
the decode worker's the same way as a fixed cost per step (``sim_per_step_*``), and as a cost per step
and per request in it from its engine thread's CPU at the two loads (``sim_per_request_*``), and
the decode steps drawn without the memory the real ones show (``sim_steps_independent_*``), each
with whether it is within 15%, and the cores every process used while the real point ran (``real_cores_used``: gateway, each worker, load tester). The variants (``bench/lib/sim_variants.py``)
run against the same real points: a paired comparison.

Last line: ``{"points": [{"rate", "policy", "real_goodput", "sim_goodput", "real_admitted_attainment",
"sim_admitted_attainment", "real_cores_used", "sim_stretch", "real_refusals", "sim_refusals",
"real_margins", "sim_margins", and for each variant V "sim_V_goodput", "sim_V_admitted_attainment",
"sim_V_stretch", "sim_V_refusals", "sim_V_within_15pct", and with ``--repeats`` above 1, for real
and sim, "*_goodput_runs", "*_admitted_attainment_runs" (each run's) and "*_goodput_spread",
"*_admitted_attainment_spread" ((max − min) / mean)}, ...], ...}``: the refusals by the reason the
gateway counts (``ttft_unattainable``: the TTFT guard;
``decode_admission``: no decode place in time) and the guards' margins at the point's end, by kind
and SLO, show where the real and the simulated guards part.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress  # noqa: E402
from bench.lib.cluster_readings import (call_overheads, decode_load_scale, guards_now, hop_seconds,  # noqa: E402
                                    in_cluster_decode, observed_ratios, overhead_buckets, ratios_between,
                                    step_memory)
from bench.lib.process_cores import cores_used, front_end  # noqa: E402
from bench.lib.replay import planned_arrivals, simulated_point  # noqa: E402
from bench.lib.sim_host import HOST_FIGURES, decode_step_law, host_config, host_figures, overhead_growth  # noqa: E402
from bench.lib.sim_variants import alone_at, variants_beside  # noqa: E402
from bench.lib.sim_vs_real_report import compare, plot, summary_line  # noqa: E402
from bench.slo import TRACE_REQUESTS, bench_point, point_summary, slo_classes, trace_means  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402
from common.slo.cost_models import CostModels, DecodeModel  # noqa: E402
from simulator.config import SimConfig  # noqa: E402
from simulator.profile import this_machine  # noqa: E402
from simulator.run import simulate  # noqa: E402

FIRST_TOKEN_HOPS = 6  # client → gateway → decode (reserve) → gateway → prefill → gateway → client
COMPARED_SEED = 7
WARM_SEED = 8  # the warm-up's: its prompts are none of the compared runs' (those use 7, then 9, 10, ...)
GRID = (2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
TRACE_ROWS = 1000  # as many requests as a 20 s point at 50 req/s sends: the trace's rows the points replay


def requests(args: argparse.Namespace) -> tuple[str, ...]:
    if args.workload == "trace":
        return TRACE_REQUESTS
    return ("--random-input-len", str(args.prompt_len), "--random-output-len", str(args.output_len),
            "--random-range-ratio", "0.5")


def mean_context(args: argparse.Namespace) -> float:
    """A decoding request's mean context: its prompt and half its output."""
    return args.prompt_len + args.output_len / 2


def seeds(repeats: int) -> list[int]:
    """The load tester's seeds for a point run ``repeats`` times: a run's prompts are new to the
    cluster's prefix cache (the same seed again would send the same prompts, nearly all their prefill
    served from the cache), and the simulation replays each run's plan."""
    return [COMPARED_SEED] + [WARM_SEED + i for i in range(1, repeats)]


def sim_point(policy: str, rate: float, args: argparse.Namespace, slo_mix: str, config: SimConfig, models,  # type: ignore[no-untyped-def]
              truth, seed: int = COMPARED_SEED) -> dict:  # type: ignore[no-untyped-def]
    n = max(args.min_prompts, round(rate * args.duration_s))
    run = simulate(planned_arrivals(requests(args), rate, slo_mix, n, seed), config, models, truth)
    margins = {_kind_and_slo(key): m for key, m in run.margins.items()}
    return {**simulated_point(run, policy, rate), "stretch": run.stretch, "refusals": run.refusals,
            "margins": margins, "busy": run.busy}


def _kind_and_slo(margin_key: str) -> str:
    """``SimRun.margins``' "kind/worker/SLO" as the gateway's metric reads with one worker of a role."""
    kind, _, slo = margin_key.split("/")
    return f"{kind}/{slo}"


def machine_truth(models: CostModels, unloaded: dict, hop_s: float, decode: DecodeModel, forward_ratio: float,
                  overheads: tuple[float, ...], args: argparse.Namespace) -> tuple[CostModels, dict[str, float]]:
    """The cost of a worker inside this cluster, for the simulated workers to run at: prefill
    forwards at ``forward_ratio`` × the profile (the prefill worker's own mean under the
    calibration load), decode steps at ``decode``'s one-request step over the profile's (both as
    measured there, the front end's share of the workers' cores at that load included)."""
    config = SimConfig()
    copy_s = config.transfer_s + config.transfer_s_per_token * args.prompt_len
    overhead_s = statistics.median(overheads) if overheads else 0.0
    p90_s = statistics.quantiles(overheads, n=10, method="inclusive")[-1] if len(overheads) > 1 else overhead_s
    prefill_s = unloaded["median_ttft_ms"] / 1000 - FIRST_TOKEN_HOPS * hop_s - copy_s - overhead_s
    prefill_scale = forward_ratio
    mean_len = mean_context(args)
    decode_scale = decode.predict(1, mean_len) / models.decode.predict(1, mean_len)
    in_cluster = decode if args.decode_truth == "refit" else models.decode.scaled(decode_scale)
    truth = CostModels(models.prefill.scaled(prefill_scale), in_cluster)
    return truth, {"hop_s": hop_s, "prefill_scale": prefill_scale,
                   "prefill_scale_from_unloaded_ttft": prefill_s / models.prefill.predict(args.prompt_len),
                   "decode_scale": decode_scale,
                   "call_overhead_ms_p50": overhead_s * 1000,
                   "call_overhead_ms_p90": p90_s * 1000,
                   "profile_prefill_ms": models.prefill.predict(args.prompt_len) * 1000,
                   "profile_step_ms_b1": models.decode.predict(1, mean_len) * 1000,
                   "in_cluster_step_ms_b1": decode.predict(1, mean_len) * 1000,
                   "in_cluster_refit_step_ms_b16": decode.predict(16, mean_len) * 1000,
                   "simulated_step_ms_b16": truth.decode.predict(16, mean_len) * 1000}


def knee(args: argparse.Namespace, slo_mix: str, config: SimConfig, models, truth) -> float:  # type: ignore[no-untyped-def]
    for rate in GRID:
        point = sim_point("fcfs", rate, args, slo_mix, replace(config, policy="fcfs"), models,
                          truth)
        progress(f"  simulated fcfs @ {rate:g} req/s: adherence {point['adherence']:.0%}")
        if point["adherence"] < 0.9:
            return float(rate)
    return float(GRID[-1])


def run_points(cluster: LocalCluster, policy: str, rates: list[float], args: argparse.Namespace, slo_mix: str,
               work: Path) -> list[dict]:
    """Each rate run ``args.repeats`` times in a row on ``cluster``, each run with its own seed
    (``seeds``): the point compared is their mean (``repeated``), each run's figures beside it."""
    points = []
    for rate in rates:
        runs = []
        for seed in seeds(args.repeats):
            refused_before, _ = guards_now(cluster)
            result, used = cores_used(cluster, lambda: bench_point(cluster.address, rate, args, slo_mix,
                                                                    work / policy, requests=requests(args), seed=seed))
            refused, margins = guards_now(cluster)
            refusals = {reason: round(n - refused_before.get(reason, 0.0)) for reason, n in refused.items()}
            runs.append({**point_summary(policy, rate, result), "cores_used": used,
                         "refusals": {reason: n for reason, n in refusals.items() if n}, "margins": margins})
            p = runs[-1]
            progress(f"  real {policy} @ {rate:g} req/s: goodput {p['goodput']:.2f}, admitted attainment "
                     f"{p['admitted_attainment']:.1%}, rejected {p['rejected']}; cores used: "
                     + ", ".join(f"{name} {cores:.2f}" for name, cores in used.items()))
        points.append(repeated(runs))
    return points


def repeated(runs: list[dict]) -> dict:
    """One point from runs of it (real, or simulated): goodput, admitted attainment, rejections and
    refusals by reason their means, each run's goodput and attainment listed (``*_runs``), and their
    spread ((max - min) / mean: how far two measurements of the same point part); the rest the last
    run's."""
    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in runs)

    def spread(key: str) -> float:
        values = [r[key] for r in runs]
        return (max(values) - min(values)) / mean(key) if mean(key) else 0.0

    reasons = {reason for r in runs for reason in r["refusals"]}
    return {**runs[-1], "goodput": mean("goodput"), "admitted_attainment": mean("admitted_attainment"),
            "rejected": mean("rejected"),
            "refusals": {reason: statistics.fmean(r["refusals"].get(reason, 0) for r in runs) for reason in reasons},
            "goodput_runs": [r["goodput"] for r in runs], "goodput_spread": spread("goodput"),
            "admitted_attainment_runs": [r["admitted_attainment"] for r in runs],
            "admitted_attainment_spread": spread("admitted_attainment")}


def calibrate(cluster: LocalCluster, models: CostModels, unloaded: dict, hop_s: float, args: argparse.Namespace,
              work: Path, unloaded_used: dict[str, float]
              ) -> tuple[CostModels, dict[str, float], SimConfig, CostModels, dict[str, tuple[SimConfig, CostModels]]]:
    """Runs the calibration load (not compared) and reads back what the simulated cluster takes
    from it: the workers' truth, the figures shown, the config the compared simulation runs (hop,
    call overheads, factors, the host's cores, the front end's use of them and the decode step's
    stretch against the load) and the truth it runs at, and the variants simulated beside it
    (``VARIANTS``), each a config and a truth."""
    before = overhead_buckets(cluster)
    ratios_before = {role: observed_ratios(cluster, role) for role in ("prefill", "decode")}
    calibration_run, used = cores_used(cluster, lambda: bench_point(
        cluster.address, args.calibration_rate, args, "", work / "calibration",
        num_prompts=round(args.calibration_rate * args.calibration_s), requests=requests(args)))
    overheads = call_overheads(before, overhead_buckets(cluster), hop_s)
    forward_ratio, forward_factors = ratios_between(ratios_before["prefill"], observed_ratios(cluster, "prefill"))
    step_ratio, step_factors = ratios_between(ratios_before["decode"], observed_ratios(cluster, "decode"))
    truth, machine = machine_truth(models, unloaded, hop_s, in_cluster_decode(cluster, step_ratio), forward_ratio,
                                   overheads, args)
    machine["prefill_forward_factor_p99"], machine["decode_step_factor_p99"] = (
        sorted(f)[int(0.99 * (len(f) - 1))] if f else 1.0 for f in (forward_factors, step_factors))
    progress(f"unloaded TTFT {unloaded['median_ttft_ms']:.1f} ms, TPOT {unloaded['median_tpot_ms']:.2f} ms; "
             + ", ".join(f"{k} {v:.4g}" for k, v in machine.items()))
    own_cores = SimConfig(hop_s=hop_s, call_overhead_s=overheads, decode_step_factors=step_factors,
                          prefill_forward_factors=forward_factors if args.prefill_spread == "drawn" else ())
    decode_scales = [(args.calibration_rate, decode_load_scale(cluster, models, step_ratio, step_factors,
                                                               calibration_run["total_output_tokens"],
                                                               mean_context(args)))]
    engine_steps = [engine_step(calibration_run, used, len(step_factors))]
    before_heavier = overhead_buckets(cluster)
    heavier, heavier_decode_scale, heavier_step = heavier_load(cluster, models, args, work)
    engine_steps.append(heavier_step)
    heavier_overheads = call_overheads(before_heavier, overhead_buckets(cluster), hop_s)
    own_cores = replace(own_cores, decode_step_memory=step_memory(cluster))  # the heavier load's last steps
    decode_scales.append((args.front_end_rate, heavier_decode_scale))
    loads = (args.base_rate, unloaded_used), (args.calibration_rate, used), (args.front_end_rate, heavier)
    growth = overhead_growth((args.calibration_rate, overheads), (args.front_end_rate, heavier_overheads))
    machine.update({"call_overhead_ms_mean_calibration": statistics.fmean(overheads) * 1000 if overheads else 0.0,
                    "call_overhead_ms_mean_heavier": (statistics.fmean(heavier_overheads) * 1000
                                                      if heavier_overheads else 0.0),
                    "call_overhead_growth_exponent": growth.exponent})
    shared = replace(host_config(own_cores, loads), call_overhead_growth=(growth.at_one, growth.exponent))
    measured = replace(shared, decode_step_ratio=decode_step_law(decode_scales))
    # the truth was measured with the front end on the workers' cores: the simulated host charges
    # that itself, so the truth it runs is what the calibration load's stretch leaves
    def at_calibration(config: SimConfig) -> dict:
        return sim_point("scorpio", args.calibration_rate, argparse.Namespace(
            **{**vars(args), "duration_s": args.calibration_s}), "", config, models, truth)

    calibration = at_calibration(shared)
    stretch = calibration["stretch"]
    variants, figures = variants_beside(models, truth, own_cores, shared, measured, stretch, forward_ratio,
                                        args.prompt_len, mean_context(args),
                                        used["decode-0/engine"], calibration["busy"].get("decode", 0.0),
                                        lambda config: at_calibration(config)["stretch"], engine_steps)
    machine.update(figures)
    machine.update(host_figures(measured, loads, decode_scales, stretch))
    progress("the host: " + ", ".join(f"{k} {v:.3g}" for k, v in machine.items() if k.startswith(HOST_FIGURES)))
    return truth, machine, shared, alone_at(truth, stretch), variants


def engine_step(run: dict, used: dict[str, float], steps: int) -> tuple[float, float]:
    """A load's mean decode batch and the decode engine thread's CPU seconds a step there."""
    if not steps:
        return 0.0, 0.0
    return run["total_output_tokens"] / steps, used["decode-0/engine"] * run["duration"] / steps


def heavier_load(cluster: LocalCluster, models: CostModels, args: argparse.Namespace, work: Path
                 ) -> tuple[dict[str, float], float, tuple[float, float]]:
    """A second, heavier load (not compared): the cores each process used, its
    ``decode_load_scale`` and its ``engine_step``."""
    ratios_before = observed_ratios(cluster, "decode")
    run, used = cores_used(cluster, lambda: bench_point(
        cluster.address, args.front_end_rate, args, "", work / "front-end",
        num_prompts=round(args.front_end_rate * args.calibration_s / 2), requests=requests(args)))
    ratio, factors = ratios_between(ratios_before, observed_ratios(cluster, "decode"))
    return (used, decode_load_scale(cluster, models, ratio, factors, run["total_output_tokens"], mean_context(args)),
            engine_step(run, used, len(factors)))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--min-prompts", type=int, default=100)
    parser.add_argument("--workload", choices=("random", "trace"), default="random",
                        help="random prompts of --prompt-len and outputs of --output-len (± 50%%), or the Azure "
                             "conversation trace as bench/slo.py's trace workload sends it")
    parser.add_argument("--prompt-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--base-rate", type=float, default=2.0)
    parser.add_argument("--base-prompts", type=int, default=40)
    parser.add_argument("--calibration-rate", type=float, default=6.0)
    parser.add_argument("--calibration-s", type=float, default=30.0)
    parser.add_argument("--front-end-rate", type=float, default=18.0,
                        help="a second, heavier load (not compared, --calibration-s/2 long) to fit the front end's "
                             "cores and the decode step's stretch by: through it and the lighter loads")
    parser.add_argument("--decode-truth", choices=("profile", "refit"), default="profile",
                        help="simulated decode steps: the profile scaled by the in-cluster cost of a one-request step, "
                             "or the decode worker's own model refitted in the cluster")
    parser.add_argument("--prefill-spread", choices=("drawn", "none"), default="drawn",
                        help="simulated prefill forwards: each drawn from the calibration's spread, or all at its mean")
    parser.add_argument("--fractions", default="0.5,1,2", help="rates as fractions of the knee")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each point in a row, each with its own seed (its own prompts, arrivals and "
                             "classes), real and simulated: their means are compared, and the spread of each shows "
                             "how far one run of the point parts from another")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    if args.workload == "trace":
        args.prompt_len, args.output_len = trace_means(TRACE_ROWS)
    return args


def main() -> None:
    args = parse_args()
    ensure_model("tiny")
    work = Path(tempfile.mkdtemp(prefix="pdserve-sim-vs-real-"))
    models = this_machine("tiny")
    real: list[dict] = []
    progress("starting a scorpio cluster (pdserve up's defaults) ...")
    with LocalCluster(ClusterSpec(port=0, preset="tiny", policy="scorpio", metrics=True), work / "logs-scorpio").start(
            progress=True) as cluster:
        hop_s = hop_seconds(cluster.address)
        # other prompts than the unloaded run's: those must not be in the prefix cache
        bench_point(cluster.address, args.base_rate, args, "", work / "warm", num_prompts=args.base_prompts,
                    requests=requests(args), seed=WARM_SEED)
        unloaded, used = cores_used(cluster, lambda: bench_point(
            cluster.address, args.base_rate, args, "", work / "unloaded", num_prompts=args.base_prompts,
            requests=requests(args)))
        slo_mix = slo_classes(unloaded["median_ttft_ms"], unloaded["median_tpot_ms"])
        truth, machine, config, alone, variants = calibrate(cluster, models, unloaded, hop_s, args, work, used)
        the_knee = knee(args, slo_mix, config, models, alone)
        rates = [round(the_knee * float(f), 2) for f in args.fractions.split(",")]
        progress(f"knee (simulated fcfs): {the_knee:g} req/s; rates {rates}")
        real += run_points(cluster, "scorpio", rates, args, slo_mix, work)
    progress("starting an fcfs cluster ...")
    with LocalCluster(ClusterSpec(port=0, preset="tiny", policy="fcfs"), work / "logs-fcfs").start(progress=True) as cluster:
        bench_point(cluster.address, args.base_rate, args, "", work / "warm-fcfs", num_prompts=args.base_prompts,
                    requests=requests(args), seed=WARM_SEED)
        real += run_points(cluster, "fcfs", rates, args, slo_mix, work)

    def simulated_at(config: SimConfig, truth: CostModels) -> list[dict]:  # each real point's runs, simulated
        return [repeated([sim_point(policy, rate, args, slo_mix, replace(config, policy=policy), models, truth, seed)
                          for seed in seeds(args.repeats)]) for policy in ("scorpio", "fcfs") for rate in rates]

    simulated = simulated_at(config, alone)
    beside = {name: simulated_at(variant, variant_truth) for name, (variant, variant_truth) in variants.items()}
    points = compare(real, simulated, beside)
    for p in points:
        progress(summary_line(p))
    if args.plot:
        plot(points, args.plot)
    emit({"device": device_name(), "requests": list(requests(args)), "slo_classes": slo_mix, "unloaded": {k: unloaded[k] for k in (
        "median_ttft_ms", "median_tpot_ms")}, "machine": machine, "knee_rate": the_knee, "points": points,
          "all_within_15pct": all(p["goodput_within_15pct"] and p["attainment_within_15pct"] for p in points)},
         args.out)


if __name__ == "__main__":
    main()
