"""The host's CPU cores, where the workers share them with the front end and their own RPC threads.

On a host with no core to spare (``pdserve up`` on 2 cores: one worker per core, the gateway and the
clients wherever the OS puts them) the front end runs on the workers' cores, and a forward takes
longer by the share of its core the front end takes while it runs: on such a host a prefill
forward's thread CPU time stays at its cost model as the load grows while its wall time grows past
it, and the front end's cores grow as a power of the request rate below one (its event loops handle
more per wake-up as load grows; measured: docs/decisions.md, 'Simulator: the host's cores'). A
worker's own RPC threads run on its own cores (the process is pinned there) beside its engine
thread, and take more of them as the load grows too.

    front end:   F(r) = a · r^p cores, r = requests sent in the last WINDOW_S (``RateLaw``)
    own threads: a worker's RPC threads beside its engine (the gRPC server, token streams, KV
                 hand-offs) use O_i(r_i) cores of its own cores, r_i the requests it was handed in
                 the last WINDOW_S (a refused request costs its workers nothing), as F's law
    spare cores: the host's cores beyond the workers' (``plan_cores`` gives the gateway one of
                 its own then) take F first; the rest, F', runs on the workers' cores
    spread:      by idle capacity: worker i, k_i cores, busy u_i of the last WINDOW_S, its engine
                 computing a share s_i of its busy time (``cpu_share``, by role; 1 unless told), has
                 c_i = max(0, k_i(1 − s_i·u_i) − O_i) and takes f_i = F' · c_i / Σ_j c_j
    stretch:     a forward (a decode worker's run ahead) starting now takes 1 / (1 − (O_i + f_i) / k_i)
                 × its time, the share capped at MAX_SHARE; or, for a role whose step time in the
                 cluster was measured against the load (``step_ratio``), max(1, R(r_i)) × its time

The measured law is for a stretch the share's model misses: under heavy load a decode step on
shared cores takes longer than the cores' share above charges (the engine thread also waits on its
own process's RPC threads, and the OS runs the front end on a busy core). It needs measuring where
it grows: fitted through light loads alone it comes out flat (docs/decisions.md, 'Simulator: the
host's cores').

With ``SimConfig.host_cores`` 0 (the default) none of this runs: the workers have their cores
to themselves, as on a host with cores to spare for the front end.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

WINDOW_S = 1.0
MAX_SHARE = 0.8  # a worker keeps at least this much less than its cores: CFS shares a busy core


@dataclass(frozen=True, slots=True)
class RateLaw:
    """A figure that grows as a power of a request rate: ``at_one · rate^exponent`` (the cores some
    threads use; a step's time in the cluster over its time alone). None at no load."""

    at_one: float = 0.0  # at 1 req/s
    exponent: float = 0.0

    def at(self, rate: float) -> float:
        if rate <= 0:
            return 0.0
        return self.at_one * rate ** self.exponent

    @classmethod
    def fit(cls, points: list[tuple[float, float]]) -> RateLaw:
        """Least squares in log-log through measured ``(rate, figure)`` points; one point (or one
        rate): a constant. Points at no load or of no figure carry no logarithm and are left out; a
        figure falling with load is noise, and fits flat."""
        if not points:
            raise ValueError("no measured load to fit")
        logs = [(math.log(r), math.log(v)) for r, v in points if r > 0 and v > 0]
        if not logs:
            return cls(0.0, 0.0)
        xs, ys = [x for x, _ in logs], [y for _, y in logs]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        spread = sum((x - mx) ** 2 for x in xs)
        if spread == 0:
            return cls(math.exp(my), 0.0)
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in logs) / spread)
        return cls(math.exp(my - slope * mx), slope)


