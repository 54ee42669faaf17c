"""Blocking client for the pdserve gateway (same methods as ``AsyncClient``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc

from client.async_client import completion
from client.convert import chunk, cluster_info, generate_request
from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions
from pdserve.v1 import gateway_pb2, gateway_pb2_grpc


class Client:
    """``with Client("host:port") as c: print(c.complete("Hi").text)``; errors are ``grpc.RpcError``."""

    def __init__(self, address: str = "127.0.0.1:50051", *, api_key: str | None = None,
                 timeout_s: float | None = None, tls_root_cert: bytes | None = None) -> None:
        if tls_root_cert is not None:
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(tls_root_cert))
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        self.timeout_s = timeout_s

    def stream(self, prompt: str | list[int], options: SamplingOptions | None = None, slo: SLO | None = None,
               request_id: str = "", tenant: str = "", timeout_s: float | None = None) -> Iterator[Chunk]:
        request = generate_request(prompt, options, slo, request_id, tenant)
        call = self._stub.Generate(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        try:
            for message in call:
                yield chunk(message)
        finally:
            call.cancel()

    def generate_text(self, prompt: str | list[int], options: SamplingOptions | None = None,
                      **kwargs: Any) -> Iterator[str]:
        for part in self.stream(prompt, options, **kwargs):
            if part.text:
                yield part.text

    def complete(self, prompt: str | list[int], options: SamplingOptions | None = None, **kwargs: Any) -> Completion:
        sent = time.perf_counter()
        return completion(list(self.stream(prompt, options, **kwargs)), sent)

    def abort(self, request_id: str) -> None:
        self._stub.Abort(gateway_pb2.AbortRequest(request_id=request_id), timeout=10, metadata=self._metadata)

    def info(self) -> ClusterInfo:
        return cluster_info(self._stub.Info(gateway_pb2.InfoRequest(), timeout=10, metadata=self._metadata))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
