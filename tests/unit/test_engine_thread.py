"""The engine on its own thread, consumed from asyncio."""

from __future__ import annotations

import asyncio

import pytest

from common.config import EngineConfig
from common.engine import LLMEngine
from common.engine_thread import AsyncEngine, EngineThread
from common.sampling_params import SamplingParams


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
    for _ in range(200):
        if pool.num_free == pool.num_blocks:
            break
        await asyncio.sleep(0.01)
    assert pool.num_free == pool.num_blocks


async def test_invalid_request_raises_value_error_to_the_caller(engine_thread):
    engine = AsyncEngine(engine_thread)
    with pytest.raises(ValueError, match="prompt is empty"):
        await _collect(engine, "bad", [], SamplingParams())