@dataclass(eq=False)
class HostCpu:
    """What the front end takes from each worker's cores, on the virtual clock."""

    cores: int
    workers: dict[str, str]  # worker id -> role ("prefill" / "decode")
    front_end: RateLaw
    own: dict[str, RateLaw] = field(default_factory=dict)  # by role: a worker's own RPC threads
    cpu_share: dict[str, float] = field(default_factory=dict)  # by role: of its busy time, what its engine computes
    step_ratio: dict[str, RateLaw] = field(default_factory=dict)  # by role: its forwards' stretch, measured
    _sent: deque[float] = field(default_factory=deque)
    _handed: dict[str, deque[float]] = field(default_factory=dict)  # worker -> when it was handed a request
    _busy: dict[str, deque[list[float]]] = field(default_factory=dict)  # worker -> [start, end] intervals
    _charged: dict[str, list[float]] = field(default_factory=dict)  # role -> [seconds unstretched, stretched]

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ValueError("a host has at least one core")
        self._busy = {w: deque() for w in self.workers}
        self._handed = {w: deque() for w in self.workers}
        self._charged = {role: [0.0, 0.0] for role in set(self.workers.values())}
        n = len(self.workers)
        self.spare = 1 if self.cores > n else 0  # plan_cores: the gateway's own core
        self.worker_cores = (self.cores - self.spare) / n

    def sent(self, now: float) -> None:
        """A client sent a request now."""
        self._sent.append(now)

    def handed(self, worker: str, now: float) -> None:
        """The gateway handed the worker a request now (a prefill call; a decode place taken)."""
        self._handed[worker].append(now)

    def rate(self, now: float) -> float:
        """Requests sent a second over the last WINDOW_S."""
        return _per_second(self._sent, now)

    def worker_rate(self, worker: str, now: float) -> float:
        """Requests handed to the worker a second over the last WINDOW_S."""
        return _per_second(self._handed[worker], now)

    def own_cores(self, worker: str, now: float) -> float:
        """The cores the worker's own RPC threads use now."""
        law = self.own.get(self.workers[worker])
        return law.at(self.worker_rate(worker, now)) if law is not None else 0.0

    def utilization(self, worker: str, now: float) -> float:
        """The share of the last WINDOW_S the worker was busy."""
        intervals, start = self._busy[worker], now - WINDOW_S
        while intervals and intervals[0][1] < start:
            intervals.popleft()
        busy = sum(max(0.0, min(end, now) - max(begin, start)) for begin, end in intervals)
        return min(1.0, busy / WINDOW_S)

    def share(self, worker: str, now: float) -> float:
        """The share of the worker's cores its own RPC threads and the front end take now."""
        k, rate = self.worker_cores, self.rate(now)
        own = {w: self.own_cores(w, now) for w in self.workers}
        spill = max(0.0, self.front_end.at(rate) - self.spare)
        taken = 0.0
        if spill > 0:
            idle = {w: max(0.0, k * (1 - self.cpu_share.get(role, 1.0) * self.utilization(w, now)) - own[w])
                    for w, role in self.workers.items()}
            total = sum(idle.values())
            taken = spill * idle[worker] / total if total > 1e-9 else spill / len(self.workers)
        return min(MAX_SHARE, (own[worker] + taken) / k)

    def stretch(self, worker: str, now: float) -> float:
        """What a forward (a run ahead) of the worker starting now takes over its time alone."""
        measured = self.step_ratio.get(self.workers[worker])
        if measured is not None:
            return max(1.0, measured.at(self.worker_rate(worker, now)))
        return 1.0 / (1.0 - self.share(worker, now))

    def busy(self, worker: str, start: float, end: float, unstretched_s: float) -> None:
        """The worker computes from ``start`` to ``end`` (``unstretched_s`` of it its own)."""
        self._busy[worker].append([start, end])
        charged = self._charged[self.workers[worker]]
        charged[0] += unstretched_s
        charged[1] += end - start

    def cut(self, worker: str, end: float, unstretched_s: float) -> None:
        """The worker's last busy interval ends at ``end`` instead (``unstretched_s`` of it its own)."""
        interval = self._busy[worker][-1]
        charged = self._charged[self.workers[worker]]
        charged[0] -= unstretched_s
        charged[1] -= interval[1] - end
        interval[1] = end

    def busy_s(self) -> dict[str, float]:
        """By role: the seconds its workers computed, all of them together (stretched as they ran)."""
        return {role: stretched for role, (_, stretched) in self._charged.items()}

    def mean_stretch(self) -> dict[str, float]:
        """By role: the time the workers computed over what it would have been alone."""
        return {role: stretched / alone if alone else 1.0 for role, (alone, stretched) in self._charged.items()}


def _per_second(times: deque[float], now: float) -> float:
    """Events a second over the last WINDOW_S (``times`` ascending; older ones are dropped)."""
    while times and times[0] < now - WINDOW_S:
        times.popleft()
    return len(times) / WINDOW_S
