"""After the first token: the commit on the decode worker and the token events of its stream,
gathered into messages for the client (``gateway.coalesce``), to the last; and a stream whose
decode worker is lost mid-way resumed on another, up to ``--migration-limit`` times a request
(``gateway.migration``): the client sees no error, and no token twice or missing."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

import grpc

from common.process.metrics import Metrics
from common.rpc.convert import sampling_to_proto
from gateway import retries
from gateway.coalesce import InboxItem, TokenInbox, next_message
from gateway.decode_streams import DecodeStreams
from gateway.errors import ABORTED, DecodeLost, RequestError, unavailable
from gateway.final_message import final_message, first_logprobs
from gateway.migration import continuation
from gateway.promise_loop import PromiseLoop
from gateway.registry import WorkerRecord, WorkerRegistry
from gateway.request_path import RequestPath
from gateway.request_stages import Stage
from gateway.request_state import Progress
from gateway.router import Router
from gateway.stream_interval import StreamInterval
from gateway.text_stream import TextStream
from gateway.validation import ValidatedRequest
from gateway.worker_calls import CONTROL_TIMEOUT_S, call_timeout
from wire.slo import slo_to_proto
from wire.v1 import gateway_pb2, worker_pb2

log = logging.getLogger(__name__)


class Streaming:
    """The request flow's streaming stage (``RequestFlow`` has what it reads)."""

    registry: WorkerRegistry
    router: Router
    streams: DecodeStreams
    stream_interval: StreamInterval
    promises: PromiseLoop
    metrics: Metrics | None
    migration_limit: int
    _path_for: Callable[[ValidatedRequest, Progress, float], RequestPath[WorkerRecord]]  # (``RequestFlow``)

    async def _commit(self, req: ValidatedRequest, p: Progress, first_token: int) -> None:
        assert p.decode is not None
        commit = worker_pb2.CommitRequest(request_id=req.request_id, lease_id=p.lease_id,
                                          prompt_token_ids=req.prompt_token_ids, first_token=first_token,
                                          sampling=sampling_to_proto(req.params),
                                          slo=slo_to_proto(req.ttft_ms, req.tpot_ms))
        p.to(Stage.COMMITTING)
        try:
            await p.decode.stub.Commit(commit, timeout=call_timeout(req, CONTROL_TIMEOUT_S))
        except grpc.aio.AioRpcError as exc:
            raise unavailable(f"decode worker {p.decode.worker_id} refused the commit: {exc.details()}") from None
        p.to(Stage.STREAMING)

    async def _decode_events(self, req: ValidatedRequest, p: Progress, inbox: TokenInbox,
                             text: TextStream) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        merge = not req.stop  # (with stop strings each event stays apart: the ids sent must end at the stop)
        pending: deque[InboxItem] = deque()
        sent = p.promise.first_sent = time.perf_counter()  # when the last message went (the first token's, just now)
        while True:
            if not pending:
                hold_s = self.stream_interval.seconds() if merge else 0.0
                pending = await inbox.take(sent + hold_s if hold_s else 0.0)
                arrived = inbox.last_arrival
            event = next_message(pending, merge)
            if event is ABORTED:
                self._spawn(self._abort_decode(req.request_id, p))
                yield final_message(req, p, [], text.finish().text, "abort")
                return
            # (a structured request is not resumed: its grammar's state lived on the lost worker)
            if isinstance(event, DecodeLost) and p.migrations < self.migration_limit and not p.abort_requested \
                    and req.params.structured is None:
                event = await self._resumed(req, p, event)  # the next token, from another decode worker
                assert p.inbox is not None
                inbox, pending = p.inbox, deque()
            elif isinstance(event, RequestError):
                raise event
            if event.error:
                raise RequestError(grpc.StatusCode.INTERNAL, f"decode failed: {event.error}")
            p.completion_tokens += len(event.token_ids)
            p.generated += event.token_ids
            delta = text.add(event.token_ids)
            if delta.stopped or event.finish_reason:
                reason = "stop" if delta.stopped else event.finish_reason
                yield final_message(req, p, list(event.token_ids), delta.text + text.finish().text, reason,
                                    event.logprobs)
                if delta.stopped and not event.finish_reason:
                    self._spawn(self._abort_decode(req.request_id, p))
                return
            self.promises.decoding(req, p, arrived)
            message = gateway_pb2.GenerateResponse(request_id=req.request_id, token_ids=event.token_ids, text=delta.text)
            if event.logprobs:  # (asked for; an empty field given costs a message half as much again)
                message.logprobs.extend(event.logprobs)
            yield message
            sent = time.perf_counter()

    async def _resumed(self, req: ValidatedRequest, p: Progress, lost: DecodeLost) -> worker_pb2.TokenEvent:
        """Resumes ``req`` elsewhere (its prompt and the tokens sent prefilled again into a new
        reservation); the continuation's first token, as a token event of its stream."""
        left = req.params.max_tokens - len(p.generated)
        if left <= 0:  # every token was sent: only the end was lost
            return worker_pb2.TokenEvent(request_id=req.request_id, finish_reason="length")
        log.warning("%s: resuming request %s on another decode worker after %d tokens (migration %d of %d)",
                    lost, req.request_id, len(p.generated), p.migrations + 1, self.migration_limit)
        if self.metrics is not None:
            self.metrics.migrations.labels("gateway").inc()
        assert p.decode is not None
        self.streams.unsubscribe(req.request_id)
        p.decode.view.routed.pop(req.request_id, None)
        p.migrating()
        resumed = continuation(req, p.generated)
        p.path = self._path_for(resumed, p, time.perf_counter())
        reply = await retries.first_token(resumed, p, self, self.registry, self.metrics)  # type: ignore[arg-type]
        finish = reply.finish_reason or ("length" if resumed.params.max_tokens == 1 else "")
        if finish:  # nothing decodes after it: the lease goes back now
            await self._release(req.request_id, p, writer_may_still_write=False)  # type: ignore[attr-defined]
        elif p.prefill is p.decode:  # it decodes there already
            p.to(Stage.COMMITTING)
            p.to(Stage.STREAMING)
        else:
            await self._commit(resumed, p, reply.first_token)
        return worker_pb2.TokenEvent(request_id=req.request_id, token_ids=[reply.first_token], finish_reason=finish,
                                     logprobs=first_logprobs(reply))
