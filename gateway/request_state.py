"""One request's progress at the gateway (its stages: ``gateway.request_stages``), and what it holds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from common.slo.promise_record import PromiseRecord
from gateway.coalesce import TokenInbox
from gateway.prefix_view import PromptBlocks
from gateway.request_stages import EARLY_ENDS, Stage, next_stage
from gateway.registry import WorkerRecord
from gateway.request_path import RequestPath
from wire.v1 import worker_pb2


@dataclass(slots=True)
class Progress:
    """Where one request is in its life, and what it holds: drives clean-up and the final
    message's timings."""

    started: float = field(default_factory=time.perf_counter)
    stage: Stage = Stage.RESERVING
    ended_in: Stage | None = None  # the stage the request was in when it ended; None while it lives
    abort_requested: bool = False  # an Abort came: errors from now on read as "aborted"
    decode: WorkerRecord | None = None  # counted in its ``view.routed`` until the request ends or retries
    prefill: WorkerRecord | None = None
    lease_id: str = ""
    decode_cached_tokens: int = 0  # prompt tokens whose KV the lease's decode worker held already
    prefill_reply: worker_pb2.PrefillResponse | None = None
    completion_tokens: int = 0
    generated: list[int] = field(default_factory=list)  # the token ids sent to the client so far
    migrations: int = 0  # times it resumed on another decode worker (``gateway.streaming``)
    ttft_ms: float = 0.0
    prefill_call_s: float = 0.0  # what its (last) Prefill call took
    # what admitted it and when its latencies count from, for the closed loop (perf_counter)
    promise: PromiseRecord = field(default_factory=PromiseRecord)
    owner: object = None  # the validated request of the RPC that runs this flow
    inbox: TokenInbox | None = None  # the decode worker's events for it
    prompt: PromptBlocks | None = None  # the prompt's block hashes, worked out once for every worker's cache
    path: RequestPath[WorkerRecord] | None = None  # its decisions (set as its flow begins)

    def prompt_blocks(self, token_ids: list[int]) -> PromptBlocks:
        if self.prompt is None:
            self.prompt = PromptBlocks(token_ids)
        return self.prompt

    def to(self, stage: Stage) -> None:
        """Moves a live request on; anything but a move ``NEXT`` allows is a bug. A request that
        has ended stays ended: its RPC's task, not yet torn down, may still take a step, but
        its clean-up was decided by the stage it ended in."""
        if self.ended_in is not None:
            return
        self.stage = next_stage(self.stage, stage)

    def reserved(self, decode: WorkerRecord, lease_id: str) -> None:
        self.to(Stage.RESERVED)
        self.decode, self.lease_id = decode, lease_id

    def lease_given_back(self) -> None:
        """The lease was released before any prefill: nothing is held on the decode worker
        (which still counts the request in flight until it ends)."""
        self.to(Stage.RESERVING)
        self.lease_id = ""

    def prefilling(self, prefill: WorkerRecord) -> None:
        self.to(Stage.PREFILLING)
        self.prefill = prefill

    def prefill_refused(self) -> None:
        """Its prefill worker refused the prompt: the lease stays, another is asked."""
        self.to(Stage.RESERVED)
        self.prefill = None

    def prefilled(self, reply: worker_pb2.PrefillResponse) -> None:
        self.to(Stage.PREFILLED)
        self.prefill_reply = reply

    def attempt_forgotten(self) -> None:
        """The attempt's lease was given back and its workers dropped, to try others."""
        self.to(Stage.RESERVING)
        self.decode, self.lease_id, self.prefill, self.prefill_reply = None, "", None, None
        self.decode_cached_tokens = 0
        self.promise = PromiseRecord(arrived=self.promise.arrived)  # the next attempt is admitted anew

    def migrating(self) -> None:
        """Its decode worker is gone mid-stream: it seeks another, as a request of its own."""
        self.to(Stage.RESERVING)
        self.migrations += 1
        self.decode, self.lease_id, self.prefill, self.prefill_reply = None, "", None, None
        self.decode_cached_tokens, self.prompt = 0, None
        self.promise = PromiseRecord(arrived=self.promise.arrived)

    def end(self, outcome: Stage) -> Stage | None:
        """Ends the life, once: a request that sent its last message is DONE, any other ends
        with ``outcome`` (ABORTED instead when an Abort came). Returns the stage it ended in,
        whose ``EXIT_CLEAN_UP`` is owed; None when it had ended already."""
        if self.ended_in is not None:
            return None
        assert outcome in EARLY_ENDS, outcome
        self.ended_in = self.stage
        if self.stage is not Stage.DONE:
            self.stage = Stage.ABORTED if self.abort_requested else outcome
        return self.ended_in
