"""A small HTTP/1.1 client on asyncio streams, enough to POST JSON and read a server-sent event
stream back: what the load tester needs to drive any OpenAI-compatible server without a
third-party HTTP library.

One connection per request (``Connection: close``), so nothing is shared between requests;
bodies arrive with ``Content-Length``, chunked, or until the server closes.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024


class HttpStatusError(Exception):
    """The server answered with a status other than 200; ``body`` is what it said."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}")
        self.status = status
        self.body = body


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    path: str
    tls: bool

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
        tls = parts.scheme == "https"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(parts.hostname, parts.port or (443 if tls else 80), path, tls)


async def post_events(url: str, body: dict[str, object], headers: dict[str, str]) -> AsyncIterator[dict[str, object]]:
    """POSTs ``body`` as JSON and yields the JSON of each ``data:`` event until ``[DONE]`` or the
    end of the stream. Raises ``HttpStatusError`` for a status other than 200."""
    async for payload in _events(_request(Endpoint.parse(url), "POST", headers, json.dumps(body).encode())):
        if payload == "[DONE]":
            return
        yield json.loads(payload)


async def get_json(url: str, headers: dict[str, str]) -> object:
    chunks = [chunk async for chunk in _request(Endpoint.parse(url), "GET", headers, b"")]
    return json.loads(b"".join(chunks))


async def _request(endpoint: Endpoint, method: str, headers: dict[str, str], body: bytes) -> AsyncIterator[bytes]:
    """Yields the response body as it arrives, once the status says 200."""
    reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port,
                                                   ssl=ssl.create_default_context() if endpoint.tls else None)
    try:
        head = {"Host": f"{endpoint.host}:{endpoint.port}", "Connection": "close", "Accept": "*/*",
                "Content-Type": "application/json", "Content-Length": str(len(body)), **headers}
        lines = [f"{method} {endpoint.path} HTTP/1.1"] + [f"{k}: {v}" for k, v in head.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status, response_headers = await _read_head(reader)
        body_chunks = _body(reader, response_headers)
        if status != 200:
            raise HttpStatusError(status, b"".join([c async for c in body_chunks]).decode("utf-8", "replace"))
        async for chunk in body_chunks:
            yield chunk
    finally:
        writer.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    if len(raw) > MAX_HEADER_BYTES:
        raise ValueError("response headers too long")
    status_line, *header_lines = raw.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP response: {status_line!r}")
    headers = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                return
            yield await reader.readexactly(size)
            await reader.readexactly(2)  # the CRLF after each chunk
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while chunk := await reader.read(65536):
            yield chunk


async def _events(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event, events split on a blank line wherever the
    transport's chunks happen to break."""
    pending = b""
    async for chunk in chunks:
        pending = (pending + chunk).replace(b"\r\n", b"\n")  # a CR may end one chunk, its LF start the next
        while b"\n\n" in pending:
            event, pending = pending.split(b"\n\n", 1)
            data = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                yield b"\n".join(data).decode("utf-8")
