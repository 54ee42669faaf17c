"""Runs an ``LLMEngine`` in its own thread, so no forward pass ever blocks an event loop.

Other threads talk to it only through ``submit``/``abort``/``call`` (an inbox drained
between steps), through each request's ``on_output`` callback, called on the engine
thread, and by reading ``LLMEngine.load`` (a frozen snapshot, ``common.engine.load``).
``common.engine.async_engine.AsyncEngine`` is an event loop's typed face of it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from common.engine.llm_engine import LLMEngine
from common.engine.request import REFUSED, RequestOutput
from common.engine.tpot_admission import AdmissionError
from common.model.sampling_params import SamplingParams

log = logging.getLogger(__name__)


class InjectedFault(RuntimeError):
    """The engine thread's death on purpose (``fail_after_steps``, set from ``common.worker.faults``), for tests."""


OutputCallback = Callable[[RequestOutput], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Submit:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    on_output: OutputCallback
    prefill_only: bool = False
    ttft_slo_ms: float = 0.0
    ttft_left_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[[LLMEngine], Any]
    future: concurrent.futures.Future[Any]


IDLE_TICK_S = 0.2  # how often an idle engine wakes to expire KV leases


class EngineDead(RuntimeError):
    """The engine thread is gone: nothing handed to it will run."""


class EngineThread:
    """``step_listener``, if given, sees every step's outputs at once (the decode worker batches
    one message per step from them); per-request callbacks see their own outputs.

    A step that raises fails the requests it held and the thread goes on; anything else that
    kills the thread fails every caller, makes later calls fail at once (``EngineDead``) and
    calls ``on_death`` (on the dying thread), so the process can stop serving rather than
    stay registered with an engine that no longer steps."""

    def __init__(self, engine: LLMEngine, step_listener: Callable[[list[RequestOutput]], None] | None = None,
                 on_death: Callable[[str], None] | None = None, fail_after_steps: int | None = None) -> None:
        self.engine = engine
        self.step_listener = step_listener
        self.on_death = on_death
        self.fail_after_steps = fail_after_steps  # injected fault (common.worker.faults), for tests
        self.death = ""  # why the thread died; empty while it lives or after a clean stop
        self._inbox: queue.Queue[_Submit | _Abort | _Call | None] = queue.Queue()
        self._inbox_lock = threading.Lock()  # a call is either queued before death, or refused
        self._callbacks: dict[str, OutputCallback] = {}
        self._thread = threading.Thread(target=self._run, name="pdserve-engine", daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._inbox.put(None)
        self._thread.join()

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
               on_output: OutputCallback, prefill_only: bool = False, ttft_slo_ms: float = 0.0,
               ttft_left_ms: float = 0.0) -> None:
        """Validation errors arrive through ``on_output`` as an output with ``error`` set."""
        if not self._put(_Submit(request_id, prompt_token_ids, params, on_output, prefill_only, ttft_slo_ms,
                                 ttft_left_ms)):
            on_output(RequestOutput(request_id, (), True, "error", self.death))

    def abort(self, request_id: str) -> None:
        self._put(_Abort(request_id))

    def call(self, fn: Callable[[LLMEngine], T]) -> concurrent.futures.Future[T]:
        """Runs ``fn(engine)`` on the engine thread between steps; the future holds its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        if not self._put(_Call(fn, future)):
            future.set_exception(EngineDead(self.death))
        return future

    def _put(self, item: _Submit | _Abort | _Call) -> bool:
        with self._inbox_lock:
            if self.death:
                return False
            self._inbox.put(item)
            return True

    async def run(self, fn: Callable[[LLMEngine], T]) -> T:
        return await asyncio.wrap_future(self.call(fn))

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - whatever kills the thread must be reported
            self._die(f"engine thread died: {exc!r}")
            return
        self._fail_all("engine stopped")

    def _loop(self) -> None:
        first_step = self.engine.steps_completed  # warm-up and profiling ran steps before the thread
        while not self._stopped:
            self._drain_inbox(block=not self.engine.has_unfinished_requests())
            if self._stopped or not self.engine.has_unfinished_requests():
                self.engine.expire_leases()  # a step does it first thing
                continue
            try:
                self._deliver(self.engine.step())
            except Exception as exc:  # a failed step must not strand callers: fail them all
                log.exception("engine step failed")
                self._fail_all(f"engine step failed: {exc}")
            if self.fail_after_steps is not None and self.engine.steps_completed - first_step >= self.fail_after_steps:
                raise InjectedFault(f"injected: the engine thread dies after {self.fail_after_steps} steps")

    def _die(self, reason: str) -> None:
        log.critical("%s", reason, exc_info=True)
        with self._inbox_lock:
            self.death = reason
        while True:  # calls queued before the death would wait forever
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Call) and not item.future.cancelled():
                item.future.set_exception(EngineDead(reason))
            elif isinstance(item, _Submit):
                item.on_output(RequestOutput(item.request_id, (), True, "error", reason))
        try:
            self._fail_all(reason)
        except Exception:  # noqa: BLE001 - the engine's state may be what broke
            log.exception("failing the engine's requests after its death")
        if self.on_death is not None:
            self.on_death(reason)

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
                                        ttft_slo_ms=item.ttft_slo_ms, ttft_left_ms=item.ttft_left_ms)
            except ValueError as exc:  # (an AdmissionError too: its first token would be late here)
                reason = REFUSED if isinstance(exc, AdmissionError) else "error"
                item.on_output(RequestOutput(item.request_id, (), True, reason, str(exc)))
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
        request_ids = set(self.engine.abort_all()) | set(self._callbacks)
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
