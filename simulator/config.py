"""What a simulated cluster is: its workers, its policy, and the costs of what is not simulated
(the hops between processes, the KV copies). Defaults are those of a ``pdserve up`` cluster."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from common.slo.policy import POLICIES as GATEWAY_POLICIES, policy
from common.slo.promise import DEFAULT_TARGET
from simulator.step_noise import check_memory

POLICIES = (*GATEWAY_POLICIES, "round_robin")  # round_robin: fcfs admission, prefill workers taken in turn


@dataclass(frozen=True, slots=True)
class SimConfig:
    prefill: int = 1
    decode: int = 1
    policy: str = "scorpio"  # scorpio | fcfs | round_robin (fcfs with round-robin routing) | ttft_guard | tpot_guard
    max_batch_size: int = 64
    max_num_tokens: int = 4096
    block_size: int = 16
    num_kv_blocks: int = 16384  # per worker
    max_model_len: int = 8192
    hop_s: float = 0.0005  # one RPC between two processes, one way
    transfer_s: float = 0.0005  # a KV copy: fixed part ...
    transfer_s_per_token: float = 5e-7  # ... and per prompt token
    # what a prefill call takes at the gateway beyond its two hops and the worker's own time
    # (event loops' delays, a busy host): each call draws one of these at random; empty: none.
    # Measured: a cluster's ``pdserve:prefill_call_overhead_seconds`` (``call_overhead_from_histogram``)
    call_overhead_s: tuple[float, ...] = ()
    # how those overheads grow with the load: each draw × AT_1 · r^EXPONENT, r the requests sent
    # over the last second (``simulator.host``'s rate; with host_cores), for draws measured at one
    # load and the factor fitted through it (1 there) and a heavier one; (0, 0): as drawn
    call_overhead_growth: tuple[float, float] = (0.0, 0.0)
    heartbeat_s: float = 0.5
    admission_tick_s: float = 0.025  # the admission queue's round at the latest
    slo_target: float = DEFAULT_TARGET
    work_conserving_credit: bool = True  # as the engine flag of that name
    step_noise: float = 0.0  # coefficient of variation of every forward's time around its cost model
    # each decode step's (prefill forward's) time is its cost model's × one of these, drawn at
    # random (mean 1; in place of step_noise). Measured: a worker's ``pdserve:cost_model_observed_ratio``
    # (``factors_from_histogram``)
    decode_step_factors: tuple[float, ...] = ()
    prefill_forward_factors: tuple[float, ...] = ()
    # a decode step's factor's memory of the steps before, (w, rho): factors k steps apart correlate
    # about w·rho^k (``simulator.step_noise``); (0, 0): independent. Measured: a decode worker's
    # ``pdserve:cost_model_ratio_autocorrelation`` (``memory_from_correlations``)
    decode_step_memory: tuple[float, float] = (0.0, 0.0)
    prefill_scale: float = 1.0  # the workers' forwards take this × what their cost model (which
    decode_scale: float = 1.0  # the guards start from) predicts: a profile that is off, a busy host
    # the host's cores (0: the workers have theirs to themselves) and the cores the gateway and its
    # clients use, (at 1 req/s, exponent of the rate: a · r^p): where no core is spare for them,
    # they stretch the forwards of the workers whose cores they run on (``simulator.host``)
    host_cores: int = 0
    front_end_cores: tuple[float, float] = (0.0, 0.0)
    # a worker's own RPC threads beside its engine (gRPC server, token streams, KV hand-offs), on
    # its own cores: (at 1 req/s handed to the worker, exponent); with host_cores
    prefill_own_cores: tuple[float, float] = (0.0, 0.0)
    decode_own_cores: tuple[float, float] = (0.0, 0.0)
    # a decode step's time in the cluster over its time alone, measured against the load: (at 1
    # req/s handed to the worker, exponent); given (> 0), the decode workers' stretch in place of
    # the cores' share (``simulator.host``); with host_cores
    decode_step_ratio: tuple[float, float] = (0.0, 0.0)
    # the share of a decode step's time its engine computes on its core (the rest it waits on its
    # own threads: token streams, the next batch's RPCs); the host counts the rest as idle for the
    # front end to run in. 1: a decode worker's core is in use for its whole step
    decode_cpu_share: float = 1.0
    # the gateway's event loop, one thread: the seconds of it a request takes when served (its
    # handler, its worker calls, its token messages) and when refused; (0, 0): never the bottleneck.
    # A call's handler runs when the loop is free (calls queue inside gRPC before it,
    # ``gateway.front_capacity``); the wait counts in its TTFT and, the request stamped by its client
    # (``gateway.request_start``), in its plan. Measured: ``bench/slo.py``'s ``gateway_loop_ms``
    # (``gateway_loop_from_points``)
    gateway_loop_s: tuple[float, float] = (0.0, 0.0)
    # a request no prefill worker is predicted to prefill in time is prefilled by its decode worker
    # when that one predicts it in time (``common.slo.local_prefill``; TTFT-guarded policies): the
    # gateway's ``--local-prefill``
    local_prefill: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.prefill < 1 or self.decode < 1:
            raise ValueError("a cluster needs at least one prefill and one decode worker")
        if min(self.hop_s, self.transfer_s, self.transfer_s_per_token, self.step_noise) < 0:
            raise ValueError("latencies and noise must be >= 0")
        if any(o < 0 for o in self.call_overhead_s):
            raise ValueError("call overheads must be >= 0")
        if any(f <= 0 for f in (*self.decode_step_factors, *self.prefill_forward_factors)):
            raise ValueError("decode step and prefill forward factors must be > 0")
        if min(self.prefill_scale, self.decode_scale) <= 0:
            raise ValueError("prefill_scale and decode_scale must be > 0")
        laws = (self.front_end_cores, self.prefill_own_cores, self.decode_own_cores, self.decode_step_ratio,
                self.call_overhead_growth)
        if self.call_overhead_growth[0] > 0 and not self.host_cores:
            raise ValueError("call_overhead_growth (--call-overhead-growth) reads the load from the simulated host: "
                             "it needs host_cores (--host-cores)")
        if self.host_cores < 0 or min(min(law) for law in laws) < 0:
            raise ValueError("host cores and the rate laws' figures and exponents must be >= 0")
        if min(self.gateway_loop_s) < 0:
            raise ValueError("the gateway loop's seconds a request must be >= 0")
        if not 0 < self.decode_cpu_share <= 1:
            raise ValueError("decode_cpu_share must be in (0, 1]")
        check_memory(self.decode_step_memory, "decode_step_memory")

    @property
    def exact(self) -> bool:
        """Every forward takes exactly what the cost model predicts."""
        return (self.step_noise == 0 and not self.decode_step_factors and not self.prefill_forward_factors
                and self.prefill_scale == 1 and self.decode_scale == 1 and not self.host_cores)

    @property
    def engine_policy(self) -> str:
        """The policy the workers' engines run."""
        return "fcfs" if self.policy == "round_robin" else self.policy

    @property
    def ttft_guard(self) -> bool:
        return self.policy != "round_robin" and policy(self.policy).ttft_guard

    @property
    def prefills_locally(self) -> bool:
        """Decode workers may prefill what no prefill worker can in time."""
        return self.local_prefill and self.ttft_guard

    @property
    def tpot_guard(self) -> bool:
        return self.policy != "round_robin" and policy(self.policy).tpot_guard


