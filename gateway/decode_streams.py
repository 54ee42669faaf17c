"""The gateway's side of the decode workers' token streams.

One ``Stream`` call per decode worker, opened when it joins. Each message holds one engine
step's tokens for every request of this gateway on that worker; they are handed to each
request's inbox. A broken stream ends that worker's requests with UNAVAILABLE and takes the
worker out of routing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from gateway.coalesce import TokenInbox
from gateway.errors import DecodeLost, RequestError
from gateway.registry import WorkerRecord, WorkerRegistry
from wire.v1 import worker_pb2

log = logging.getLogger(__name__)


class DecodeStreams:
    def __init__(self, stream_id: str, registry: WorkerRegistry,
                 on_finished: Callable[[], None] = lambda: None) -> None:
        self.stream_id = stream_id
        self.on_finished = on_finished  # a request on some decode worker ended: capacity came free
        self.registry = registry
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._inboxes: dict[str, TokenInbox] = {}
        self._worker_of: dict[str, str] = {}
        registry.on_join.append(self._joined)
        registry.on_leave.append(self._left)

    def subscribe(self, request_id: str, worker_id: str) -> TokenInbox:
        inbox = TokenInbox()
        self._inboxes[request_id] = inbox
        self._worker_of[request_id] = worker_id
        return inbox

    def unsubscribe(self, request_id: str) -> None:
        self._inboxes.pop(request_id, None)
        self._worker_of.pop(request_id, None)

    def post(self, request_id: str, item: worker_pb2.TokenEvent | RequestError) -> None:
        inbox = self._inboxes.get(request_id)
        if inbox is not None:
            inbox.put(item)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _joined(self, record: WorkerRecord) -> None:
        if record.role == "decode":
            self._tasks[record.worker_id] = asyncio.get_running_loop().create_task(self._follow(record))

    def _left(self, record: WorkerRecord, reason: str) -> None:
        task = self._tasks.pop(record.worker_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        for request_id, worker_id in list(self._worker_of.items()):
            if worker_id == record.worker_id:
                self.post(request_id, DecodeLost(worker_id, reason))

    async def _follow(self, record: WorkerRecord) -> None:
        call = record.stub.Stream(worker_pb2.StreamRequest(stream_id=self.stream_id))
        try:
            async for message in call:
                record.ready = True  # the first (empty) message is the handshake
                for event in message.events:
                    self.post(event.request_id, event)
                if any(event.finish_reason or event.error for event in message.events):
                    self.on_finished()
            reason = "token stream ended"
        except grpc.aio.AioRpcError as exc:
            reason = f"token stream broke ({exc.code().name})"
        except asyncio.CancelledError:
            call.cancel()
            raise
        if self.registry.workers.get(record.worker_id) is record:
            self.registry.drop(record.worker_id, reason)
