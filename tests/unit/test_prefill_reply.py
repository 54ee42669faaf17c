"""A prefill worker answers as soon as its request's KV is handed off, not when the engine is
next free: the engine thread may be in another forward (up to a whole token budget of other
prompts), and the first token must not wait for it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.request import RequestOutput
from common.engine.thread import EngineThread
from prefill_worker.servicer import PrefillServicer
from wire.v1 import gateway_pb2, worker_pb2

PROMPT = list(range(1, 40))


class _Context:
    """What the servicer reads of a gRPC call's context on the path under test."""

    def time_remaining(self) -> float | None:
        return None

    async def abort(self, code: Any, details: str, trailing_metadata: Any = ()) -> None:
        raise AssertionError(f"aborted: {code} {details}")


async def test_the_reply_does_not_wait_for_the_engine_threads_next_forward():
    engine = LLMEngine(EngineConfig(num_kv_blocks=64))
    free_at_start = engine.pool.num_free
    thread = EngineThread(engine)
    busy, gate = threading.Event(), threading.Event()
    step = engine.step

    def step_then_stay_busy() -> list[RequestOutput]:
        outputs = step()
        if any(o.request_id == "a" and o.finished for o in outputs):
            # the engine goes on to other work before the servicer hears of "a": a forward of
            # other prompts would hold the thread just like this call does
            thread.call(lambda _: (busy.set(), gate.wait(30)))
        return outputs

    engine.step = step_then_stay_busy  # type: ignore[method-assign]
    thread.start()
    servicer = PrefillServicer(thread, "prefill-test")
    blocks = -(-len(PROMPT) // engine.config.block_size)
    # the decode side holds the whole prompt already, so no KV moves: the reply follows the prefill
    destination = worker_pb2.KVDestination(decode_worker_id="decode-test", address="unused:1", transport="shm",
                                           block_ids=list(range(blocks)), lease_id="lease-a",
                                           cached_blocks=blocks, incarnation="1")
    request = worker_pb2.PrefillRequest(request_id="a", prompt_token_ids=PROMPT, destination=destination,
                                        sampling=gateway_pb2.SamplingParams(max_tokens=4))
    try:
        reply = await asyncio.wait_for(servicer.Prefill(request, _Context()), timeout=10)  # type: ignore[arg-type]
        assert not gate.is_set() and reply.first_token >= 0 and reply.finish_reason == ""
        # the thread went busy before the release was queued (the busy call was queued before
        # "a"'s output was delivered), whether or not it had started when the reply came
        assert busy.wait(10)
    finally:
        gate.set()
    # the release was queued behind the busy call and ran after it
    assert await thread.run(lambda e: (e.pool.num_free, e.scheduler.held)) == (free_at_start, {})
    thread.stop()


async def test_an_abort_with_its_lease_answers_while_the_engine_is_in_a_forward():
    engine = LLMEngine(EngineConfig(num_kv_blocks=64))
    free_at_start = engine.pool.num_free
    thread = EngineThread(engine)
    thread.start()
    servicer = PrefillServicer(thread, "prefill-test")
    busy, gate = threading.Event(), threading.Event()
    thread.call(lambda _: (busy.set(), gate.wait(30)))  # a long forward of other prompts
    try:
        assert busy.wait(10)
        abort = worker_pb2.WorkerAbortRequest(request_id="a", lease_id="lease-a")
        reply = await asyncio.wait_for(servicer.Abort(abort, _Context()), timeout=5)  # type: ignore[arg-type]
        # the revoked lease stops any copy into the decode worker's blocks from starting: they
        # may be reused at once, whatever this worker's engine is doing
        assert reply.writes_done and not gate.is_set()
        assert "lease-a" in servicer._revoked
    finally:
        gate.set()
    assert await thread.run(lambda e: e.pool.num_free) == free_at_start
    thread.stop()
