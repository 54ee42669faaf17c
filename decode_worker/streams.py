"""Fan-out of engine steps to gateway streams: one ``StepEvents`` message per step per stream.

Called on the engine thread (``on_step``); hands each step to the event loop, which groups
the outputs by the stream their request belongs to.
"""

from __future__ import annotations

import asyncio

from common.process.metrics import Metrics
from common.engine.request import RequestOutput
from wire.v1 import worker_pb2


class StreamHub:
    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: Metrics | None = None) -> None:
        self._loop = loop
        self._tokens = metrics.generation_tokens.labels("decode") if metrics is not None else None
        self._queues: dict[str, asyncio.Queue[worker_pb2.StepEvents | None]] = {}
        self._stream_of: dict[str, str] = {}  # request id -> stream id

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
            stream_id = self._stream_of.get(out.request_id)
            if stream_id is None:
                continue
            per_stream.setdefault(stream_id, []).append(worker_pb2.TokenEvent(
                request_id=out.request_id, token_ids=list(out.new_token_ids),
                finish_reason=out.finish_reason or "", error=out.error or ""))
            if out.finished:
                del self._stream_of[out.request_id]
        for stream_id, events in per_stream.items():
            queue = self._queues.get(stream_id)
            if queue is not None:
                queue.put_nowait(worker_pb2.StepEvents(events=events))
