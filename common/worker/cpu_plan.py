"""Which CPU cores and how many compute threads each local process gets.

Two workers left at the library's default thread count each start one compute thread per
core, so on a host with ``n`` cores they run ``2n`` threads that take turns: a decode step
then takes many times its unloaded time, and any cost model measured at that moment is
wrong. The plan divides the cores instead:

    cores 0 .. n-1                     (this process's affinity, or --cpu-cores)
    ┌─────────┬──────────────┬──────────────┐
    │ gateway │  prefill-0   │   decode-0   │   n > workers: the gateway gets a core of
    └─────────┴──────────────┴──────────────┘   its own, the rest are split in runs
    ┌──────────────┬──────────────┐
    │  prefill-0   │   decode-0   │             n == workers: one core each; the gateway
    └──────────────┴──────────────┘             (no compute threads) runs where the OS puts it

A gateway sharing the workers' cores at their priority takes its turn in the middle of their
forwards, whose wall time then grows well past their CPU time. ``CoreAssignment.nice``
(``pdserve up --gateway-nice``) lowers its priority so it runs in the gaps the engines leave
instead; the plan leaves it at theirs: niced, the gateway's token relay waits when both cores
compute, and tight TPOT classes miss (chosen by measurement: docs/decisions.md, 'CPU plan: the
gateway's priority and cores').
``gateway_cores="decode"`` (``pdserve up --gateway-cores decode``) pins it, where it has no core of
its own, to the cores of decode workers that no prefill worker uses: a prefill forward's wall
time then adds nothing of the gateway's to a TTFT, and the gateway's time lands on decode steps
instead. It trades one SLO for the other (docs/decisions.md, 'CPU plan: the gateway's
priority and cores'), so it is not the plan.

A worker that computes on a GPU needs few host cores: one thread launches its kernels (CUDA
graphs) and a few more wait on RPCs and transfers. Given an equal share of a GPU host's cores,
two such workers would leave the gateway one core, and the gateway is the busiest process on that
host (an event loop and gRPC's threads relaying every token). (Chosen by measurement:
docs/decisions.md, 'CPU plan: GPU workers get two cores'.)
So where the host has room, each worker ``on_device`` gets ``DEVICE_WORKER_CORES`` cores and the
gateway every core no worker is given:

    ┌──────────────────────────────┬───────────┬──────────┐
    │ gateway (and a load tester)  │ prefill-0 │ decode-0 │   both workers on the GPU
    └──────────────────────────────┴───────────┴──────────┘

Invariant: with at least as many cores as workers, no two workers share a core and the
threads of all workers add up to at most the cores planned. With fewer cores than workers,
each worker gets one thread on a core taken round robin (the least oversubscription there is).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CoreAssignment:
    name: str  # "gateway", "prefill-0", "decode-1", ...
    cores: tuple[int, ...]  # empty: not pinned (the OS places it)
    threads: int  # torch compute threads; 0 for a process without any (the gateway)
    nice: int = 0  # added to the process's CPU priority (os.nice) as it starts

    def describe(self) -> str:
        where = f"cores {format_cores(self.cores)}" if self.cores else "any core"
        return (f"{self.name}: {where}" + (f", {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else "")
                + (f", nice {self.nice}" if self.nice else ""))


GATEWAY_PLACES = ("any", "decode")  # where a gateway without a core of its own runs
DEVICE_WORKER_CORES = 2  # host cores of a worker computing on a GPU: its kernel-launching thread and one more


def gateway_shares_cores(plan: Collection[CoreAssignment]) -> bool:
    """Whether the plan leaves the gateway no core of its own: unpinned, or on a worker's cores
    (or beside an unpinned worker), so every CPU second it spends is a worker's."""
    gateway = next(a for a in plan if a.name == "gateway")
    workers = [a for a in plan if a.name != "gateway"]
    return not gateway.cores or any(not w.cores or set(w.cores) & set(gateway.cores) for w in workers)


