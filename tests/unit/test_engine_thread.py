"""The engine on its own thread, consumed from asyncio."""

from __future__ import annotations

import asyncio
import threading

import pytest

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.async_engine import AsyncEngine
from common.engine.thread import EngineDead, EngineThread
from common.model.sampling_params import SamplingParams


@pytest.fixture()
def engine_thread():  # type: ignore[no-untyped-def]
    engine = LLMEngine(EngineConfig(num_kv_blocks=64))
    thread = EngineThread(engine)
    thread.start()
    yield thread
    thread.stop()
    engine.check_integrity()


async def _collect(engine: AsyncEngine, rid: str, prompt: list[int], params: SamplingParams) -> list[int]:
    return [t async for out in engine.generate(rid, prompt, params) for t in out.new_token_ids]


async def test_concurrent_streams_match_the_synchronous_engine(engine_thread):
    prompts = [[1, 2, 3], list(range(40)), [7] * 17]
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    reference = LLMEngine(EngineConfig(num_kv_blocks=64)).generate(prompts, params)
    engine = AsyncEngine(engine_thread)
    streamed = await asyncio.gather(*(_collect(engine, f"r{i}", p, params) for i, p in enumerate(prompts)))
    assert list(streamed) == reference


async def test_consumer_going_away_aborts_the_request_and_frees_its_blocks(engine_thread):
    engine = AsyncEngine(engine_thread)
    stream = engine.generate("a", list(range(50)), SamplingParams(max_tokens=500, ignore_eos=True))
    await stream.__anext__()
    await stream.aclose()  # what a cancelled RPC handler does
    pool = engine_thread.engine.pool
    for _ in range(200):  # calls run between steps: within a few, the step that carries out the abort has run
        if await engine_thread.run(lambda e: e.pool.num_free) == pool.num_blocks:
            break
    assert pool.num_free == pool.num_blocks


async def test_invalid_request_raises_value_error_to_the_caller(engine_thread):
    engine = AsyncEngine(engine_thread)
    with pytest.raises(ValueError, match="prompt is empty"):
        await _collect(engine, "bad", [], SamplingParams())


async def test_a_call_whose_caller_gave_up_still_runs_and_the_engine_thread_survives(engine_thread):
    # The caller cancels while the engine thread is busy; the call then fails (or succeeds)
    # with nobody waiting. Setting a cancelled future used to raise on the engine thread and
    # kill it, after which no request on that worker ever moved again.
    gate = threading.Event()
    blocker = engine_thread.call(lambda e: gate.wait(10))  # keeps the engine thread busy
    ran: list[str] = []

    def failing(engine: object) -> None:
        ran.append("failing")
        raise ValueError("no live lease")

    abandoned = [engine_thread.call(failing), engine_thread.call(lambda e: ran.append("ok"))]
    for future in abandoned:
        assert future.cancel()  # still queued: the caller gives up
    gate.set()
    blocker.result(timeout=10)
    assert await asyncio.wait_for(engine_thread.run(lambda e: "alive"), 10) == "alive"
    assert ran == ["failing", "ok"]  # both ran although nobody waited for them
    outputs = [o async for o in AsyncEngine(engine_thread).generate("after", [1, 2, 3], SamplingParams(max_tokens=2))]
    assert outputs[-1].finished


async def test_a_reservation_whose_caller_gave_up_is_freed_once_made(engine_thread, monkeypatch):
    # A Reserve RPC past its deadline: the handler is cancelled while the engine thread is
    # busy, the reservation is made afterwards, and its lease id never reaches anyone.
    made: list[str] = []
    reserve = engine_thread.engine.reserve
    monkeypatch.setattr(engine_thread.engine, "reserve", lambda *a, **k: (made.append(a[0]), reserve(*a, **k))[1])
    gate = threading.Event()
    blocker = engine_thread.call(lambda e: gate.wait(10))
    engine = AsyncEngine(engine_thread)
    waiting = asyncio.ensure_future(engine.reserve("late", prompt_len=100, max_tokens=10))
    for _ in range(5):  # the task runs until it awaits its call, queued behind the blocker
        await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    gate.set()
    blocker.result(timeout=10)
    pool = engine_thread.engine.pool
    assert await asyncio.wait_for(engine_thread.run(lambda e: e.leases.leases()), 10) == []
    assert made == ["late"]  # it was made, after its caller had gone
    assert pool.num_free == pool.num_blocks
    lease = await engine.reserve("late", prompt_len=100, max_tokens=10)  # the id is free to reserve again
    assert lease is not None and pool.num_free < pool.num_blocks


async def test_a_thread_that_dies_fails_its_callers_refuses_new_calls_and_reports_its_death():
    engine = LLMEngine(EngineConfig(num_kv_blocks=64))
    deaths: list[str] = []
    died = threading.Event()
    thread = EngineThread(engine, on_death=lambda reason: (deaths.append(reason), died.set()), fail_after_steps=2)
    thread.start()
    running = AsyncEngine(thread)
    with pytest.raises(ValueError, match="engine thread died"):  # the request it held ends with the reason
        await _collect(running, "held", [1, 2, 3], SamplingParams(max_tokens=50, ignore_eos=True))
    assert died.wait(5) and len(deaths) == 1 and "InjectedFault" in deaths[0]
    with pytest.raises(EngineDead):  # a later call fails at once instead of waiting forever
        await thread.run(lambda e: e.pool.num_free)
    with pytest.raises(ValueError, match="engine thread died"):
        await _collect(running, "late", [4, 5], SamplingParams(max_tokens=2))
    thread.stop()  # returns: nothing left to join
    assert engine.pool.num_free == engine.pool.num_blocks
