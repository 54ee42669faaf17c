"""``pdserve up`` (a whole local cluster) and ``pdserve gateway|prefill|decode`` (one process)."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.worker.cpu_plan import GATEWAY_PLACES, parse_cores
from common.model.location import ensure_model
from common.model.presets import DEFAULT_PRESET, MODEL_NAMES
from common.worker.config import KV_TRANSPORTS
from pdserve.cluster import ClusterSpec, LocalCluster
from pdserve.mps import MpsError


def register(sub: Any) -> None:
    from decode_worker.server import build_parser as decode_parser
    from gateway.server import build_parser as gateway_parser
    from prefill_worker.server import build_parser as prefill_parser

    for name, build, help_text in (("gateway", gateway_parser, "run the gateway"),
                                   ("prefill", prefill_parser, "run a prefill worker"),
                                   ("decode", decode_parser, "run a decode worker")):
        parser = sub.add_parser(name, help=help_text)
        build(parser)
        parser.set_defaults(handler=_run_process, process=name)

    up = sub.add_parser("up", help="start a local cluster (gateway + workers) and keep it running")
    defaults = ClusterSpec()
    up.add_argument("--port", type=int, default=defaults.port)
    up.add_argument("--host", default=defaults.host)
    up.add_argument("--http-port", type=int, default=None, help="also serve the OpenAI-compatible HTTP API "
                    "(/v1/chat/completions, /v1/completions, /v1/models) on this port, e.g. 8000")
    up.add_argument("--prefill", type=int, default=defaults.prefill, help="prefill workers")
    up.add_argument("--decode", type=int, default=defaults.decode, help="decode workers")
    up.add_argument("--model", default=None, help="Hugging Face checkpoint directory")
    up.add_argument("--preset", choices=tuple(MODEL_NAMES), default=DEFAULT_PRESET)
    up.add_argument("--kv-transport", choices=KV_TRANSPORTS, default=defaults.kv_transport)
    up.add_argument("--policy", choices=("fcfs", "scorpio", "ttft_guard", "tpot_guard"), default=defaults.policy)
    up.add_argument("--device", default=defaults.device, help="every worker's device, e.g. cuda or cuda:1 "
                    "(default: the engine's, cpu); workers on one GPU each size their KV pool from their "
                    "share of its memory")
    up.add_argument("--mps", action="store_true", help="run the workers under a CUDA MPS daemon started (and "
                    "stopped) with the cluster, so workers on one GPU run side by side instead of time-slicing")
    up.add_argument("--cpu-cores", default="", help="cores to divide among the processes, e.g. 0-7 (default: "
                    "all this process may use): each worker gets its own, the gateway one of its own when "
                    "there are more cores than workers")
    up.add_argument("--threads", type=int, default=defaults.threads,
                    help="torch compute threads per worker (default 0: one per core it is given)")
    up.add_argument("--gateway-nice", type=niceness, default=defaults.gateway_nice,
                    help="added to the gateway's CPU priority (nice, 0 to 19; default 0): where it shares the "
                         "workers' cores, it then runs in the gaps their forwards leave instead of in the middle "
                         "of them, and its token relay waits while they compute (measure with "
                         "tools/gateway_priority.py)")
    up.add_argument("--gateway-cores", choices=GATEWAY_PLACES, default=defaults.gateway_cores,
                    help="where the gateway runs when it gets no core of its own (fewer cores than workers + 1): "
                         "any (default: where the OS puts it) or decode (the decode workers' own cores, so prefill "
                         "forwards, and TTFTs, are not slowed by it; decode steps are instead; measure with "
                         "tools/gateway_priority.py --cores decode)")
    up.add_argument("--gateway-arg", action="append", default=[], metavar="FLAG",
                    help="extra gateway flag, repeatable: --gateway-arg=--slo-classes=tight:200:20")
    up.add_argument("--gateways", type=int, default=1,
                    help="gateways over the one worker pool (default 1): every worker registers with each, and a "
                         "client given all of them fails over between them")
    up.add_argument("--log-dir", type=Path, default=None)
    up.add_argument("--worker-arg", action="append", default=[], metavar="FLAG",
                    help="extra engine flag for every worker, repeatable: --worker-arg=--num-kv-blocks=2048")
    up.set_defaults(handler=_up)


def _run_process(args: argparse.Namespace) -> int:
    from decode_worker.server import main_from_args as decode_main
    from gateway.server import main_from_args as gateway_main
    from prefill_worker.server import main_from_args as prefill_main

    mains = {"gateway": gateway_main, "prefill": prefill_main, "decode": decode_main}
    return mains[args.process](args)


def niceness(text: str) -> int:
    """A CPU priority offset an unprivileged process may add to itself: 0 to 19."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= 19:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..19 (a lower priority than the workers', or the same)")
    return value


def _up(args: argparse.Namespace) -> int:
    if args.model is None:
        ensure_model(args.preset)
    spec = ClusterSpec(port=args.port, host=args.host, prefill=args.prefill, decode=args.decode, model=args.model,
                       preset=args.preset, kv_transport=args.kv_transport, worker_args=tuple(args.worker_arg),
                       policy=args.policy, gateway_args=tuple(args.gateway_arg),
                       cpu_cores=parse_cores(args.cpu_cores) if args.cpu_cores else (), threads=args.threads,
                       gateway_nice=args.gateway_nice,
                       gateway_cores=args.gateway_cores, device=args.device, mps=args.mps, http_port=args.http_port,
                       gateways=args.gateways)
    if spec.gateways < 1:
        print("pdserve up: error: --gateways must be at least 1", file=sys.stderr, flush=True)
        return 2
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="pdserve-up-"))
    cluster = LocalCluster(spec, log_dir)
    gateways = "gateway" if spec.gateways == 1 else f"{spec.gateways} gateways"
    print(f"starting {gateways} + {spec.prefill} prefill + {spec.decode} decode (logs in {log_dir}) ...",
          file=sys.stderr, flush=True)
    try:
        _serve_until_stopped(cluster)
    except MpsError as exc:  # starting or stopping the MPS daemon
        print(f"pdserve up: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


def _serve_until_stopped(cluster: LocalCluster) -> None:
    stopping = _stop_flag()
    try:
        cluster.start(progress=True)
        http = f", OpenAI API at http://{cluster.http_address}/v1" if cluster.http_address else ""
        at = f"gateway at {cluster.address}" if len(cluster.addresses) <= 1 else f"gateways at {','.join(cluster.addresses)}"
        print(f"pdserve is up: {at}{http}. Ctrl-C stops every process.", flush=True)
        while not stopping["now"]:
            _report_exits(cluster)
            time.sleep(0.5)
    finally:
        print("stopping ...", file=sys.stderr, flush=True)
        cluster.stop()
        print("stopped.", file=sys.stderr, flush=True)


def _stop_flag() -> dict[str, bool]:
    flag = {"now": False}

    def handle(signum: int, frame: object) -> None:
        flag["now"] = True

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return flag


def _report_exits(cluster: LocalCluster) -> None:
    for name, proc in cluster.processes.items():
        if proc.poll() is not None and not getattr(proc, "_reported", False):
            print(f"warning: {name} exited with code {proc.returncode}; see {cluster.log_dir / (name + '.log')}",
                  file=sys.stderr, flush=True)
            proc._reported = True  # type: ignore[attr-defined]
