"""A serving process takes what start-up built out of the garbage collector's scans, so a full
collection under load pauses its event loop for what serving allocated, not for the model,
the tokenizer and every module."""

from __future__ import annotations

import asyncio
import gc

import pytest

from common.process.lifecycle import Lifecycle, ProcessFailed


class _Server:
    """What ``Lifecycle`` asks of its gRPC server: services added, and a stop at the end."""

    def __init__(self) -> None:
        self.stopped_with_grace: float | None = None

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: object) -> None:
        pass

    async def stop(self, grace: float | None) -> None:
        self.stopped_with_grace = grace


async def test_objects_built_before_serving_are_frozen_out_of_collections():
    gc.unfreeze()
    built_at_start_up = [[i] for i in range(1000)]  # long-lived, tracked by the collector
    server = _Server()
    lifecycle = Lifecycle(server, [], drain_grace_s=0.1)  # type: ignore[arg-type]

    async def nothing() -> None:
        pass

    running = asyncio.ensure_future(lifecycle.run(lambda: 0, nothing, nothing))
    try:
        await asyncio.sleep(0)  # run() freezes before it waits to be stopped
        assert gc.get_freeze_count() >= len(built_at_start_up)
        lifecycle.fail("test over")
        with pytest.raises(ProcessFailed):
            await asyncio.wait_for(running, 10)
        assert server.stopped_with_grace is not None
    finally:
        running.cancel()
        gc.unfreeze()
