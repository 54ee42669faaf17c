"""The host's CPU cores, where the workers share them with the front end and their own RPC threads.

On a host with no core to spare (``pdserve up`` on 2 cores: one worker per core, the gateway
and the clients wherever the OS puts them) the front end runs on the workers' cores, and a
forward takes longer by the share of its core the front end takes while it runs. Measured on
such a host (README, The simulator): a prefill forward's thread CPU time stays at its cost
model from 1 to 24 req/s while its wall time grows to 1.5x it, and the front end's cores grow
with the logarithm of the request rate (its event loops handle more per wake-up as load grows).
A worker's own RPC threads run on its own cores (the process is pinned there) beside its engine
thread, and take more of them as the load grows too.

    front end:   F(r) = base + per_log_rate · ln(r) cores, r = requests sent in the last WINDOW_S
    own threads: a worker's RPC threads beside its engine (the gRPC server, token streams, KV
                 hand-offs) use O_i(r / workers of its role) cores of its own cores, as F's law
    spare cores: the host's cores beyond the workers' (``plan_cores`` gives the gateway one of
                 its own then) take F first; the rest, F', runs on the workers' cores
    spread:      by idle capacity: worker i, k_i cores, busy u_i of the last WINDOW_S, its engine
                 computing a share s_i of its busy time (``cpu_share``, by role; 1 unless told), has
                 c_i = max(0, k_i(1 − s_i·u_i) − O_i) and takes f_i = F' · c_i / Σ_j c_j
    stretch:     a forward (a decode worker's run ahead) starting now takes 1 / (1 − (O_i + f_i) / k_i)
                 × its time, the share capped at MAX_SHARE

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
class CoresAtRate:
    """The cores some threads use at a request rate (the gateway and its clients; a worker's own
    RPC threads)."""

    base: float = 0.0  # at 1 req/s
    per_log_rate: float = 0.0  # more per e-fold of the rate

    def at(self, rate: float) -> float:
        if rate <= 0:
            return 0.0
        return max(0.0, self.base + self.per_log_rate * math.log(rate))

    @classmethod
    def fit(cls, points: list[tuple[float, float]]) -> CoresAtRate:
        """Least squares through measured ``(rate, cores)`` points (two or more rates); one point:
        a constant."""
        if not points:
            raise ValueError("no measured front-end load to fit")
        xs, ys = [math.log(r) for r, _ in points], [c for _, c in points]
        n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
        spread = sum((x - mx) ** 2 for x in xs)
        if n < 2 or spread == 0:
            return cls(my, 0.0)
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / spread)
        return cls(my - slope * mx, slope)


@dataclass(eq=False)
class HostCpu:
    """What the front end takes from each worker's cores, on the virtual clock."""

    cores: int
    workers: dict[str, str]  # worker id -> role ("prefill" / "decode")
    front_end: CoresAtRate
    own: dict[str, CoresAtRate] = field(default_factory=dict)  # by role: a worker's own RPC threads
    cpu_share: dict[str, float] = field(default_factory=dict)  # by role: of its busy time, what its engine computes
    _sent: deque[float] = field(default_factory=deque)
    _busy: dict[str, deque[list[float]]] = field(default_factory=dict)  # worker -> [start, end] intervals
    _charged: dict[str, list[float]] = field(default_factory=dict)  # role -> [seconds unstretched, stretched]

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ValueError("a host has at least one core")
        self._busy = {w: deque() for w in self.workers}
        self._charged = {role: [0.0, 0.0] for role in set(self.workers.values())}
        n = len(self.workers)
        self.spare = 1 if self.cores > n else 0  # plan_cores: the gateway's own core
        self.worker_cores = (self.cores - self.spare) / n
        self._of_role = {role: sum(r == role for r in self.workers.values()) for role in self._charged}

    def sent(self, now: float) -> None:
        """A client sent a request now."""
        self._sent.append(now)

    def rate(self, now: float) -> float:
        """Requests sent a second over the last WINDOW_S."""
        sent = self._sent
        while sent and sent[0] < now - WINDOW_S:
            sent.popleft()
        return len(sent) / WINDOW_S

    def own_cores(self, worker: str, rate: float) -> float:
        """The cores the worker's own RPC threads use at ``rate`` (requests a second to the cluster)."""
        role = self.workers[worker]
        law = self.own.get(role)
        return law.at(rate / self._of_role[role]) if law is not None else 0.0

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
        own = {w: self.own_cores(w, rate) for w in self.workers}
        spill = max(0.0, self.front_end.at(rate) - self.spare)
        taken = 0.0
        if spill > 0:
            idle = {w: max(0.0, k * (1 - self.cpu_share.get(role, 1.0) * self.utilization(w, now)) - own[w])
                    for w, role in self.workers.items()}
            total = sum(idle.values())
            taken = spill * idle[worker] / total if total > 1e-9 else spill / len(self.workers)
        return min(MAX_SHARE, (own[worker] + taken) / k)

    def stretch(self, worker: str, now: float) -> float:
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
