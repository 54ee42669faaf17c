"""Fan-out of engine steps to gateway streams: one ``StepEvents`` message per step per stream.

Called on the engine thread (``on_step``); hands each step to the event loop, which groups
the outputs by the stream their request belongs to. The first output of a request this worker
prefills itself (conditional disaggregation) goes to its Prefill call instead (``first_output``),
as a prefill worker's first token goes back in its reply, and the rest to its stream.
"""

from __future__ import annotations

import asyncio

from common.process.metrics import Metrics
from common.engine.request import RequestOutput
from common.rpc.convert import logprobs_to_proto
from wire.v1 import worker_pb2


class StreamHub:
    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: Metrics | None = None) -> None:
        self._loop = loop
        self._tokens = metrics.generation_tokens.labels("decode") if metrics is not None else None
        self._queues: dict[str, asyncio.Queue[worker_pb2.StepEvents | None]] = {}
        self._stream_of: dict[str, str] = {}  # request id -> stream id
        self._first: dict[str, asyncio.Future[RequestOutput]] = {}  # request id -> its Prefill call's answer

    def first_output(self, request_id: str) -> asyncio.Future[RequestOutput]:
        """The next output of ``request_id`` (its first: it is prefilled here), kept off its stream."""
        future: asyncio.Future[RequestOutput] = self._loop.create_future()
        self._first[request_id] = future
        return future

    def forget_first(self, request_id: str) -> None:
        self._first.pop(request_id, None)

    def awaits_first(self, request_id: str) -> bool:
        """Whether a Prefill call here still awaits the request's first output."""
        return request_id in self._first

    def open(self, stream_id: str) -> asyncio.Queue[worker_pb2.StepEvents | None]:
        old = self._queues.get(stream_id)
        if old is not None:
            old.put_nowait(None)  # a reconnecting gateway replaces its old stream
        queue: asyncio.Queue[worker_pb2.StepEvents | None] = asyncio.Queue()
        self._queues[stream_id] = queue
        return queue

    def close(self, stream_id: str, queue: asyncio.Queue[worker_pb2.StepEvents | None]) -> list[str]:
        """Forgets a stream; returns its requests, which nobody can receive any more."""
        if self._queues.get(stream_id) is queue:
            del self._queues[stream_id]
        orphans = [r for r, s in self._stream_of.items() if s == stream_id and stream_id not in self._queues]
        for request_id in orphans:
            del self._stream_of[request_id]
        return orphans

    def has_stream(self, stream_id: str) -> bool:
        return stream_id in self._queues

    def bind(self, request_id: str, stream_id: str) -> None:
        self._stream_of[request_id] = stream_id

    def on_step(self, outputs: list[RequestOutput]) -> None:
        self._loop.call_soon_threadsafe(self._dispatch, outputs)

    def shutdown(self) -> None:
        for queue in self._queues.values():
            queue.put_nowait(None)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        if self._tokens is not None:
            self._tokens.inc(sum(len(out.new_token_ids) for out in outputs))
        per_stream: dict[str, list[worker_pb2.TokenEvent]] = {}
        for out in outputs:
            first = self._first.pop(out.request_id, None)
            if first is not None:
                if not first.done():
                    first.set_result(out)
                if out.finished:
                    self._stream_of.pop(out.request_id, None)
                continue
            stream_id = self._stream_of.get(out.request_id)
            if stream_id is None:
                continue
            event = worker_pb2.TokenEvent(request_id=out.request_id, token_ids=list(out.new_token_ids),
                                          finish_reason=out.finish_reason or "", error=out.error or "")
            if out.logprobs:  # asked for
                event.logprobs.extend(logprobs_to_proto(lp) for lp in out.logprobs)
            per_stream.setdefault(stream_id, []).append(event)
            if out.finished:
                del self._stream_of[out.request_id]
        for stream_id, events in per_stream.items():
            queue = self._queues.get(stream_id)
            if queue is not None:
                queue.put_nowait(worker_pb2.StepEvents(events=events))
