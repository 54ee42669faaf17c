"""The OpenAI-compatible routes, in the gateway's process and event loop, over its front door.

Every request takes the path a gRPC ``Generate`` takes (authentication, tenants' quotas, the
SLO guards, the request's flow): only the shapes differ. A streamed answer is checked up to its
first message before the response starts, so a refusal (an unattainable SLO, a quota, no
workers) still gets its HTTP status; a failure after that ends the stream with an error event.
A client that disconnects mid-stream ends the request and frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.errors import RequestError, invalid
from gateway.front_door import Caller, FrontDoor
from gateway.openai import choices
from gateway.openai.convert import ChoiceRequest, chat_requests, chat_tool_use, completion_requests, usage
from gateway.openai.errors import error_body, error_headers, http_status, not_found, plain_error_body
from gateway.openai.echo import echoed
from gateway.openai.logprobs import token_text
from gateway.openai.schemas import ChatCompletionRequest, CompletionRequest
from gateway.openai.shapes import ChatShape, CompletionShape, Shape
from gateway.openai.tokenize import add_tokenizer_routes
from gateway.openai.tools import ToolUse
from wire.v1 import gateway_pb2


@dataclass(frozen=True, slots=True)
class ServedModel:
    name: str  # what /v1/models lists and answers carry
    aliases: frozenset[str]  # other names a request may use for it (the checkpoint's path)
    max_model_len: int
    created: int


def build_app(front: FrontDoor, model: ServedModel, metrics: CollectorRegistry,
              ready: Callable[[], tuple[bool, str]]) -> FastAPI:
    app = FastAPI(title="pdserve", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_ArrivalStamp)
    texts = token_text(lambda: front.tokenizer)  # tokens' own texts, for their logprobs

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid body"}
        param = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        error = invalid(f"{param or 'body'}: {first.get('msg')}")
        error.param = param or None  # type: ignore[attr-defined]
        return _error(error)

    @app.exception_handler(StarletteHTTPException)
    async def _http_layer(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(plain_error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.get("/health")
    async def health() -> Response:
        ok, why = ready()
        return JSONResponse({"status": "ok"}) if ok else JSONResponse({"status": why}, status_code=503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        try:
            front.authenticate(_caller(request))
        except RequestError as exc:
            return _error(exc)
        return JSONResponse({"object": "list", "data": [{"id": model.name, "object": "model", "created": model.created,
                                                         "owned_by": "pdserve", "max_model_len": model.max_model_len}]})

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        rid = _request_id(request)
        return await _answer(front, model, request, body.model, body.stream, body.stream_options, rid,
                             lambda: completion_requests(body, request.headers, rid),
                             CompletionShape(rid, model.name, texts))

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        rid = _request_id(request)
        return await _answer(front, model, request, body.model, body.stream, body.stream_options, rid,
                             lambda: chat_requests(body, request.headers, rid),
                             ChatShape(rid, model.name, texts, _tool_use(body)))

    add_tokenizer_routes(app, front, lambda name: name is None or name == model.name or name in model.aliases,
                         model.name, _caller, _error)
    return app


async def _answer(front: FrontDoor, model: ServedModel, request: Request, name: str, stream: bool,
                  stream_options: object, rid: str, build: Callable[[], list[ChoiceRequest]],
                  shape: Shape) -> Response:
    caller = _caller(request)
    include_usage = bool(getattr(stream_options, "include_usage", False))
    try:
        front.authenticate(caller)
        if name != model.name and name not in model.aliases:
            raise not_found(f"model {name!r} does not exist: this server serves {model.name!r}")
        wanted = build()
        if len(wanted) > 1:  # several choices (``gateway.openai.choices``)
            started = await choices.start_all(front, caller, wanted)
        else:
            messages = front.generate(wanted[0].request, caller)
            first = await anext(messages)
            if wanted[0].echo:
                first = echoed(first, wanted[0].request, front.tokenizer)
    except RequestError as exc:
        return _error(exc)
    except StopAsyncIteration:
        return _error(RequestError(grpc.StatusCode.INTERNAL, "the request ended without an answer"))
    if len(wanted) > 1:
        if not stream:
            return await choices.whole(request, started, shape, _disconnected, _error)
        body = choices.events(started, shape, include_usage, _sse)
    elif not stream:
        return await _whole_unless_gone(request, first, messages, shape)
    else:
        body = _events(first, messages, shape, include_usage)
    return _ClosingStream(body, media_type="text/event-stream", headers={"x-request-id": rid, "cache-control": "no-cache"})


async def _whole_unless_gone(request: Request, first: gateway_pb2.GenerateResponse,
                             rest: AsyncIterator[gateway_pb2.GenerateResponse], shape: Shape) -> Response:
    """The whole answer, or, when the client disconnects while it is produced, nothing: the
    request is aborted everywhere at once (its generator closed) instead of decoding for nobody."""
    whole = asyncio.ensure_future(_whole(first, rest, shape))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((whole, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not whole.done():
            whole.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await whole
    if whole.cancelled():
        return Response(status_code=499)  # nobody reads it
    return whole.result()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (its body was read already: what comes now is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _whole(first: gateway_pb2.GenerateResponse, rest: AsyncIterator[gateway_pb2.GenerateResponse],
                 shape: Shape) -> Response:
    texts, last, ids, logprobs = [first.text], first, list(first.token_ids), list(first.logprobs)
    try:
        async for message in rest:
            texts.append(message.text)
            ids += message.token_ids
            logprobs += message.logprobs
            last = message
    except RequestError as exc:
        return _error(exc)
    finally:
        await rest.aclose()  # now, whether it ended or was cancelled: no block outlives its client
    return JSONResponse(shape.whole("".join(texts), last.finish_reason or "stop",
                                    usage(last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.cached_tokens),
                                    ids, logprobs),
                        headers={"x-request-id": shape.rid})


async def _events(first: gateway_pb2.GenerateResponse, rest: AsyncIterator[gateway_pb2.GenerateResponse],
                  shape: Shape, include_usage: bool) -> AsyncIterator[str]:
    try:
        for chunk in shape.opening():
            yield _sse(chunk)
        message: gateway_pb2.GenerateResponse | None = first
        while message is not None:
            if message.text or message.token_ids:
                # one chunk per message that carries tokens, its text empty while the detokenizer
                # holds back part of a character: the client sees each token when it is made, as
                # the SLO accounting counts it, not when its character completes
                yield _sse(shape.delta(message.text, 0, message.token_ids, message.logprobs))
            if message.finish_reason:
                yield _sse(shape.finish(message.finish_reason))
                if include_usage:
                    yield _sse(shape.usage_chunk(usage(message.usage.prompt_tokens, message.usage.completion_tokens, message.usage.cached_tokens)))
            message = await anext(rest, None)
    except RequestError as exc:
        yield _sse(error_body(exc))
    finally:
        await rest.aclose()
    yield "data: [DONE]\n\n"


class _ClosingStream(StreamingResponse):
    """Closes its body when the response ends for any reason, a disconnect included, so the
    request's clean-up runs at once rather than whenever the suspended generator is collected."""

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[union-attr]


def _sse(payload: dict[str, object]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class _ArrivalStamp:
    """Stamps each HTTP request's arrival in its scope before anything reads its body: parsing and
    validating a long prompt, and waiting for a busy event loop to do so, are part of its TTFT, as
    the client sees it, and the TTFT guard must count them against the SLO."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            scope.setdefault("state", {})[ARRIVED] = time.perf_counter()
        await self.app(scope, receive, send)


ARRIVED = "pdserve_received_at"


def _caller(request: Request) -> Caller:
    return Caller(list(request.headers.items()), received_at=request.scope.get("state", {}).get(ARRIVED), front="http")


def _request_id(request: Request) -> str:
    return request.headers.get("x-request-id") or uuid.uuid4().hex


def _error(error: RequestError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=http_status(error), headers=error_headers(error))


def _tool_use(body: ChatCompletionRequest) -> ToolUse | None:
    """How the answer is read for tool calls; a bad tools field is reported by the request's own
    build (``chat_requests``), so here it reads as none."""
    try:
        return chat_tool_use(body)
    except RequestError:
        return None