def call_overhead_from_histogram(buckets: Sequence[tuple[float, float]], hops_s: float) -> tuple[float, ...]:
    """``SimConfig.call_overhead_s`` from a Prometheus histogram's cumulative buckets ``(le, count)``
    (``+Inf`` last) of what prefill calls took beyond the worker's own time: one value per observed
    call, at its bucket's geometric middle, less the ``hops_s`` the simulator already charges."""
    return tuple(max(0.0, middle - hops_s) for middle in _bucket_middles(buckets))


def gateway_loop_from_points(points: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """``SimConfig.gateway_loop_s`` from measured runs ``(served, refused, loop seconds)``: the
    gateway's event loop's thread CPU over a run, against the requests it served and refused, fitted
    as ``served · a + refused · b`` by least squares with ``a, b >= 0`` (a run that refused nothing
    pins ``a``; runs that refused many pin ``b``). (0, 0) without a run that served or refused."""
    ss = sum(s * s for s, _, _ in points)
    rr = sum(r * r for _, r, _ in points)
    sr = sum(s * r for s, r, _ in points)
    sy = sum(s * y for s, _, y in points)
    ry = sum(r * y for _, r, y in points)
    det = ss * rr - sr * sr
    if det > 1e-9 * max(ss * rr, 1e-30):
        a, b = (sy * rr - ry * sr) / det, (ry * ss - sy * sr) / det
        if a >= 0 and b >= 0:
            return a, b
    # the best with one of them 0 (collinear runs, or a fit that wanted a negative cost)
    only_served, only_refused = (sy / ss if ss else 0.0, 0.0), (0.0, ry / rr if rr else 0.0)

    def residual(fit: tuple[float, float]) -> float:
        return sum((s * fit[0] + r * fit[1] - y) ** 2 for s, r, y in points)

    return min(only_served, only_refused, key=residual) if points else (0.0, 0.0)


def factors_from_histogram(buckets: Sequence[tuple[float, float]]) -> tuple[float, ...]:
    """``SimConfig.decode_step_factors`` (``prefill_forward_factors``) from a histogram's cumulative
    buckets of steps' (forwards') ratios to their prediction (``pdserve:cost_model_observed_ratio``):
    one per observation, at its bucket's geometric middle, divided by their mean. Empty with none."""
    values = _bucket_middles(buckets)
    mean = sum(values) / len(values) if values else 1.0
    return tuple(v / mean for v in values)


def _bucket_middles(buckets: Sequence[tuple[float, float]]) -> list[float]:
    """One value per observation of cumulative buckets ``(le, count)``: its bucket's geometric
    middle (the first bucket's: half its bound; the ``+Inf`` bucket's: between the largest bound and
    1.5× it)."""
    values: list[float] = []
    below, seen = 0.0, 0.0
    for le, count in sorted(buckets):
        n = round(count - seen)
        top = le if math.isfinite(le) else below * 1.5
        middle = math.sqrt(below * top) if below > 0 else top / 2
        values += [middle] * n
        below, seen = top, count
    return values
