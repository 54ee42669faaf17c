"""The load tester's HTTP side, against a raw asyncio server that writes bytes the way real
servers do: chunked transfer, events split across chunks, CRLF line ends, error bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from client.bench.openai_runner import OpenAITarget, run_plan_openai, words_prompt
from client.bench.sse import HttpStatusError, post_events
from client.bench.workload import PlannedRequest, SloClass


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


class RawServer:
    """Answers every request with ``response`` and keeps what it was sent."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.requests: list[tuple[str, dict[str, str], bytes]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", 0)))
        self.requests.append((head[0], headers, body))
        for i in range(0, len(self.response), 7):  # small writes: boundaries fall anywhere
            writer.write(self.response[i:i + 7])
            await writer.drain()
        writer.close()


async def _serve(response: bytes) -> AsyncIterator[tuple[str, RawServer]]:
    raw = RawServer(response)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", raw
    finally:
        server.close()
        await server.wait_closed()


def _sse_stream(events: list[object], crlf: bool = False) -> bytes:
    sep = b"\r\n" if crlf else b"\n"
    text = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + sep + sep for e in events)
    pieces = [text[i:i + 11] for i in range(0, len(text), 11)]
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + _chunked(pieces))


@pytest.mark.parametrize("crlf", [False, True])
async def test_events_are_read_whole_across_chunk_boundaries(crlf):
    events = [{"i": i, "text": "é" * i} for i in range(6)]
    async for base, raw in _serve(_sse_stream(events + [b"[DONE]"], crlf)):
        got = [e async for e in post_events(base + "/v1/completions", {"a": 1}, {"Authorization": "Bearer k"})]
        assert got == events
        request_line, headers, body = raw.requests[0]
        assert request_line == "POST /v1/completions HTTP/1.1"
        assert headers["authorization"] == "Bearer k" and json.loads(body) == {"a": 1}


async def test_a_status_other_than_200_raises_with_the_body():
    body = json.dumps({"error": {"message": "over quota", "type": "rate_limit_error"}}).encode()
    response = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    async for base, _ in _serve(response):
        with pytest.raises(HttpStatusError) as err:
            [e async for e in post_events(base + "/v1/completions", {}, {})]
        assert err.value.status == 429 and "over quota" in err.value.body


def _chat_chunk(content: str | None, finish: str | None = None) -> dict[str, object]:
    delta = {} if content is None else {"content": content}
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def test_a_chat_stream_becomes_a_record_with_the_servers_token_counts():
    events = [{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
              _chat_chunk("Hel"), _chat_chunk("lo"), _chat_chunk(" wor"), _chat_chunk(None, "length"),
              {"choices": [], "usage": {"prompt_tokens": 41, "completion_tokens": 5, "total_tokens": 46}}, b"[DONE]"]
    item = PlannedRequest(0, [3, 4, 5], 5, SloClass("tight", 200, 30), 0.0)
    async for base, raw in _serve(_sse_stream(events)):
        target = OpenAITarget(base, "openai-chat", "m", api_key="k")
        records, _ = await run_plan_openai(target, [item], True, None, (None, None), lambda r: None)
    record = records[0]
    assert not record.error
    assert len(record.token_times) == 3, "the role chunk and the finish chunk carry no token"
    assert record.output_len == 5 and record.input_len == 41, "counts are the server's usage"
    assert record.good() is (record.ttft * 1000 <= 200 and record.tpot * 1000 <= 30)
    _, headers, body = raw.requests[0]
    sent = json.loads(body)
    assert sent["messages"] == [{"role": "user", "content": words_prompt([3, 4, 5])}]
    assert sent["max_tokens"] == 5 and sent["ignore_eos"] is True and sent["stream_options"] == {"include_usage": True}
    assert (headers["x-slo-ttft-ms"], headers["x-slo-tpot-ms"]) == ("200", "30")
    assert "x-slo-class" not in headers, "a class name would have to be one the gateway configured"


async def test_a_completion_chunk_with_its_text_held_back_is_a_tokens_arrival():
    def chunk(text: str, finish: str | None = None) -> dict[str, object]:
        return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}

    # a byte-level model's "é" comes as two tokens: the server sends the first with no text yet
    events = [chunk(""), chunk("é"), chunk("!"), chunk("", "length"),
              {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}}, b"[DONE]"]
    item = PlannedRequest(0, [1, 2], 3, None, 0.0)
    async for base, _ in _serve(_sse_stream(events)):
        records, _ = await run_plan_openai(OpenAITarget(base, "openai", "m"), [item], True, None, (None, None),
                                           lambda r: None)
    record = records[0]
    assert len(record.token_times) == 3, "the empty chunk is the first token's arrival; the finish chunk is none"
    assert record.tokens_per_message == [1, 1, 1] and record.output_len == 3


async def test_refusals_and_mid_stream_errors_are_recorded_under_grpc_status_names():
    refused = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\n\r\n{}"
    item = PlannedRequest(0, [1, 2], 4, None, 0.0)
    async for base, _ in _serve(refused):
        records, _ = await run_plan_openai(OpenAITarget(base, "openai", "m"), [item], False, None, (None, None),
                                           lambda r: None)
    assert records[0].error == "RESOURCE_EXHAUSTED" and not records[0].good()
    broken = _sse_stream([{"choices": [{"index": 0, "text": "a"}]},
                          {"error": {"message": "worker lost", "type": "service_unavailable"}}, b"[DONE]"])
    async for base, _ in _serve(broken):
        records, _ = await run_plan_openai(OpenAITarget(base, "openai", "m"), [item], False, None, (None, None),
                                           lambda r: None)
    assert records[0].error == "UNAVAILABLE"
