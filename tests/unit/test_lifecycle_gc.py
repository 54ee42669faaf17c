"""A serving process takes what start-up built out of the garbage collector's scans, so a full
collection under load pauses its event loop for what serving allocated, not for the model,
the tokenizer and every module."""

from __future__ import annotations

import asyncio
import gc

import grpc
import pytest

from common.process.lifecycle import Lifecycle, ProcessFailed


async def test_objects_built_before_serving_are_frozen_out_of_collections():
    gc.unfreeze()
    built_at_start_up = [[i] for i in range(1000)]  # long-lived, tracked by the collector
    server = grpc.aio.server()
    lifecycle = Lifecycle(server, [], drain_grace_s=0.1)
    await server.start()

    async def nothing() -> None:
        pass

    running = asyncio.ensure_future(lifecycle.run(lambda: 0, nothing, nothing))
    try:
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() >= len(built_at_start_up)
        lifecycle.fail("test over")
        with pytest.raises(ProcessFailed):
            await asyncio.wait_for(running, 10)
    finally:
        gc.unfreeze()
        await server.stop(None)
