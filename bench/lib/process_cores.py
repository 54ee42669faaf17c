"""The cores processes used while something ran: each of a local cluster's processes, each
worker's engine thread, and this process's children (the load tester). Linux ``/proc``."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import TypeVar
from pathlib import Path

from pdserve.cluster import LocalCluster

T = TypeVar("T")


def _stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU seconds of a ``/proc/.../stat`` file; nan where it cannot be read."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far (nan where ``/proc`` has none)."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds each thread of the process has used so far (empty where ``/proc`` has none)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    seconds = {int(tid): _stat_cpu_seconds(Path(f"/proc/{pid}/task/{tid}/stat")) for tid in tids}
    return {tid: s for tid, s in seconds.items() if s == s}  # a thread that ended meanwhile: nan, left out


def busiest_thread(before: dict[int, float], after: dict[int, float]) -> float:
    """The most CPU seconds one thread used between two readings of ``thread_cpu_seconds``."""
    return max((after[t] - before.get(t, 0.0) for t in after), default=0.0)


def busiest_thread_during(pid: int, run: Callable[[], T]) -> tuple[T, float, float]:
    """``run()``'s result, the most CPU seconds one thread of the process used while it ran, and
    the seconds it ran."""
    before, started = thread_cpu_seconds(pid), time.perf_counter()
    result = run()
    return result, busiest_thread(before, thread_cpu_seconds(pid)), time.perf_counter() - started


# the thread of a process whose cores are counted apart (its busiest), by process: the one that
# cannot spread over more than one core
BUSIEST_THREAD = {"gateway": "loop"}  # every worker's: "engine"


def cores_used(cluster: LocalCluster, run: Callable[[], dict]) -> tuple[dict, dict[str, float]]:
    """``run()``'s result, and the cores each of the cluster's processes and the load tester (this
    process's children) used on average while it ran, each worker's engine thread (its busiest:
    ``<worker>/engine``) and the gateway's event loop's thread (its busiest: ``gateway/loop``, which
    no number of cores lifts past one): what the simulator charges the host for (the gateway and the
    load tester, the workers' RPC threads beside their engines) shows here."""
    pids = {"-".join(name.split("-")[:2]): cluster.pid(name) for name in cluster.processes}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    threads = {name: thread_cpu_seconds(pid) for name, pid in pids.items()}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = run()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = {name: (cpu_seconds(pid) - before[name]) / wall for name, pid in pids.items()}
    for name, was in threads.items():
        used[f"{name}/{BUSIEST_THREAD.get(name, 'engine')}"] = busiest_thread(was, thread_cpu_seconds(pids[name])) / wall
    used["load_tester"] = (after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) / wall
    return result, used


def own_threads(used: dict[str, float], role: str) -> float:
    """The cores a ``role`` worker's threads besides its engine used."""
    return max(0.0, used[f"{role}-0"] - used[f"{role}-0/engine"])


def front_end(used: dict[str, float]) -> float:
    """The cores the gateway and the load tester used."""
    return used["gateway"] + used["load_tester"]
