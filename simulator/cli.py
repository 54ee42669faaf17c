"""``pdserve simulate``: the load tester's workloads through a simulated cluster.

    pdserve simulate --prefill 8 --decode 8 --dataset-name trace --num-prompts 19366 \\
        --slo-mix a:500:30,b:2000:50 --cost-model simulator/profiles/h100-1b-bfloat16.json --policy scorpio
    pdserve simulate --plan --request-rate 12 --slo-mix ...     # the cheapest prefill/decode split

Prints the figures ``pdserve bench`` prints, under the same keys, for every rate of ``--sweep``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client.bench.cli import add_report_args, add_workload_args, parse_goodput, run
from client.bench.metrics import RequestRecord
from client.bench.workload import PlannedRequest
from common.slo.cost_models import CostModels
from simulator.config import POLICIES, SimConfig
from simulator.run import simulate
from simulator.step_noise import check_memory

DEFAULTS = SimConfig()


def add_simulate_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    add_report_args(p, default_metrics="ttft,tpot,e2el")
    cluster = p.add_argument_group("simulated cluster")
    cluster.add_argument("--prefill", type=int, default=DEFAULTS.prefill, help="prefill workers")
    cluster.add_argument("--decode", type=int, default=DEFAULTS.decode, help="decode workers")
    cluster.add_argument("--policy", choices=POLICIES, default=DEFAULTS.policy,
                         help="round_robin: fcfs admission with round-robin routing")
    cluster.add_argument("--cost-model", type=Path, default=None,
                         help="a `pdserve profile` JSON (any machine's); default: this machine's profile of the "
                              "default model, as a `pdserve up` worker measures it (cached)")
    cluster.add_argument("--max-batch-size", type=int, default=DEFAULTS.max_batch_size)
    cluster.add_argument("--max-num-tokens", type=int, default=DEFAULTS.max_num_tokens)
    cluster.add_argument("--num-kv-blocks", type=int, default=DEFAULTS.num_kv_blocks, help="per worker")
    cluster.add_argument("--max-model-len", type=int, default=DEFAULTS.max_model_len)
    cluster.add_argument("--hop-ms", type=float, default=DEFAULTS.hop_s * 1000, help="one RPC between processes")
    cluster.add_argument("--transfer-ms", type=float, default=DEFAULTS.transfer_s * 1000,
                         help="a KV copy's fixed part")
    cluster.add_argument("--transfer-us-per-token", type=float, default=DEFAULTS.transfer_s_per_token * 1e6)
    cluster.add_argument("--call-overhead-ms", type=_milliseconds, default=(),
                         help="comma-separated: what a prefill call takes at the gateway beyond its two hops and "
                              "the worker's own time, one drawn at random per call (a cluster's "
                              "pdserve:prefill_call_overhead_seconds shows it); default none")
    cluster.add_argument("--gateway-loop-ms", type=_loop_ms, default=DEFAULTS.gateway_loop_s, metavar="SERVED,REFUSED",
                         help="the gateway's event loop's time a request takes, served and refused: a call waits for "
                              "the loop before its handler runs, and one gateway serves at most 1000/SERVED req/s "
                              "(bench/slo.py fits a host's: gateway_loop_ms); "
                              "default 0,0: the gateway is never the bottleneck")
    cluster.add_argument("--step-noise", type=float, default=DEFAULTS.step_noise,
                         help="coefficient of variation of every forward's time around its cost model")
    cluster.add_argument("--decode-step-memory", type=_pair, default=DEFAULTS.decode_step_memory, metavar="W,RHO",
                         help="decode steps slow in stretches: factors k steps apart correlate w*rho^k (a decode "
                              "worker's pdserve:cost_model_ratio_autocorrelation shows it); default 0,0: independent")
    cluster.add_argument("--prefill-scale", type=float, default=DEFAULTS.prefill_scale,
                         help="forwards take this x the profile's prediction (the guards start from the profile)")
    cluster.add_argument("--decode-scale", type=float, default=DEFAULTS.decode_scale)
    cluster.add_argument("--slo-target", type=float, default=DEFAULTS.slo_target)
    cluster.add_argument("--local-prefill", choices=("on", "off"), default="on" if DEFAULTS.local_prefill else "off",
                         help="decode workers prefill what no prefill worker can in time (the gateway's flag)")
    _add_host_args(p.add_argument_group("the host's cores (with --host-cores)"))
    plan = p.add_argument_group("capacity planning")
    plan.add_argument("--plan", action="store_true", help="search prefill/decode splits for the cheapest that "
                      "keeps admitted attainment >= --slo-target and adherence >= --min-adherence at --request-rate")
    plan.add_argument("--plan-max-workers", type=int, default=16)
    plan.add_argument("--min-adherence", type=float, default=0.9)


def _add_host_args(group: argparse._ArgumentGroup) -> None:
    """Where the workers share the host's cores with the front end (``simulator.host``)."""
    group.add_argument("--host-cores", type=int, default=DEFAULTS.host_cores,
                         help="the host's cores, where the gateway and its clients share the workers' cores "
                              "(2 for `pdserve up`'s 1P1D on 2 cores); default 0: each worker has its own")
    group.add_argument("--front-end-cores", type=_rate_law, default=DEFAULTS.front_end_cores,
                         metavar="AT_1,EXPONENT",
                         help="the cores the gateway and its clients use: AT_1 · rate^EXPONENT (AT_1 at 1 req/s; "
                              "`bench/sim_vs_real.py` measures them); with --host-cores")
    for role in ("prefill", "decode"):
        group.add_argument(f"--{role}-own-cores", type=_rate_law, default=getattr(DEFAULTS, f"{role}_own_cores"),
                             metavar="AT_1,EXPONENT",
                             help=f"the cores a {role} worker's own RPC threads use beside its engine, on its own "
                                  "cores: AT_1 · rate^EXPONENT, the rate of requests handed to the worker; with "
                                  "--host-cores")
    group.add_argument("--call-overhead-growth", type=_rate_law, default=DEFAULTS.call_overhead_growth,
                       metavar="AT_1,EXPONENT",
                       help="--call-overhead-ms's draws × AT_1 · rate^EXPONENT, the rate of requests sent over the "
                            "last second (for draws measured at one load: 1 there); default none; with --host-cores")
    group.add_argument("--decode-step-ratio", type=_rate_law, default=DEFAULTS.decode_step_ratio,
                         metavar="AT_1,EXPONENT",
                         help="a decode step's time in the cluster over its time alone, measured against the load: "
                              "AT_1 · rate^EXPONENT (at least 1), the rate of requests handed to the worker; in place "
                              "of the front end's share of its cores; default none; with --host-cores")
    group.add_argument("--decode-cpu-share", type=float, default=DEFAULTS.decode_cpu_share,
                         help="the share of a decode step's time its engine computes on its core (the rest is idle "
                              "for the front end; `bench/sim_vs_real.py` measures it); with --host-cores")


