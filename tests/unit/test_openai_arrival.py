"""The OpenAI front stamps a request's arrival before reading its body: reading and validating a
long prompt, or waiting for a busy event loop to do so, is part of the TTFT the client sees, and
the TTFT guard counts it against the SLO."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry

from gateway.front_door import Caller
from gateway.openai.app import ServedModel, build_app
from wire.v1 import gateway_pb2


class _Front:
    """What the app asks of the front door, recording the caller it was given."""

    def __init__(self) -> None:
        self.caller: Caller | None = None
        self.called_at = 0.0

    def authenticate(self, caller: Caller) -> str:
        return ""

    def generate(self, request: gateway_pb2.GenerateRequest, caller: Caller) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        self.caller, self.called_at = caller, time.perf_counter()

        async def answer() -> AsyncIterator[gateway_pb2.GenerateResponse]:
            yield gateway_pb2.GenerateResponse(text="hi", finish_reason="length")

        return answer()


def test_a_requests_arrival_is_stamped_before_its_body_is_read():
    front = _Front()
    app = build_app(front, ServedModel("m", frozenset(), 128, 0), CollectorRegistry(), lambda: (True, ""))  # type: ignore[arg-type]
    body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 1}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/completions", "raw_path": b"/v1/completions", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent: list[dict[str, object]] = []
    asked: list[float] = []  # when the app first asked for the body (however long it then took to come)

    async def receive() -> dict[str, object]:
        if asked:
            await asyncio.Event().wait()  # no disconnect while the response is written
        asked.append(time.perf_counter())
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    began = time.perf_counter()
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 200
    assert front.caller is not None and front.caller.received_at is not None
    assert began <= front.caller.received_at <= asked[0]  # stamped on arrival, before the body was asked for ...
    assert front.called_at > asked[0]  # ... and the wait for the body counts in what the front door is told
