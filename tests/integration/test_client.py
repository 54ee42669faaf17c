"""The Python client against a real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc
import pytest

from client import AsyncClient, Client, SamplingOptions
from tests.integration.conftest import assert_pools_whole


def test_sync_client_streams_text_and_completes(cluster):
    with Client(cluster.address, timeout_s=30) as client:
        parts = list(client.generate_text("hello there", SamplingOptions(max_tokens=12, ignore_eos=True)))
        done = client.complete("hello there", SamplingOptions(max_tokens=12, ignore_eos=True))
    assert "".join(parts) == done.text
    assert done.completion_tokens == 12 == len(done.token_ids) and done.finish_reason == "length"
    assert done.timings["kv_transport"] in ("shm", "grpc", "nccl") and done.ttft_s > 0


def test_stop_string_ends_the_stream_before_the_stop_text(cluster):
    with Client(cluster.address, timeout_s=30) as client:
        free = client.complete([65, 66, 67], SamplingOptions(max_tokens=64, ignore_eos=True))
        text = free.text
        stop = next((c for i, c in enumerate(text) if i >= 2 and c.isalnum() and c not in text[:i]), None)
        assert stop is not None, f"no character to stop on in {text!r}"
        stopped = client.complete([65, 66, 67], SamplingOptions(max_tokens=64, ignore_eos=True, stop=(stop,)))
    assert stopped.finish_reason == "stop" and stop not in stopped.text
    assert free.text.startswith(stopped.text)
    assert_pools_whole(cluster)


async def test_async_client_breaking_out_cancels_and_frees_blocks(cluster):
    async with AsyncClient(cluster.address) as client:
        stream = client.stream([4] * 80, SamplingOptions(max_tokens=3000, ignore_eos=True))
        async with contextlib.aclosing(stream):  # closing the stream cancels the call
            async for part in stream:
                assert part.token_ids
                break
    started = time.monotonic()
    await asyncio.to_thread(assert_pools_whole, cluster, 2.0)
    assert time.monotonic() - started < 2.0


async def test_async_client_errors_carry_the_status(cluster):
    async with AsyncClient(cluster.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.complete("hi", SamplingOptions(top_p=2.0))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "top_p" in err.value.details()
        info = await client.wait_ready(1, 1, timeout_s=5)
        assert info.ready("decode") == 1
