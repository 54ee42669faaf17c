"""Runs an ``LLMEngine`` in its own thread, so no forward pass ever blocks an event loop.

Other threads talk to it only through ``submit``/``abort`` (an inbox drained between
steps) and through each request's ``on_output`` callback, called on the engine thread.
``AsyncEngine`` turns those callbacks into one asyncio queue per request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

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
    prefill_only: bool = False
    ttft_slo_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[[LLMEngine], Any]
    future: concurrent.futures.Future[Any]


IDLE_TICK_S = 0.2  # how often an idle engine wakes to expire KV leases


class EngineThread:
    """``step_listener``, if given, sees every step's outputs at once (the decode worker batches
    one message per step from them); per-request callbacks see their own outputs."""

    def __init__(self, engine: LLMEngine, step_listener: Callable[[list[RequestOutput]], None] | None = None) -> None:
        self.engine = engine
        self.step_listener = step_listener
        self._inbox: queue.Queue[_Submit | _Abort | _Call | None] = queue.Queue()
        self._callbacks: dict[str, OutputCallback] = {}
        self._thread = threading.Thread(target=self._run, name="pdserve-engine", daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._inbox.put(None)
        self._thread.join()

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
               on_output: OutputCallback, prefill_only: bool = False, ttft_slo_ms: float = 0.0) -> None:
        """Validation errors arrive through ``on_output`` as an output with ``error`` set."""
        self._inbox.put(_Submit(request_id, prompt_token_ids, params, on_output, prefill_only, ttft_slo_ms))

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    def call(self, fn: Callable[[LLMEngine], Any]) -> concurrent.futures.Future[Any]:
        """Runs ``fn(engine)`` on the engine thread between steps; the future holds its result."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._inbox.put(_Call(fn, future))
        return future

    async def run(self, fn: Callable[[LLMEngine], Any]) -> Any:
        return await asyncio.wrap_future(self.call(fn))

    def _run(self) -> None:
        while not self._stopped:
            self._drain_inbox(block=not self.engine.has_unfinished_requests())
            self.engine.leases.expire()
            if self._stopped or not self.engine.has_unfinished_requests():
                continue
            try:
                self._deliver(self.engine.step())
            except Exception as exc:  # a failed step must not strand callers: fail them all
                log.exception("engine step failed")
                self._fail_all(f"engine step failed: {exc}")
        self._fail_all("engine stopped")

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self._inbox.get(block=block, timeout=IDLE_TICK_S if block else None)
            while True:
                self._handle(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _handle(self, item: _Submit | _Abort | _Call | None) -> None:
        if item is None:
            self._stopped = True
        elif isinstance(item, _Abort):
            self.engine.abort_request(item.request_id)
        elif isinstance(item, _Call):
            _run_call(item, self.engine)
        else:
            try:
                self.engine.add_request(item.request_id, item.prompt_token_ids, item.params, item.prefill_only,
                                        ttft_slo_ms=item.ttft_slo_ms)
            except ValueError as exc:
                item.on_output(RequestOutput(item.request_id, (), True, "error", str(exc)))
                return
            self._callbacks[item.request_id] = item.on_output

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        if self.step_listener is not None and outputs:
            self.step_listener(outputs)
        for out in outputs:
            callback = self._callbacks.pop(out.request_id, None) if out.finished else self._callbacks.get(out.request_id)
            if callback is not None:
                callback(out)

    def _fail_all(self, reason: str) -> None:
        request_ids = set(self.engine.scheduler.requests) | set(self._callbacks)
        for request_id in list(self.engine.scheduler.requests):
            self.engine.abort_request(request_id)
        self.engine.scheduler.apply_aborts()
        failed = [RequestOutput(request_id, (), True, "error", reason) for request_id in sorted(request_ids)]
        if self.step_listener is not None and failed:
            self.step_listener(failed)
        callbacks, self._callbacks = self._callbacks, {}
        for out in failed:
            if out.request_id in callbacks:
                callbacks[out.request_id](out)


def _run_call(item: _Call, engine: LLMEngine) -> None:
    """Runs a call even when its caller has given up (cancelled the future): a call handed to
    the engine, e.g. a release in a cancelled handler's ``finally``, must not be lost. The
    outcome goes to the caller only if it still waits; a cancelled future must not be set
    (that raises, and would kill the engine thread)."""
    try:
        result, error = item.fn(engine), None
    except Exception as exc:  # handed to the awaiting caller
        result, error = None, exc
    try:
        if error is not None:
            item.future.set_exception(error)
        else:
            item.future.set_result(result)
    except concurrent.futures.InvalidStateError:
        log.debug("engine call finished after its caller gave up: %s", error or "ok")


class AsyncEngine:
    """asyncio face of an ``EngineThread``: ``generate`` yields each step's output."""

    def __init__(self, thread: EngineThread) -> None:
        self.thread = thread

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       prefill_only: bool = False, ttft_slo_ms: float = 0.0) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.thread.submit(request_id, prompt_token_ids, params,
                           lambda out: loop.call_soon_threadsafe(outputs.put_nowait, out), prefill_only, ttft_slo_ms)
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
                if prefill_only:  # it may have finished (KV held) before the abort got there
                    self.thread.call(lambda e: e.release_held(request_id))
