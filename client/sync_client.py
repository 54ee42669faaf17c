"""Blocking client for the pdserve gateway (the same methods as ``AsyncClient``)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import grpc

from client.async_client import POLL_S, UNARY_TIMEOUT_S, auth_metadata
from client.convert import chunk, cluster_info, completion, generate_request, not_ready_message, one_choice
from client.failover import Failover, gateway_addresses
from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions
from wire.v1 import gateway_pb2, gateway_pb2_grpc


class Client:
    """``with Client("host:port") as c: print(c.complete("Hi").text)``

    gRPC errors propagate unchanged as ``grpc.RpcError`` (also ``grpc.Call``: check ``.code()``
    and ``.details()``). Leaving a ``stream``/``generate_text`` loop early cancels the call. Given
    several gateways, a call that fails with UNAVAILABLE before its first message is made again on
    the next (``client.failover``).
    """

    def __init__(self, address: str | Sequence[str] = "127.0.0.1:50051", *, api_key: str | None = None,
                 timeout_s: float | None = None, tls_root_cert: bytes | None = None) -> None:
        self.addresses = gateway_addresses(address)
        credentials = grpc.ssl_channel_credentials(tls_root_cert) if tls_root_cert is not None else None
        self._channels = [grpc.secure_channel(a, credentials) if credentials else grpc.insecure_channel(a)
                          for a in self.addresses]
        self._stubs = [gateway_pb2_grpc.GatewayStub(ch) for ch in self._channels]
        self._failover = Failover(len(self.addresses))
        self._metadata = auth_metadata(api_key)
        self.timeout_s = timeout_s

    @property
    def address(self) -> str:
        """The gateway asked first now (the one that answered last)."""
        return self.addresses[self._failover.current]

    def stream(self, prompt: str | Sequence[int], options: SamplingOptions | None = None, slo: SLO | None = None,
               request_id: str = "", tenant: str = "", timeout_s: float | None = None) -> Iterator[Chunk]:
        """Yields every response message as a Chunk; the last one has the finish reason."""
        request = generate_request(prompt, options, slo, request_id, tenant)
        timeout = self._timeout(timeout_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        refused: grpc.RpcError | None = None
        for index in self._failover.order():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            call = self._stubs[index].Generate(request, timeout=left, metadata=self._metadata)
            begun = False
            try:
                for message in call:
                    if not begun:
                        begun = True
                        self._failover.answered(index, request_id)
                    yield chunk(message, time.perf_counter())
                return
            except grpc.RpcError as exc:
                if not self._failover.tries_next(exc.code() == grpc.StatusCode.UNAVAILABLE, begun):  # type: ignore[attr-defined]
                    raise
                refused = exc  # that gateway is down or cannot serve it now: the next one may
            finally:
                call.cancel()  # a no-op once the stream has ended
                if begun:
                    self._failover.ended(request_id)
        assert refused is not None
        raise refused

    def generate_text(self, prompt: str | Sequence[int], options: SamplingOptions | None = None,
                      slo: SLO | None = None, request_id: str = "", tenant: str = "",
                      timeout_s: float | None = None) -> Iterator[str]:
        """Yields only the text deltas."""
        parts = self.stream(prompt, options, slo, request_id, tenant, timeout_s)
        try:
            for part in parts:
                if part.text:
                    yield part.text
        finally:
            parts.close()

    def complete(self, prompt: str | Sequence[int], options: SamplingOptions | None = None, slo: SLO | None = None,
                 request_id: str = "", tenant: str = "", timeout_s: float | None = None) -> Completion:
        """Runs a request to the end and collects it, with the client-side TTFT and arrival times
        (one choice: with ``n`` > 1, ``stream`` and group the chunks by ``choice_index``)."""
        one_choice(options)
        sent_at = time.perf_counter()
        parts = list(self.stream(prompt, options, slo, request_id, tenant, timeout_s))
        return completion(parts, sent_at, request_id)

    def abort(self, request_id: str) -> None:
        """Aborts a running request (NOT_FOUND if the gateway does not know it)."""
        stub = self._stubs[self._failover.serving.get(request_id, self._failover.current)]
        stub.Abort(gateway_pb2.AbortRequest(request_id=request_id),
                   timeout=self._timeout(None, UNARY_TIMEOUT_S), metadata=self._metadata)

    def info(self) -> ClusterInfo:
        """The model, its limits and every worker with its state."""
        return self._info(self._timeout(None, UNARY_TIMEOUT_S))

    def wait_ready(self, num_prefill: int = 1, num_decode: int = 1, timeout_s: float = 60.0) -> ClusterInfo:
        """Polls Info until that many workers of each role are "ready"; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self._probe(deadline)
            if isinstance(seen, ClusterInfo) and seen.has_ready(num_prefill, num_decode):
                return seen
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(not_ready_message(seen, num_prefill, num_decode, timeout_s))
            time.sleep(min(POLL_S, left))

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _info(self, timeout: float | None) -> ClusterInfo:
        """The first gateway in turn that answers (UNAVAILABLE: the next one)."""
        order = self._failover.order()
        for k, index in enumerate(order):
            try:
                response = self._stubs[index].Info(gateway_pb2.InfoRequest(), timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                if not self._failover.tries_next(exc.code() == grpc.StatusCode.UNAVAILABLE,  # type: ignore[attr-defined]
                                                 False, k == len(order) - 1):
                    raise
                continue
            self._failover.answered(index)
            return cluster_info(response)
        raise AssertionError("unreachable")

    def _probe(self, deadline: float) -> ClusterInfo | str:
        """Info, or what went wrong asking for it, within what is left before ``deadline``."""
        try:
            return self._info(min(max(deadline - time.monotonic(), 0.05), UNARY_TIMEOUT_S))
        except grpc.RpcError as exc:
            return f"gateway at {self.address}: {exc.code().name} {exc.details() or ''}".rstrip()

    def _timeout(self, timeout_s: float | None, default: float | None = None) -> float | None:
        if timeout_s is not None:
            return timeout_s
        return self.timeout_s if self.timeout_s is not None else default
