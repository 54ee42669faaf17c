"""What the simulated gateway's parts (``simulator.decode_admission``, ``prefill_calls``,
``early_ends``, ``cancels``) read and call of it, declared once: ``SimGateway`` is made of them
and sets every one."""

from __future__ import annotations

import random
from collections.abc import Callable

from common.engine.request import RequestOutput
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.router import Router
from simulator.admission_queue import SimAdmissionQueue
from simulator.config import SimConfig
from simulator.event_loop import EventLoop
from simulator.events import Simulation
from simulator.flight import Flight
from simulator.host import HostCpu, RateLaw
from simulator.worker_state import SimPool, SimWorkerState
from simulator.workers import SimWorker


class SimGatewayParts:
    sim: Simulation
    config: SimConfig
    host: HostCpu | None
    done: Callable[[Flight], None]  # a flight's record is complete (finished, refused or ended)
    views: dict[str, DecodeView]
    decoding: dict[str, dict[str, Flight]]  # by decode worker: those with a TPOT SLO
    states: dict[str, SimWorkerState]
    pool: SimPool
    router: Router
    admission: SimAdmissionQueue
    loop: EventLoop
    _calls: random.Random
    _overhead_growth: RateLaw | None
    # the steps each part takes of the others'
    _refuse: Callable[..., None]  # (flight, code, reason)
    _fail: Callable[[Flight, str], None]  # ends a request UNAVAILABLE
    _seek_decode: Callable[[Flight], None]
    _prefill: Callable[[Flight], None]
    _give_back: Callable[..., None]  # (flight, writer_may_still_write, then)
    _forget_decode: Callable[[Flight], None]
    _prefill_lost: Callable[[Flight, SimWorker, TtftGuard], None]
    _commit_refused: Callable[[Flight], None]
    _local_refused: Callable[[Flight], None]
    _decoded: Callable[[Flight, RequestOutput], None]
    _first_token: Callable[..., None]
