"""Use when the simulator must be checked against a host this machine is not (a GPU's): each point
of a recorded ``bench/slo.py`` run replayed in ``pdserve simulate``'s code with that host's profile.

A recorded run keeps its workload (the load tester's request flags, the SLO classes, each point's
rate, request count and seed: ``bench.slo.point_seed``) and the gateway's loop cost fitted over its
points (``gateway_loop_ms``), so its arrivals can be replayed exactly without the host. What the
record lacks is what a worker costs inside that cluster beyond its profile (RPCs, token streaming,
two workers sharing one GPU under MPS). That is taken from one point that is then not compared:
the lowest-rate ``fcfs`` point (below the knee, where queues are short): the simulated decode steps
and prefill forwards are scaled until its p99 TPOT and TTFT are the recorded ones (``calibrate``).
Every other point is compared twice: with those scales (``sim_*``) and with the bare profile
(``sim_profile_*``).

    python tools/sim_vs_recorded.py bench/results/slo-h200-1b-fixed.json \
        --cost-model simulator/profiles/h200-1b-bfloat16.json [--out F.json] [--plot F.png]

Last line: ``{"recorded", "cost_model", "workloads": {NAME: {"calibration": {"rate", "decode_scale",
"prefill_scale"}, "points": [{"rate", "policy", "real_goodput", "sim_goodput",
"real_admitted_attainment", "sim_admitted_attainment", "sim_profile_goodput",
"sim_profile_admitted_attainment", "sim_profile_within_15pct", "real_rejected", "sim_rejected", "real_p99_ttft_ms",
"sim_p99_ttft_ms", "real_p99_tpot_ms", "sim_p99_tpot_ms", "real_gateway_loop_busy" (its loop thread's CPU
over the point, where recorded), "sim_gateway_loop_busy", "goodput_within_15pct",
"attainment_within_15pct"}, ...]}}}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import emit, progress  # noqa: E402
from bench.lib.replay import planned_arrivals, simulated_point  # noqa: E402
from bench.lib.sim_vs_real_report import both_close, close_enough, plot  # noqa: E402
from bench.slo import point_seed  # noqa: E402
from client.bench.workload import PlannedRequest  # noqa: E402
from common.slo.cost_models import CostModels  # noqa: E402
from simulator.config import SimConfig  # noqa: E402
from simulator.run import simulate  # noqa: E402

MAX_SCALE = 8.0  # a worker inside the cluster at most this × its profile
BISECTIONS = 7  # the scale to within (MAX_SCALE - 1) / 2^7


@dataclass(frozen=True)
class RecordedWorkload:
    """One workload of a recorded ``bench/slo.py`` run: what its points sent and the gateway's cost."""
    name: str
    requests: tuple[str, ...]
    slo_mix: str
    gateway_loop_s: tuple[float, float]
    points: tuple[dict, ...]

    @classmethod
    def from_record(cls, name: str, record: dict, loop_ms: tuple[float, float] | None = None) -> RecordedWorkload:
        """``loop_ms``: the gateway's loop cost (served, refused) where the record has none."""
        recorded = record.get("gateway_loop_ms")
        if recorded is None and loop_ms is None:
            raise SystemExit(f"{name}: the record has no gateway_loop_ms (an older bench/slo.py); give "
                             "--gateway-loop-ms from a run on the same host")
        loop = recorded or {"served": loop_ms[0], "refused": loop_ms[1]}  # type: ignore[index]
        return cls(name, tuple(record["requests"]), record["slo_classes"],
                   (loop["served"] / 1000, loop["refused"] / 1000), tuple(record["points"]))

    def calibration_point(self) -> dict:
        """The lowest-rate ``fcfs`` point, which must be below the knee (≥ 90% of its SLOs met)."""
        fcfs = sorted((p for p in self.points if p["policy"] == "fcfs"), key=lambda p: p["rate"])
        if not fcfs or fcfs[0]["adherence"] < 0.9:
            raise SystemExit(f"{self.name}: no fcfs point below the knee to take the cluster's cost from "
                             "(run bench/slo.py with a lower first grid rate)")
        return fcfs[0]

    def compared_points(self) -> list[dict]:
        calibration = self.calibration_point()
        return [p for p in self.points if p is not calibration]


def plan_for(workload: RecordedWorkload, point: dict) -> list[PlannedRequest]:
    """The arrivals the recorded point's load tester sent: same flags, rate, count and seed."""
    return planned_arrivals(workload.requests, point["rate"], workload.slo_mix, point["num_prompts"],
                            point_seed(point["rate"]))


def sim_point(workload: RecordedWorkload, point: dict, models: CostModels, scales: tuple[float, float],
              plan: list[PlannedRequest] | None = None) -> dict:
    """The point simulated on one prefill and one decode worker, forwards at ``scales`` (prefill,
    decode) × the profile; its summary as ``bench/slo.py`` records one. ``plan``: the point's
    arrivals where the caller has them already (``plan_for``)."""
    config = SimConfig(policy=point["policy"], gateway_loop_s=workload.gateway_loop_s,
                       prefill_scale=scales[0], decode_scale=scales[1])
    run = simulate(plan if plan is not None else plan_for(workload, point), config, models)
    return {**simulated_point(run, point["policy"], point["rate"]), "gateway_loop_busy": run.gateway_loop_busy}


