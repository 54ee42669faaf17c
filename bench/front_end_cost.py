"""CPU the front end spends per request: the gateway's, and the load tester's, for each policy.

    python bench/front_end_cost.py [--rate 32] [--num-prompts 320] [--policy fcfs --policy scorpio] [--out FILE]
                                   [--device cuda --mps --preset 1b] [--stream-interval 0,25 --rounds 2] [--grpc-floor]

Both are single Python processes relaying every output token as a gRPC message, so their CPU per
request sets the request rate each can carry on one core (``one_core_req_s``): where a GPU serves
more than that, the gateway is what the cluster waits on, and a load tester with one process
records its own backlog as latency (``pdserve bench --processes``). A tiny-model cluster as
`pdserve up` starts it, the `fixed` SLO classes of ``bench/slo.py`` at its ``fcfs`` knee on 2
cores: CPU seconds of each process over the run (``/proc``), divided by the requests and by the
tokens. Per request it falls as the load rises (a wake-up of the loop serves more messages), so
figures compare only at one rate. The gateway's event loop's thread is counted apart
(``gateway_loop_cpu_ms_per_request``): gRPC's own threads spread over a large host's other cores
and its loop's thread cannot, so ``gateway_loop_ceiling_req_s`` is a rate no host lifts that
gateway past. Prints JSON.

``--slo-mix late:0.01:50`` (a TTFT no request can meet) makes every request a refusal: the figures
are then what the gateway spends refusing one (``scorpio``; ``fcfs`` refuses nothing).

``--grpc-floor`` runs, after each point, the same traffic (rate, requests, the token messages a
request got and their spacing) through a stand-in gateway that only makes the real one's gRPC
calls and reads a decode stream of a step every mean TPOT (``bench/lib/grpc_floor.py``): its loop's CPU a request is the part of the real one's that gRPC
and the event loop cost, whatever pdserve's own code does (``loop_cpu_over_grpc_floor``).

``--stream-interval`` compares gateway settings of ``--stream-interval-ms`` (``gateway.stream_interval``:
how far apart a stream's token messages may be held), each on fresh clusters taking turns
``--rounds`` times: besides the CPU, each point has the tokens a client message carried, the
inter-token latency as the client saw it (p50, p99) and the mean TPOT, so what holding saves is
shown beside what it changes for the client. ``default`` (the default) passes no setting: what
``pdserve up`` runs (on a host where the gateway shares the workers' cores, 25 ms; else ``auto``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import device_name, emit, progress, run_load_tester  # noqa: E402
from bench.lib.grpc_floor import loop_cpu_ms_per_request  # noqa: E402
from bench.lib.process_cores import cores_used  # noqa: E402
from bench.slo import RANDOM, WORKLOADS  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402

# what the load tester records besides TTFT and TPOT: inter-token latencies, and each request's
# (for the tokens a message carried)
CLIENT_FIGURES = ("--percentile-metrics", "ttft,tpot,itl", "--save-detailed")


def measure(policy: str, rate: float, num_prompts: int, preset: str, device: str = "cpu",
            mps: bool = False, stream_interval: str = "default",
            slo_mix: str = WORKLOADS["fixed"].slo_mix, grpc_floor: bool = False) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="pdserve-front-end-"))
    progress(f"{policy}, --stream-interval-ms {stream_interval}: starting a cluster ...")
    spec = ClusterSpec(port=0, policy=policy, preset=preset, device=device, mps=mps,
                       gateway_args=() if stream_interval == "default" else ("--stream-interval-ms", stream_interval))
    with LocalCluster(spec, work / "logs").start() as cluster:
        host, port = cluster.address.rsplit(":", 1)
        target = ("--host", host, "--port", port)
        run_load_tester(target, 2, 20, RANDOM, "", work / "warm", 7)
        started = time.perf_counter()
        r, cores = cores_used(cluster, lambda: run_load_tester(target, rate, num_prompts, RANDOM,
                                                               slo_mix, work / "load", 11,
                                                               extra=CLIENT_FIGURES))
        wall = time.perf_counter() - started
        gateway_s, tester_s, loop_s = cores["gateway"] * wall, cores["load_tester"] * wall, cores["gateway/loop"] * wall
    tokens = r["total_output_tokens"]
    messages = sum(len(itls) + 1 for itls in r["itls"] if itls is not None)
    point = {"policy": policy, "stream_interval_ms": stream_interval, "rate": rate, "num_prompts": num_prompts,
             "output_tokens": tokens, "tokens_per_message": tokens / max(messages, 1),
             "p50_itl_ms": r["median_itl_ms"], "p99_itl_ms": r["p99_itl_ms"], "mean_tpot_ms": r["mean_tpot_ms"],
             "goodput": r["request_goodput"],
             "adherence": r["slo_adherence"], "rejected": r["rejected"], "wall_s": wall,
             "gateway_cpu_ms_per_request": 1000 * gateway_s / num_prompts,
             "gateway_cpu_us_per_token": 1e6 * gateway_s / tokens if tokens else None,  # None: all refused
             # of it, its event loop's thread's: one thread, so one core at most, however many the host has
             "gateway_loop_cpu_ms_per_request": 1000 * loop_s / num_prompts,
             "load_tester_cpu_ms_per_request": 1000 * tester_s / num_prompts,
             "load_tester_cpu_us_per_token": 1e6 * tester_s / tokens if tokens else None}
    point["gateway_one_core_req_s"] = 1000 / max(point["gateway_cpu_ms_per_request"], 1e-9)
    point["gateway_loop_ceiling_req_s"] = 1000 / max(point["gateway_loop_cpu_ms_per_request"], 1e-9)
    point["load_tester_one_core_req_s"] = 1000 / max(point["load_tester_cpu_ms_per_request"], 1e-9)
    progress(f"  {point['tokens_per_message']:.2f} tokens a message, ITL p50 {point['p50_itl_ms']:.1f} / p99 "
             f"{point['p99_itl_ms']:.1f} ms, mean TPOT {point['mean_tpot_ms']:.2f} ms, SLO adherence {point['adherence']:.1%}")
    per_token = (f"{point['gateway_cpu_us_per_token']:.0f} us a token; " if tokens else "no token served; ")
    progress(f"  gateway {point['gateway_cpu_ms_per_request']:.2f} ms CPU a request ({per_token}its event loop's "
             f"thread {point['gateway_loop_cpu_ms_per_request']:.2f} ms, a ceiling of "
             f"{point['gateway_loop_ceiling_req_s']:.0f} req/s on any host), load tester "
             f"{point['load_tester_cpu_ms_per_request']:.2f} ms; one core carries "
             f"{point['gateway_one_core_req_s']:.0f} / {point['load_tester_one_core_req_s']:.0f} req/s")
    if grpc_floor and tokens:
        served = sum(1 for itls in r["itls"] if itls is not None)
        per_request = max(1, round(messages / max(served, 1)))
        progress(f"  the gRPC floor: a stand-in gateway with the same calls and {per_request} messages a request ...")
        floor = loop_cpu_ms_per_request(rate, num_prompts, per_request, point["p50_itl_ms"] / 1000,
                                        point["mean_tpot_ms"] / 1000)
        point["grpc_floor_messages_per_request"] = per_request
        point["grpc_floor_loop_cpu_ms_per_request"] = floor
        point["loop_cpu_over_grpc_floor"] = point["gateway_loop_cpu_ms_per_request"] / floor
        progress(f"  its event loop {floor:.2f} ms a request: the gateway's is {point['loop_cpu_over_grpc_floor']:.1f}x that")
    return point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=32.0, help="req/s (32: the fcfs knee of `fixed` on 2 cores)")
    parser.add_argument("--num-prompts", type=int, default=320)
    parser.add_argument("--policy", action="append", choices=("fcfs", "scorpio"), default=None)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="cpu", help="the workers' device, e.g. cuda (both share it)")
    parser.add_argument("--mps", action="store_true", help="the workers under CUDA MPS, as `pdserve up --mps`")
    parser.add_argument("--stream-interval", default="default",
                        help="the gateway's --stream-interval-ms settings to compare, comma-separated (default: "
                             "none given, as pdserve up starts it)")
    parser.add_argument("--slo-mix", default=WORKLOADS["fixed"].slo_mix,
                        help="the load tester's SLO classes (default: bench/slo.py's fixed ones); one no request can "
                             "meet, e.g. late:0.01:50, makes every request a refusal and measures what one costs")
    parser.add_argument("--grpc-floor", action="store_true",
                        help="after each point, the same traffic through a stand-in gateway that makes only its gRPC "
                             "calls (bench/lib/grpc_floor.py): how much of the loop's CPU is gRPC's and the event loop's")
    parser.add_argument("--rounds", type=int, default=1, help="times each setting runs, taking turns")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ensure_model(args.preset)
    points = [measure(p, args.rate, args.num_prompts, args.preset, args.device, args.mps, interval, args.slo_mix,
                      args.grpc_floor)
              for _ in range(args.rounds) for interval in args.stream_interval.split(",")
              for p in args.policy or ["fcfs", "scorpio"]]
    emit({"device": device_name(args.device), "preset": args.preset, "cores": os.cpu_count(),
          "load_tester": "pdserve bench --processes auto (one process below 8 cores)",
          "points": points}, args.out)


if __name__ == "__main__":
    main()
