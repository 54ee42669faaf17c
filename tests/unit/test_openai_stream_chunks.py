"""The OpenAI front streams one chunk per message that carries tokens, its text empty while the
detokenizer holds back part of a character: a client sees each token when it is made (as the
gateway's SLO accounting counts it), not when the character it belongs to completes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from gateway.front_door import Caller
from gateway.openai.app import ServedModel, build_app
from wire.v1 import gateway_pb2

# "é" is two bytes in UTF-8: a byte-level model makes it as two tokens, the first with no text alone
MESSAGES = [gateway_pb2.GenerateResponse(token_ids=[0xC3], text=""),
            gateway_pb2.GenerateResponse(token_ids=[0xA9], text="é"),
            gateway_pb2.GenerateResponse(token_ids=[0x21], text="!", finish_reason="length")]


class _Front:
    def authenticate(self, caller: Caller) -> str:
        return ""

    def generate(self, request: gateway_pb2.GenerateRequest, caller: Caller) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        async def answer() -> AsyncIterator[gateway_pb2.GenerateResponse]:
            for message in MESSAGES:
                yield message

        return answer()


def _stream(path: str, body: dict[str, object]) -> list[dict[str, object]]:
    app = build_app(_Front(), ServedModel("m", frozenset(), 128, 0), CollectorRegistry(), lambda: (True, ""))  # type: ignore[arg-type]
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent: list[dict[str, object]] = []
    delivered = [False]

    async def receive() -> dict[str, object]:
        if delivered[0]:
            await asyncio.Event().wait()  # no disconnect while the response streams
        delivered[0] = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 200
    text = b"".join(m.get("body", b"") for m in sent[1:]).decode()  # type: ignore[misc]
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


@pytest.mark.parametrize("path,field", [("/v1/completions", "text"), ("/v1/chat/completions", "content")])
def test_a_token_whose_text_is_held_back_still_gets_its_own_chunk(path, field):
    body: dict[str, object] = {"model": "m", "max_tokens": 3, "stream": True}
    body.update({"prompt": "hi"} if field == "text" else {"messages": [{"role": "user", "content": "hi"}]})
    chunks = _stream(path, body)
    choices = [c["choices"][0] for c in chunks]
    if field == "content":
        assert choices[0]["delta"] == {"role": "assistant", "content": ""}, "the chat stream opens with its role"
        choices = choices[1:]
    texts = [(c["delta"].get("content") if field == "content" else c["text"]) for c in choices[:3]]
    assert texts == ["", "é", "!"], "one chunk per token message, the held-back one empty"
    assert [c["finish_reason"] for c in choices] == [None, None, None, "length"]
