"""One plan sent by several load-tester processes, so the tester is not what a fast server waits on.

A Python process relays a few thousand token messages a second over gRPC, several milliseconds of
CPU per request in the tester as in the gateway (``bench/front_end_cost.py``). A GPU cluster serves
far more than one tester process can relay, and every latency it records would then carry its own
backlog (docs/decisions.md, 'Load tester processes'). So the plan is dealt out, request i to process
i mod N; each process keeps the planned moments of its share, all counted from one start on the wall
clock, and hands each finished record to the parent, which reports progress and merges them in plan
order.

    processes = min(cores // 4, ceil(planned token messages per second / MESSAGES_PER_PROCESS)), at least 1
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import queue
import time
from collections.abc import Callable

from client.bench.metrics import RequestRecord
from client.bench.runner import Goodput, run_plan
from client.bench.workload import PlannedRequest

MESSAGES_PER_PROCESS = 2000  # token messages a second one tester process is given (about half of what it can relay)
START_DELAY_S = 2.0  # from the spawn to the shared start: a spawned process imports grpc and numpy first
POLL_S = 0.5


def auto_processes(plan: list[PlannedRequest], cores: int | None = None) -> int:
    """How many processes ``--processes auto`` sends ``plan`` with: one per ``MESSAGES_PER_PROCESS``
    token messages a second it plans (each output token is a message, at the worst), at most a
    quarter of the cores (the server runs beside it), at least one."""
    if len(plan) < 2:
        return 1
    span = plan[-1].send_at - plan[0].send_at
    rate = (len(plan) - 1) / span if span > 0 else math.inf
    mean_output = sum(p.output_len for p in plan) / len(plan)
    wanted = math.ceil(rate * mean_output / MESSAGES_PER_PROCESS) if rate != math.inf else len(plan)
    return max(1, min((cores or os.cpu_count() or 1) // 4, wanted))


def _send_share(address: str, share: list[PlannedRequest], start_at: float, ignore_eos: bool,
                max_concurrency: int | None, goodput: Goodput, api_key: str, out: multiprocessing.Queue) -> None:
    """A child: waits for the shared start, sends its share, puts each record and then its wall time."""
    time.sleep(max(0.0, start_at - time.time()))
    _, duration = asyncio.run(run_plan(address, share, ignore_eos, max_concurrency, goodput, out.put, api_key=api_key))
    out.put(duration)


def run_plan_in_processes(address: str, plan: list[PlannedRequest], processes: int, ignore_eos: bool,
                          max_concurrency: int | None, goodput: Goodput, on_done: Callable[[RequestRecord], None],
                          api_key: str = "") -> tuple[list[RequestRecord], float]:
    """``run_plan``'s records (in plan order) and wall time, the plan sent by ``processes`` processes.
    Raises RuntimeError when a process ends before sending its share."""
    if processes <= 1:
        return asyncio.run(run_plan(address, plan, ignore_eos, max_concurrency, goodput, on_done, api_key=api_key))
    context = multiprocessing.get_context("spawn")  # no forked copy of a gRPC runtime
    out: multiprocessing.Queue = context.Queue()
    start_at = time.time() + START_DELAY_S
    share_cap = math.ceil(max_concurrency / processes) if max_concurrency else None
    children = [context.Process(target=_send_share, args=(address, plan[i::processes], start_at, ignore_eos,
                                                          share_cap, goodput, api_key, out), daemon=True)
                for i in range(processes)]
    for child in children:
        child.start()
    records: list[RequestRecord] = []
    durations: list[float] = []
    try:
        while len(durations) < processes:
            try:
                item = out.get(timeout=POLL_S)
            except queue.Empty:
                dead = [c for c in children if c.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a load-tester process exited with status {dead[0].exitcode} before "
                                       "sending its share") from None
                continue
            if isinstance(item, RequestRecord):
                records.append(item)
                on_done(item)
            else:
                durations.append(float(item))
    finally:
        for child in children:
            child.join(timeout=5.0)
            if child.is_alive():
                child.kill()
    return sorted(records, key=lambda r: r.index), max(durations)
