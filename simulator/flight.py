"""One request's state on its way through the simulated cluster (``simulator.gateway``), and a
request waiting in the admission queue for a decode place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from client.bench.metrics import RequestRecord
from client.bench.workload import PlannedRequest
from common.engine.leases import Lease
from common.slo.admission_round import Demand
from common.slo.promise_record import PromiseRecord
from gateway.prefix_view import PromptBlocks
from gateway.path_rules import Refusal, ttft_deadline
from gateway.request_path import RequestPath
from gateway.request_stages import Stage, next_stage
from simulator.worker_state import SimWorkerState
from simulator.workers import SimDecodeWorker, SimWorker


@dataclass(eq=False)
class Flight:
    """One request on its way through the cluster, and the client's record of it."""

    planned: PlannedRequest
    record: RequestRecord
    decode: SimDecodeWorker | None = None
    prefill: SimWorker | None = None  # a prefill worker, or its decode worker prefilling it itself
    lease: Lease | None = None
    prefill_raw_s: float | None = None  # the TTFT guard's uncalibrated prediction of its prefill call
    # what admitted it and when its latencies count from (at the gateway), for the closed loop
    promise: PromiseRecord = field(default_factory=PromiseRecord)

    path: RequestPath[SimWorkerState] | None = None  # its decisions, as the gateway's (set when it reaches the gateway)
    stage: Stage = Stage.RESERVING  # where it is in its life, as the gateway's ``Progress`` says
    ended: bool = False  # answered, refused or cancelled: what still arrives for it is dropped
    last_heard: bool = False  # its last token reached the gateway before its first token's answer
    refused_by: list[str] = field(default_factory=list)  # what each decode worker asked last said (``all_refused``)
    refusal: str = ""  # why it was refused, as the gateway counts it (``pdserve:request_rejections``)
    _prompt: PromptBlocks | None = None

    def to(self, stage: Stage) -> None:
        """Moves it on (``request_stages.NEXT``); one that has ended stays ended."""
        if not self.ended:
            self.stage = next_stage(self.stage, stage)

    def attempt_forgotten(self) -> None:
        """The try's lease was given back and its workers dropped, to try others: admitted anew."""
        self.to(Stage.RESERVING)
        self.decode, self.lease, self.prefill, self.prefill_raw_s = None, None, None, None
        self.promise = PromiseRecord(arrived=self.promise.arrived)

    @property
    def prompt(self) -> PromptBlocks:
        """Its prompt as routing reads it: placeholders, since the simulator models no prefix cache."""
        if self._prompt is None:
            self._prompt = PromptBlocks([0] * self.tokens)
        return self._prompt

    @property
    def arrived(self) -> float:
        """When it reached the gateway: its TTFT counts from here."""
        return self.promise.arrived

    @property
    def request_id(self) -> str:
        return f"req-{self.planned.index}"

    @property
    def tokens(self) -> int:
        return len(self.planned.prompt)

    @property
    def ttft_s(self) -> float:
        return self.planned.slo_class.ttft_ms / 1000 if self.planned.slo_class else 0.0

    @property
    def tpot_s(self) -> float:
        return self.planned.slo_class.tpot_ms / 1000 if self.planned.slo_class else 0.0

    @property
    def deadline(self) -> float:
        return ttft_deadline(self.arrived, self.ttft_s)

    @property
    def demand(self) -> Demand:
        """What it asks of decode admission (``common.slo.admission_round``)."""
        return Demand(self.tpot_s * 1000, self.tokens, self.planned.output_len)


@dataclass(eq=False)
class Waiter:
    flight: Flight
    last_useful: Callable[..., float]  # (``Readings`` of a round, or none) -> virtual seconds
    refusal: Refusal  # what it is told if its last useful moment passes (its last turn's refusal)
    trying: bool = False  # a turn's reservation attempt is under way: it cannot time out meanwhile
    waiting: int = 0  # its current wait for a turn (a turn, or a later wait, supersedes an earlier one)

    @property
    def demand(self) -> Demand:
        return self.flight.demand
