"""asyncio client for the pdserve gateway."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from client.convert import chunk, cluster_info, generate_request
from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions
from pdserve.v1 import gateway_pb2, gateway_pb2_grpc


class AsyncClient:
    """``async with AsyncClient("host:port") as c: async for text in c.generate_text("Hi"): ...``

    gRPC errors surface as ``grpc.aio.AioRpcError``; check ``.code()`` (INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED, UNAVAILABLE, ...). Closing a stream early (``aclose()``, or
    ``contextlib.aclosing``; Python closes an abandoned async generator only when it is
    collected) cancels the call, which aborts the request everywhere and frees its KV blocks.
    """

    def __init__(self, address: str = "127.0.0.1:50051", *, api_key: str | None = None,
                 timeout_s: float | None = None, tls_root_cert: bytes | None = None) -> None:
        if tls_root_cert is not None:
            self._channel = grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(tls_root_cert))
        else:
            self._channel = grpc.aio.insecure_channel(address)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        self.timeout_s = timeout_s

    async def stream(self, prompt: str | list[int], options: SamplingOptions | None = None, slo: SLO | None = None,
                     request_id: str = "", tenant: str = "", timeout_s: float | None = None) -> AsyncIterator[Chunk]:
        request = generate_request(prompt, options, slo, request_id, tenant)
        call = self._stub.Generate(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        try:
            async for message in call:
                yield chunk(message)
        finally:
            call.cancel()  # no-op when the stream already ended

    async def generate_text(self, prompt: str | list[int], options: SamplingOptions | None = None,
                            **kwargs: Any) -> AsyncIterator[str]:
        async for part in self.stream(prompt, options, **kwargs):
            if part.text:
                yield part.text

    async def complete(self, prompt: str | list[int], options: SamplingOptions | None = None,
                       **kwargs: Any) -> Completion:
        sent = time.perf_counter()
        parts = [part async for part in self.stream(prompt, options, **kwargs)]
        return completion(parts, sent)

    async def abort(self, request_id: str) -> None:
        await self._stub.Abort(gateway_pb2.AbortRequest(request_id=request_id), timeout=10, metadata=self._metadata)

    async def info(self) -> ClusterInfo:
        return cluster_info(await self._stub.Info(gateway_pb2.InfoRequest(), timeout=10, metadata=self._metadata))

    async def wait_ready(self, num_prefill: int = 1, num_decode: int = 1, timeout_s: float = 60) -> ClusterInfo:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                info = await self.info()
                if info.ready("prefill") >= num_prefill and info.ready("decode") >= num_decode:
                    return info
                seen = f"{info.ready('prefill')} prefill and {info.ready('decode')} decode ready"
            except grpc.aio.AioRpcError as exc:
                seen = f"gateway unreachable ({exc.code().name})"
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not ready after {timeout_s}s: {seen}")
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def completion(parts: list[Chunk], sent: float) -> Completion:
    last = parts[-1]
    return Completion(
        request_id=last.request_id, text="".join(p.text for p in parts),
        token_ids=[t for p in parts for t in p.token_ids], finish_reason=last.finish_reason or "",
        prompt_tokens=last.prompt_tokens, completion_tokens=last.completion_tokens,
        ttft_s=parts[0].received_at - sent, chunk_times=[p.received_at for p in parts], timings=last.timings,
    )
