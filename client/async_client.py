"""asyncio client for the pdserve gateway."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence

import grpc

from client.convert import chunk, cluster_info, completion, generate_request, not_ready_message, one_choice
from client.failover import Failover, gateway_addresses
from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions
from wire.request_start import stamp
from wire.v1 import gateway_pb2, gateway_pb2_grpc

UNARY_TIMEOUT_S = 10.0  # Abort and Info when the client has no timeout of its own
POLL_S = 0.1  # how often wait_ready asks


def auth_metadata(api_key: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata: a bearer token when there is an API key."""
    return (("authorization", f"Bearer {api_key}"),) if api_key else None


class AsyncClient:
    """``async with AsyncClient("host:port") as c: async for text in c.generate_text("Hi"): ...``

    Given several gateways (``"a:50051,b:50051"`` or a list), a call that fails with UNAVAILABLE
    before its first message is made again on the next (``client.failover``).

    gRPC errors propagate unchanged as ``grpc.aio.AioRpcError``; check ``.code()``
    (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, ...). Leaving a stream early (``break``,
    ``aclose()``, or cancelling the consuming task) cancels the call, which aborts the request
    on the server. ``contextlib.aclosing`` makes that immediate; a plain ``break`` relies on the
    event loop closing the dropped generator, which CPython does at once.
    """

    def __init__(self, address: str | Sequence[str] = "127.0.0.1:50051", *, api_key: str | None = None,
                 timeout_s: float | None = None, tls_root_cert: bytes | None = None) -> None:
        self.addresses = gateway_addresses(address)
        credentials = grpc.ssl_channel_credentials(tls_root_cert) if tls_root_cert is not None else None
        self._channels = [grpc.aio.secure_channel(a, credentials) if credentials else grpc.aio.insecure_channel(a)
                          for a in self.addresses]
        self._stubs = [gateway_pb2_grpc.GatewayStub(ch) for ch in self._channels]
        self._failover = Failover(len(self.addresses))
        self._metadata = auth_metadata(api_key)
        self.timeout_s = timeout_s

    @property
    def address(self) -> str:
        """The gateway asked first now (the one that answered last)."""
        return self.addresses[self._failover.current]


    async def stream(self, prompt: str | Sequence[int], options: SamplingOptions | None = None,
                     slo: SLO | None = None, request_id: str = "", tenant: str = "",
                     timeout_s: float | None = None) -> AsyncIterator[Chunk]:
        """Yields every response message as a Chunk; the last one has the finish reason."""
        request = generate_request(prompt, options, slo, request_id, tenant)
        metadata = (*(self._metadata or ()), stamp())  # (a retry keeps the first send's stamp)
        timeout = self._timeout(timeout_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        refused: grpc.aio.AioRpcError | None = None
        for index in self._failover.order():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            call = self._stubs[index].Generate(request, timeout=left, metadata=metadata)
            begun = False
            try:
                async for message in call:
                    if not begun:
                        begun = True
                        self._failover.answered(index, request_id)
                    yield chunk(message, time.perf_counter())
                return
            except grpc.aio.AioRpcError as exc:
                if not self._failover.tries_next(exc.code() == grpc.StatusCode.UNAVAILABLE, begun):
                    raise
                refused = exc  # that gateway is down or cannot serve it now: the next one may
            finally:
                call.cancel()  # a no-op once the stream has ended
                if begun:
                    self._failover.ended(request_id)
        assert refused is not None
        raise refused

    async def generate_text(self, prompt: str | Sequence[int], options: SamplingOptions | None = None,
                            slo: SLO | None = None, request_id: str = "", tenant: str = "",
                            timeout_s: float | None = None) -> AsyncIterator[str]:
        """Yields only the text deltas."""
        parts = self.stream(prompt, options, slo, request_id, tenant, timeout_s)
        async with contextlib.aclosing(parts):
            async for part in parts:
                if part.text:
                    yield part.text

    async def complete(self, prompt: str | Sequence[int], options: SamplingOptions | None = None,
                       slo: SLO | None = None, request_id: str = "", tenant: str = "",
                       timeout_s: float | None = None) -> Completion:
        """Runs a request to the end and collects it, with the client-side TTFT and arrival times
        (one choice: with ``n`` > 1, ``stream`` and group the chunks by ``choice_index``)."""
        one_choice(options)
        sent_at = time.perf_counter()
        parts = [p async for p in self.stream(prompt, options, slo, request_id, tenant, timeout_s)]
        return completion(parts, sent_at, request_id)

    async def abort(self, request_id: str) -> None:
        """Aborts a running request (NOT_FOUND if the gateway does not know it)."""
        stub = self._stubs[self._failover.serving.get(request_id, self._failover.current)]
        await stub.Abort(gateway_pb2.AbortRequest(request_id=request_id),
                         timeout=self._timeout(None, UNARY_TIMEOUT_S), metadata=self._metadata)

    async def info(self) -> ClusterInfo:
        """The model, its limits and every worker with its state."""
        return await self._info(self._timeout(None, UNARY_TIMEOUT_S))

    async def wait_ready(self, num_prefill: int = 1, num_decode: int = 1, timeout_s: float = 60.0) -> ClusterInfo:
        """Polls Info until that many workers of each role are "ready"; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = await self._probe(deadline)
            if isinstance(seen, ClusterInfo) and seen.has_ready(num_prefill, num_decode):
                return seen
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(not_ready_message(seen, num_prefill, num_decode, timeout_s))
            await asyncio.sleep(min(POLL_S, left))

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in self._channels))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _info(self, timeout: float | None) -> ClusterInfo:
        """The first gateway in turn that answers (UNAVAILABLE: the next one)."""
        for k, index in enumerate(order := self._failover.order()):
            try:
                response = await self._stubs[index].Info(gateway_pb2.InfoRequest(), timeout=timeout,
                                                         metadata=self._metadata)
            except grpc.aio.AioRpcError as exc:
                if not self._failover.tries_next(exc.code() == grpc.StatusCode.UNAVAILABLE, False, k == len(order) - 1):
                    raise
                continue
            self._failover.answered(index)
            return cluster_info(response)
        raise AssertionError("unreachable")

    async def _probe(self, deadline: float) -> ClusterInfo | str:
        """Info, or what went wrong asking for it, within what is left before ``deadline``."""
        try:
            return await self._info(min(max(deadline - time.monotonic(), 0.05), UNARY_TIMEOUT_S))
        except grpc.aio.AioRpcError as exc:
            return f"gateway at {self.address}: {exc.code().name} {exc.details() or ''}".rstrip()

    def _timeout(self, timeout_s: float | None, default: float | None = None) -> float | None:
        if timeout_s is not None:
            return timeout_s
        return self.timeout_s if self.timeout_s is not None else default
