"""What other threads may know of a live engine: one frozen snapshot, replaced whole.

The engine builds a new ``EngineLoad`` at the end of every step and of every call that
changes its requests, reservations or blocks, and stores it in ``LLMEngine.load``; only the
engine thread makes those calls. A reader elsewhere (the event loop's heartbeats and drain,
metrics scrapes) reads that attribute once, one reference read and atomic under the GIL, and
uses the object it got: never the scheduler, pool or lease table, whose containers the
engine thread may be changing at that moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from common.engine.block_pool import BlockPool
from common.engine.leases import LeaseTable
from common.engine.scheduler import Scheduler
from common.slo.tpot_guard import guarded_slos


@dataclass(frozen=True, slots=True)
class EngineLoad:
    running: int
    waiting: int
    queued_tokens: int  # tokens the waiting requests still need computed (prompts, recomputes)
    free_blocks: int
    total_blocks: int
    reserved: int  # reservations awaiting their commit (quarantines do not count)
    in_flight: int  # requests still owed an answer: queued, running, held or reserved; drain waits for 0
    steps: int  # forwards run since start: heartbeats carry it as proof of progress
    earliest_ttft_deadline: float | None  # time.monotonic() of the soonest TTFT deadline waiting; None: none
    tpot_slos: Mapping[str, float]  # seconds, read-only: the SLOs the TPOT guard keeps (running and reserved)
    mean_len: float  # mean tokens of the running requests; 0.0 with none running
    step_calibration_ratio: float  # calibrated decode step prediction / the model's
    step_prediction_error: float  # median over recent steps of calibrated prediction / observed
    refits: int = 0  # decode models replaced by a refit from the steps run
    forward_calibration_ratio: float = 1.0  # median prefill forward observed / the model's prediction
    tpot_alone_s: float | None = None  # one request's decode step alone here: the least TPOT it gives
    tpot_alone_now_s: float | None = None  # ... as the idle rule reads it now (``StepEvidence.alone_now_s``)
    epsilon_ceiling: float = 0.0  # the most ε the TPOT guard applies here (``common.slo.epsilon_bound``)
    epsilon_start: float = 0.0  # where ε starts here and returns to on time

    @property
    def kv_usage(self) -> float:
        return 1 - self.free_blocks / self.total_blocks


def measure(scheduler: Scheduler, pool: BlockPool, leases: LeaseTable, steps: int,
            step_calibration_ratio: float, step_prediction_error: float, refits: int = 0,
            forward_calibration_ratio: float = 1.0, tpot_alone_s: float | None = None,
            epsilon_ceiling: float = 0.0, epsilon_start: float = 0.0,
            tpot_alone_now_s: float | None = None) -> EngineLoad:
    """The snapshot of an engine's parts; called on the thread that owns them."""
    running, waiting, reserved = scheduler.running, scheduler.waiting, leases.num_reserved()
    deadlines = [r.ttft_deadline for r in waiting if r.ttft_slo_ms]
    slos = guarded_slos({r.request_id: r.tpot_slo_ms for r in running}, leases.tpot_slos_ms())
    return EngineLoad(
        running=len(running), waiting=len(waiting),
        queued_tokens=sum(r.num_uncomputed_tokens for r in waiting),
        free_blocks=pool.num_free, total_blocks=pool.num_blocks, reserved=reserved,
        in_flight=len(scheduler.requests) + reserved, steps=steps,
        earliest_ttft_deadline=min(deadlines) if deadlines else None, tpot_slos=MappingProxyType(slos),
        mean_len=sum(r.num_tokens for r in running) / len(running) if running else 0.0,
        step_calibration_ratio=step_calibration_ratio, step_prediction_error=step_prediction_error, refits=refits,
        forward_calibration_ratio=forward_calibration_ratio, tpot_alone_s=tpot_alone_s,
        epsilon_ceiling=epsilon_ceiling, epsilon_start=epsilon_start, tpot_alone_now_s=tpot_alone_now_s,
    )
