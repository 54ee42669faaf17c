"""A decode worker whose own prediction fails while it takes a reserved prompt (a fault of the
worker, not of the request) ends the Prefill call with INTERNAL, and holds nothing of it after:
the reservation's blocks free, no answer awaited, the engine whole."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.thread import EngineThread
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from decode_worker.servicer import DecodeServicer
from decode_worker.streams import StreamHub
from wire.v1 import gateway_pb2, worker_pb2


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class _Context:
    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        raise _Aborted(code, details)


async def test_a_failed_prediction_ends_the_call_with_internal_and_frees_the_reservation():
    engine = LLMEngine(EngineConfig(policy="scorpio", num_kv_blocks=64))
    engine.cost_models = CostModels(PrefillModel(0, 0.030, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.002))
    free_at_start = engine.pool.num_free

    def fails(tokens: int, attention: int) -> float:
        raise ArithmeticError("planted")

    engine.local_prompts.first_token_s = fails  # type: ignore[method-assign]
    thread = EngineThread(engine)
    thread.start()
    try:
        servicer = DecodeServicer(thread, StreamHub(asyncio.get_running_loop()), None)  # type: ignore[arg-type]
        lease = await servicer.async_engine.reserve("r1", 40, 8, tpot_slo_ms=50)
        assert lease is not None and engine.pool.num_free < free_at_start
        request = worker_pb2.PrefillRequest(
            request_id="r1", prompt_token_ids=list(range(1, 41)),
            sampling=gateway_pb2.SamplingParams(max_tokens=8), ttft_left_ms=500,
            destination=worker_pb2.KVDestination(lease_id=lease.lease_id))
        with pytest.raises(_Aborted) as aborted:
            await servicer.Prefill(request, _Context())  # type: ignore[arg-type]
        assert aborted.value.code == grpc.StatusCode.INTERNAL and "planted" in str(aborted.value)
        assert not servicer.hub.awaits_first("r1")
        assert engine.pool.num_free == free_at_start
        await thread.run(lambda e: e.check_integrity())
    finally:
        thread.stop()
