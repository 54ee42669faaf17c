"""A ``bench/slo.py`` point replayed in the simulator: the arrivals its load tester sends
(``planned_arrivals``: same flags, rate, count and seed give the same requests at the same
moments) and a simulated run summarized as ``bench/slo.py`` records a point (``simulated_point``).
Shared by ``bench/sim_vs_real.py`` and ``tools/sim_vs_recorded.py``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.slo import point_summary
from client.bench.cli import add_bench_args
from client.bench.metrics import summarize
from client.bench.plan import build_plan
from client.bench.workload import PlannedRequest
from simulator.run import SimRun


def planned_arrivals(requests: Sequence[str], rate: float, slo_mix: str, num_prompts: int,
                     seed: int) -> list[PlannedRequest]:
    """What ``pdserve bench`` with the workload flags ``requests`` sends (EOS ignored, as
    ``bench.lib.common.run_load_tester`` runs it)."""
    parser = argparse.ArgumentParser()
    add_bench_args(parser)
    argv = ["--num-prompts", str(num_prompts), "--request-rate", str(rate), "--seed", str(seed), *requests,
            "--ignore-eos"] + (["--slo-mix", slo_mix] if slo_mix else [])
    return build_plan(parser.parse_args(argv), rate)


def simulated_point(run: SimRun, policy: str, rate: float) -> dict:
    """``run``'s requests summarized as ``bench/slo.py``'s ``point_summary`` (no per-class split)."""
    result = summarize(run.records, run.duration, [99.0], ["ttft", "tpot"])
    result["per_class"] = {}
    return point_summary(policy, rate, {**result, "num_prompts": len(run.records)})
