"""Runs an ``LLMEngine`` in its own thread, so no forward pass ever blocks an event loop.

Other threads talk to it only through ``submit``/``abort`` (an inbox drained between
steps) and through each request's ``on_output`` callback, called on the engine thread.
``AsyncEngine`` turns those callbacks into one asyncio queue per request.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from common.engine import LLMEngine
from common.request import RequestOutput
from common.sampling_params import SamplingParams

log = logging.getLogger(__name__)
OutputCallback = Callable[[RequestOutput], None]


@dataclass(frozen=True, slots=True)
class _Submit:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    on_output: OutputCallback


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


class EngineThread:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._inbox: queue.Queue[_Submit | _Abort | None] = queue.Queue()
        self._callbacks: dict[str, OutputCallback] = {}
        self._thread = threading.Thread(target=self._run, name="pdserve-engine", daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._inbox.put(None)
        self._thread.join()

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
               on_output: OutputCallback) -> None:
        """Validation errors arrive through ``on_output`` as an output with ``error`` set."""
        self._inbox.put(_Submit(request_id, prompt_token_ids, params, on_output))

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    def _run(self) -> None:
        while not self._stopped:
            self._drain_inbox(block=not self.engine.has_unfinished_requests())
            if self._stopped or not self.engine.has_unfinished_requests():
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # a failed step must not strand callers: fail them all
                log.exception("engine step failed")
                self._fail_all(f"engine step failed: {exc}")
                continue
            self._deliver(outputs)
        self._fail_all("engine stopped")

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self._inbox.get(block=block)
            while True:
                self._handle(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _handle(self, item: _Submit | _Abort | None) -> None:
        if item is None:
            self._stopped = True
        elif isinstance(item, _Abort):
            self.engine.abort_request(item.request_id)
        else:
            try:
                self.engine.add_request(item.request_id, item.prompt_token_ids, item.params)
            except ValueError as exc:
                item.on_output(RequestOutput(item.request_id, (), True, "error", str(exc)))
                return
            self._callbacks[item.request_id] = item.on_output

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            callback = self._callbacks.pop(out.request_id) if out.finished else self._callbacks.get(out.request_id)
            if callback is not None:
                callback(out)

    def _fail_all(self, reason: str) -> None:
        for request_id in list(self.engine.scheduler.requests):
            self.engine.abort_request(request_id)
        self.engine.scheduler.apply_aborts()
        callbacks, self._callbacks = self._callbacks, {}
        for request_id, callback in callbacks.items():
            callback(RequestOutput(request_id, (), True, "error", reason))


class AsyncEngine:
    """asyncio face of an ``EngineThread``: ``generate`` yields each step's output."""

    def __init__(self, thread: EngineThread) -> None:
        self.thread = thread

    async def generate(self, request_id: str, prompt_token_ids: list[int],
                       params: SamplingParams) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.thread.submit(request_id, prompt_token_ids, params,
                           lambda out: loop.call_soon_threadsafe(outputs.put_nowait, out))
        finished = False
        try:
            while not finished:
                out = await outputs.get()
                finished = out.finished
                if out.error is not None:
                    raise ValueError(out.error)
                yield out
        finally:
            if not finished:  # the consumer went away (cancel, deadline): free the request's blocks
                self.thread.abort(request_id)