def _milliseconds(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated milliseconds, got {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("call overheads must be >= 0 ms")
    return values


def _two_floats(text: str, form: str) -> tuple[float, float]:
    try:
        first, second = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {form}, got {text!r}") from None
    return first, second


def _rate_law(text: str) -> tuple[float, float]:
    at_one, exponent = _two_floats(text, "AT_1,EXPONENT")
    if min(at_one, exponent) < 0:
        raise argparse.ArgumentTypeError("a rate law's figure and exponent must be >= 0")
    return at_one, exponent


def _loop_ms(text: str) -> tuple[float, float]:
    served, refused = _two_floats(text, "SERVED,REFUSED")
    if min(served, refused) < 0:
        raise argparse.ArgumentTypeError("the gateway loop's milliseconds must be >= 0")
    return served / 1000, refused / 1000


def _pair(text: str) -> tuple[float, float]:
    memory = _two_floats(text, "W,RHO")
    try:
        check_memory(memory)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return memory


def sim_config(args: argparse.Namespace, **overrides: object) -> SimConfig:
    values = dict(prefill=args.prefill, decode=args.decode, policy=args.policy, max_batch_size=args.max_batch_size,
                  max_num_tokens=args.max_num_tokens, num_kv_blocks=args.num_kv_blocks,
                  max_model_len=args.max_model_len, hop_s=args.hop_ms / 1000, transfer_s=args.transfer_ms / 1000,
                  transfer_s_per_token=args.transfer_us_per_token / 1e6, step_noise=args.step_noise,
                  prefill_scale=args.prefill_scale, decode_scale=args.decode_scale,
                  slo_target=args.slo_target, seed=args.seed, host_cores=args.host_cores,
                  local_prefill=args.local_prefill == "on",
                  front_end_cores=args.front_end_cores, prefill_own_cores=args.prefill_own_cores,
                  decode_own_cores=args.decode_own_cores, decode_cpu_share=args.decode_cpu_share,
                  decode_step_ratio=args.decode_step_ratio, decode_step_memory=args.decode_step_memory,
                  call_overhead_s=tuple(ms / 1000 for ms in args.call_overhead_ms),
                  call_overhead_growth=args.call_overhead_growth,
                  gateway_loop_s=args.gateway_loop_ms)
    values.update(overrides)
    return SimConfig(**values)  # type: ignore[arg-type]


def cost_models(args: argparse.Namespace) -> CostModels:
    if args.cost_model is not None:
        return CostModels.load(args.cost_model)
    from simulator.profile import this_machine

    return this_machine()


def executor(models: CostModels, config: SimConfig):  # type: ignore[no-untyped-def]
    def execute(args: argparse.Namespace, plan: list[PlannedRequest], label: str) -> tuple[list[RequestRecord], float]:
        result = simulate(plan, config, models)
        _apply_goodput(result.records, parse_goodput(args.goodput))
        print(f"[{label}] {len(plan)} requests, {result.duration:.1f} simulated s in {result.wall_s:.1f} s "
              f"({config.prefill}P{config.decode}D, {config.policy}"
              + (f"; the gateway's loop busy {result.gateway_loop_busy:.0%}" if any(config.gateway_loop_s) else "")
              + ")", file=sys.stderr, flush=True)
        return result.records, result.duration

    return execute


def _apply_goodput(records: list[RequestRecord], goodput: tuple[float | None, float | None]) -> None:
    """``--goodput`` SLOs count for the requests sent without a class, as in ``pdserve bench``."""
    for r in records:
        if not r.slo_class:
            r.ttft_slo_ms, r.tpot_slo_ms = goodput


def main_args(args: argparse.Namespace) -> int:
    models = cost_models(args)
    if args.plan:
        from simulator.capacity import plan_capacity

        return plan_capacity(args, models)
    return run(args, executor(models, sim_config(args)), prefix="pdserve-simulate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdserve simulate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_simulate_args(parser)
    args = parser.parse_args(argv)
    try:
        return main_args(args)
    except ValueError as exc:
        print(f"pdserve simulate: error: {exc}", file=sys.stderr)
        return 2