def plan_cores(workers: list[str], cores: tuple[int, ...] | None = None,
               threads: int | None = None, gateway_nice: int = 0, gateway_cores: str = "any",
               on_device: Collection[str] = ()) -> list[CoreAssignment]:
    """Assignments for the gateway and ``workers`` (names, in order; a decode worker's starts with
    ``decode``) on ``cores`` (default: the cores this process may run on). ``threads`` overrides
    each worker's thread count; ``gateway_nice`` lowers the gateway's CPU priority;
    ``gateway_cores`` (``GATEWAY_PLACES``) places a gateway that gets no core of its own;
    ``on_device`` names the workers that compute on a GPU."""
    if gateway_cores not in GATEWAY_PLACES:
        raise ValueError(f"gateway cores: {gateway_cores!r} is not one of {', '.join(GATEWAY_PLACES)}")
    available = tuple(sorted(set(cores))) if cores else available_cores()
    if not workers:
        return [CoreAssignment("gateway", (), 0, gateway_nice)]
    on_gpu = set(on_device)
    device = [name for name in workers if name in on_gpu]
    on_cpu = [name for name in workers if name not in on_gpu]
    if device and len(available) >= DEVICE_WORKER_CORES * len(device) + len(on_cpu) + 1:
        return _plan_with_device_workers(workers, device, on_cpu, available, threads, gateway_nice)
    spare = len(available) > len(workers)
    pool = available[1:] if spare else available
    runs = _split(pool, len(workers))
    if spare:
        placed = available[:1]
    elif gateway_cores == "decode":
        placed = _decode_only_cores(workers, runs)
    else:
        placed = ()
    gateway = CoreAssignment("gateway", placed, 0, gateway_nice)
    return [gateway] + [CoreAssignment(name, run, threads or len(run)) for name, run in zip(workers, runs)]


def _plan_with_device_workers(workers: list[str], device: list[str], on_cpu: list[str], available: tuple[int, ...],
                              threads: int | None, gateway_nice: int) -> list[CoreAssignment]:
    """GPU workers take ``DEVICE_WORKER_CORES`` each from the top; CPU workers split what is left
    after one gateway core as they would alone; without CPU workers the gateway takes the rest."""
    top = len(available) - DEVICE_WORKER_CORES * len(device)
    runs = dict(zip(device, _split(available[top:], len(device))))
    rest = available[:top]
    if on_cpu:
        runs.update(zip(on_cpu, _split(rest[1:], len(on_cpu))))
        rest = rest[:1]
    gateway = CoreAssignment("gateway", rest, 0, gateway_nice)
    return [gateway] + [CoreAssignment(name, runs[name], threads or len(runs[name])) for name in workers]


def _decode_only_cores(workers: list[str], runs: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The cores of decode workers that no other worker uses; empty (anywhere) when there are none."""
    decode = {c for name, run in zip(workers, runs) if name.startswith("decode") for c in run}
    others = {c for name, run in zip(workers, runs) if not name.startswith("decode") for c in run}
    return tuple(sorted(decode - others))


def _split(cores: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """``parts`` contiguous runs as even as can be; round robin single cores when too few."""
    if len(cores) < parts:
        return [(cores[i % len(cores)],) for i in range(parts)]
    size, extra = divmod(len(cores), parts)
    runs, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        runs.append(cores[start:end])
        start = end
    return runs


def available_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def parse_cores(text: str) -> tuple[int, ...]:
    """``"0-3,6"`` → (0, 1, 2, 3, 6); raises ValueError naming what is wrong."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"cpu cores: {part!r} is not a core number or a range like 0-3") from None
        if first < 0 or last < first:
            raise ValueError(f"cpu cores: {part!r} is not a valid range")
        cores.update(range(first, last + 1))
    if not cores:
        raise ValueError("cpu cores: empty list")
    return tuple(sorted(cores))


def format_cores(cores: tuple[int, ...]) -> str:
    """The inverse of ``parse_cores``: (0, 1, 2, 5) → "0-2,5"."""
    parts, ordered = [], sorted(cores)
    start = prev = ordered[0]
    for core in [*ordered[1:], None]:
        if core is not None and core == prev + 1:
            prev = core
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if core is not None:
            start = prev = core
    return ",".join(parts)


def apply_to_this_process(cores: tuple[int, ...], threads: int) -> None:
    """Pins this process (and the threads it starts from now on) and sizes torch's pools.
    Call before the first torch computation: the OpenMP pool is sized when first used."""
    if cores:
        unknown = set(cores) - set(range(os.cpu_count() or 1))
        if unknown:
            raise ValueError(f"cpu cores {format_cores(tuple(sorted(unknown)))} do not exist on this host")
        os.sched_setaffinity(0, cores)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # for pools started by libraries other than torch
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)  # only the engine thread runs ops; settable once, before any
        except RuntimeError:
            pass
