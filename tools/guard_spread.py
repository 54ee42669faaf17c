"""Use when one load's outcome is in doubt: how far it moves between runs, and what the guards
did in each.

The same seeded arrivals at one rate, ``--runs`` times, each on a fresh `pdserve up`-default
cluster: goodput, admitted attainment, refusals by guard (from the gateway's log: the TTFT
guard's ``ttft_unattainable``, the decode guard's ``decode_admission``), and the margins over
the run, sampled from the metrics endpoints every 250 ms: the decode worker's ε as the gateway
steers it (``slo_guard_margin{kind="tpot_epsilon"}``), its decode calibration ratio and the
calibrated prediction / observed step (``cost_model_prediction_error_ratio``).

    python tools/guard_spread.py [--workload mixed] [--rate 48] [--runs 3] [--out f.json]

Workloads: ``vs_vllm.py``'s ``mixed`` and ``bursty``, ``slo.py``'s ``fixed`` and ``bursty``
(``slo-bursty``). Last line JSON: ``{"runs": [...], "goodput_spread": max / min, ...}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import slo, vs_vllm  # noqa: E402
from bench.lib.common import device_name, emit, progress, run_load_tester  # noqa: E402
from common.process.scrape import scrape_metrics  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

WORKLOADS: dict[str, tuple[tuple[str, ...], str]] = {
    **vs_vllm.WORKLOADS,
    "fixed": (slo.WORKLOADS["fixed"].requests, slo.WORKLOADS["fixed"].slo_mix),
    "slo-bursty": (slo.WORKLOADS["bursty"].requests, slo.WORKLOADS["bursty"].slo_mix),
}
SAMPLED = {  # series name -> (metric name, a label the sample must carry)
    "epsilon": ("pdserve:slo_guard_margin", 'kind="tpot_epsilon"'),
    "decode_calibration": ("pdserve:cost_model_calibration_ratio", 'role="decode"'),
    "decode_prediction_error": ("pdserve:cost_model_prediction_error_ratio", 'role="decode"'),
}


class Sampler:
    """Every 250 ms, the ``SAMPLED`` series from every process of a cluster, until stopped."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports
        self.series: dict[str, list[float]] = {name: [] for name in SAMPLED}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for port in self.ports.values():
                try:
                    samples = scrape_metrics(port)
                except OSError:
                    continue
                for name, (metric, label) in SAMPLED.items():
                    self.series[name] += [v for k, v in samples.items() if k.startswith(metric + "{") and label in k]


def one_run(n: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    requests, slo_mix = WORKLOADS[args.workload]
    spec = ClusterSpec(port=0, policy=args.policy, preset=args.preset, worker_args=("--device", "cpu"), metrics=True)
    logs = work / f"logs-{n}"
    with LocalCluster(spec, logs).start(progress=False) as cluster:
        host, port = cluster.address.rsplit(":", 1)
        target = ("--host", host, "--port", port)
        run_load_tester(target, 2.0, 20, requests, slo_mix, work / f"warm-{n}")
        warm_up_log = len((logs / "gateway.log").read_text())  # the refusals counted are the run's
        with Sampler(cluster.metrics_ports) as sampler:
            r = run_load_tester(target, args.rate, round(args.rate * args.duration_s), requests, slo_mix, work / f"run-{n}")
    gateway_log = (logs / "gateway.log").read_text()[warm_up_log:]
    point = slo.point_summary(args.policy, args.rate, r)
    result = {key: point[key] for key in ("goodput", "adherence", "admitted_attainment", "rejected")}
    result |= {"ttft_refusals": gateway_log.count("(ttft_unattainable)"),
               "decode_refusals": gateway_log.count("(decode_admission)")}
    for name, values in sampler.series.items():
        result[f"{name}_median"] = statistics.median(values) if values else None
        result[f"{name}_max"] = max(values) if values else None
    progress(f"  run {n + 1}/{args.runs}: goodput {result['goodput']:.2f}, admitted meeting both "
             f"{result['admitted_attainment']:.1%}, refused {result['ttft_refusals']} by the TTFT guard and "
             f"{result['decode_refusals']} by the decode guard, ε up to {result['epsilon_max'] or 0:.2f}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="mixed")
    parser.add_argument("--rate", type=float, default=48.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--policy", default="scorpio")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.runs < 1 or args.rate <= 0 or args.duration_s <= 0:
        parser.error("--runs must be >= 1, --rate and --duration-s > 0")
    work = Path(tempfile.mkdtemp(prefix="pdserve-guard-spread-"))
    progress(f"[{args.workload} @ {args.rate:g} req/s, {args.policy}] {args.runs} runs of {args.duration_s:g} s, "
             f"a fresh cluster each (logs in {work})")
    runs = [one_run(n, args, work) for n in range(args.runs)]
    goodputs = [r["goodput"] for r in runs]
    spread = max(goodputs) / max(min(goodputs), 1e-9)
    progress(f"goodput {min(goodputs):.2f} to {max(goodputs):.2f} good req/s ({spread:.2f}x between runs)")
    emit({"device": device_name(), "workload": args.workload, "rate": args.rate, "policy": args.policy,
          "duration_s": args.duration_s, "runs": runs, "goodput_spread": spread}, args.out)


if __name__ == "__main__":
    main()