def calibrate(workload: RecordedWorkload, models: CostModels) -> tuple[float, float]:
    """(prefill, decode) scales at which the calibration point's simulated p99 TPOT, then p99 TTFT,
    meet the recorded ones. Each is found by bisection, not by one ratio: near a worker's capacity
    the p99 grows far faster than the scale, so a ratio overshoots into saturation. A scale only
    rises from 1 (a worker is not faster inside a cluster than its profile)."""
    point = workload.calibration_point()
    plan = plan_for(workload, point)  # the same arrivals at every scale tried

    def p99(key: str, scales: tuple[float, float]) -> float:
        return float(sim_point(workload, point, models, scales, plan)[key])

    decode = _bisect(lambda s: p99("p99_tpot_ms", (1.0, s)) - point["p99_tpot_ms"])
    prefill = _bisect(lambda s: p99("p99_ttft_ms", (s, decode)) - point["p99_ttft_ms"])
    return prefill, decode


def _bisect(excess: Callable[[float], float], low: float = 1.0, high: float = MAX_SCALE) -> float:
    """The scale in [low, high] where ``excess`` (rising with the scale) crosses zero; ``low`` if it is
    above zero there already, ``high`` if it never gets there."""
    if excess(low) >= 0:
        return low
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        low, high = (low, middle) if excess(middle) >= 0 else (middle, high)
    return (low + high) / 2


def compared(real: dict, sim: dict, bare: dict) -> dict:
    point = {"rate": real["rate"], "policy": real["policy"]}
    for key in ("goodput", "admitted_attainment", "rejected", "p99_ttft_ms", "p99_tpot_ms"):
        point[f"real_{key}"], point[f"sim_{key}"] = real[key], sim[key]
    point["sim_profile_goodput"], point["sim_profile_admitted_attainment"] = bare["goodput"], bare["admitted_attainment"]
    # the share of the point the gateway's event loop worked: real, its thread's CPU over the point
    if "gateway_loop_cpu_s" in real and real.get("duration_s"):
        point["real_gateway_loop_busy"] = real["gateway_loop_cpu_s"] / real["duration_s"]
    point["sim_gateway_loop_busy"] = sim["gateway_loop_busy"]
    point["sim_profile_within_15pct"] = both_close(bare, real)
    point["goodput_within_15pct"] = close_enough(sim, real, "goodput")
    point["attainment_within_15pct"] = close_enough(sim, real, "admitted_attainment")
    return point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recorded", type=Path, help="a bench/slo.py result JSON")
    parser.add_argument("--cost-model", type=Path, required=True, help="the recorded host's `pdserve profile`")
    parser.add_argument("--gateway-loop-ms", default=None, metavar="SERVED,REFUSED",
                        help="for a record without its gateway_loop_ms: another run's on the same host")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="PNG; one per workload, named after it")
    args = parser.parse_args()
    record = json.loads(args.recorded.read_text())
    models = CostModels.load(args.cost_model)
    loop_ms = tuple(float(v) for v in args.gateway_loop_ms.split(",")) if args.gateway_loop_ms else None
    result: dict = {"recorded": str(args.recorded), "device": record.get("device"), "cost_model": str(args.cost_model),
                    "workloads": {}}
    for name, recorded in record["workloads"].items():
        workload = RecordedWorkload.from_record(name, recorded, loop_ms)
        scales = calibrate(workload, models)
        calibration = workload.calibration_point()
        progress(f"{name}: calibrated on fcfs @ {calibration['rate']:g} req/s: prefill × {scales[0]:.2f}, "
                 f"decode × {scales[1]:.2f} the profile")
        points = []
        for real in workload.compared_points():
            plan = plan_for(workload, real)
            p = compared(real, sim_point(workload, real, models, scales, plan),
                         sim_point(workload, real, models, (1.0, 1.0), plan))
            progress(f"  {p['policy']:8s} @ {p['rate']:5g}: goodput real {p['real_goodput']:.1f} sim {p['sim_goodput']:.1f}"
                     f" (profile alone {p['sim_profile_goodput']:.1f}); admitted attainment real "
                     f"{p['real_admitted_attainment']:.1%} sim {p['sim_admitted_attainment']:.1%}; refused real "
                     f"{p['real_rejected']} sim {p['sim_rejected']}; gateway loop busy real "
                     f"{p.get('real_gateway_loop_busy', float('nan')):.0%} sim {p['sim_gateway_loop_busy']:.0%}")
            points.append(p)
        within = sum(p["goodput_within_15pct"] and p["attainment_within_15pct"] for p in points)
        bare = sum(p["sim_profile_within_15pct"] for p in points)
        progress(f"{name}: {within} of {len(points)} points within 15% on both figures ({bare} with the profile alone)")
        result["workloads"][name] = {"calibration": {"rate": calibration["rate"], "prefill_scale": scales[0],
                                                     "decode_scale": scales[1]},
                                     "points": points, "within_15pct": within, "profile_alone_within_15pct": bare}
        if args.plot:
            plot(points, args.plot.with_name(f"{args.plot.stem}-{name}{args.plot.suffix}"))
    emit(result, args.out)


if __name__ == "__main__":
    main()
