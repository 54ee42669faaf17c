"""The ``pdserve`` console script: one subcommand per process or tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pdserve import commands_engine, commands_ops, commands_serve, demo

Command = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdserve", description="Disaggregated LLM serving.")
    sub = parser.add_subparsers(dest="command", required=True)
    commands_engine.register(sub)
    commands_serve.register(sub)
    commands_ops.register(sub)
    demo.register(sub)
    _register_bench(sub)
    _register_simulate(sub)
    return parser


def _register_bench(sub: Any) -> None:
    from client.bench.cli import add_bench_args, run

    bench = sub.add_parser("bench", help="load-test a running gateway (flags as in vllm bench serve)")
    add_bench_args(bench)
    bench.set_defaults(handler=run)


def _register_simulate(sub: Any) -> None:
    from simulator.cli import add_simulate_args, main_args

    simulate = sub.add_parser("simulate", help="the cluster's own policy code on a virtual clock, cost models as "
                              "workers: pdserve bench's workloads and figures, at any scale")
    add_simulate_args(simulate)
    simulate.set_defaults(handler=main_args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Command = args.handler
    try:
        return handler(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"pdserve {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
