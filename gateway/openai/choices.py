"""Several choices in one OpenAI request: ``n`` > 1, and completions with a list of prompts. Each
choice is a request of its own through the front door (admitted, routed and guarded as any other;
``gateway.choices``, as on gRPC). The answer joins them: whole, the choices in index order and their usage summed
(each prompt's tokens counted once); streamed, each chunk names its choice's ``index``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.errors import RequestError
from gateway.front_door import Caller, FrontDoor
from gateway.choices import ChoiceRequest, Started, as_they_come, first_of_prompt
from gateway.choices import start_all as begin_all
from gateway.openai.convert import usage
from gateway.openai.echo import echoed
from gateway.openai.errors import error_body
from gateway.openai.shapes import Shape
from wire.v1 import gateway_pb2


@dataclass
class Collected:
    text: str
    last: gateway_pb2.GenerateResponse
    ids: list[int]
    logprobs: list[gateway_pb2.TokenLogprobs]


async def start_all(front: FrontDoor, caller: Caller, choices: list[ChoiceRequest]) -> list[Started]:
    """Every choice begun (``gateway.choices.start_all``), an echoed one's prompt before its text."""
    return await begin_all(front, caller, choices,
                           lambda c, first: echoed(first, c.request, front.tokenizer) if c.echo else first)


def _counts(ends: list[tuple[Started, gateway_pb2.GenerateResponse]], choices: list[ChoiceRequest]) -> dict[str, object]:
    """Usage over every choice: completion tokens summed, each prompt's tokens counted once."""
    firsts = {first_of_prompt(choices, s.choice.of_prompt) for s, _ in ends}
    prompt = sum(last.usage.prompt_tokens for s, last in ends if s.choice.index in firsts)
    cached = sum(last.usage.cached_tokens for s, last in ends if s.choice.index in firsts)
    return usage(prompt, sum(last.usage.completion_tokens for _, last in ends), cached)


async def whole(request: Request, started: list[Started], shape: Shape, disconnected: Callable[[Request], object],
                error: Callable[[RequestError], Response]) -> Response:
    """Every choice whole, or nothing when the client leaves first (each request ended at once)."""
    async def collect(s: Started) -> Collected:
        texts, last, ids, logprobs = [s.first.text], s.first, list(s.first.token_ids), list(s.first.logprobs)
        try:
            async for message in s.rest:
                texts.append(message.text)
                ids += message.token_ids
                logprobs += message.logprobs
                last = message
        finally:
            await s.rest.aclose()
        return Collected("".join(texts), last, ids, logprobs)

    tasks = [asyncio.ensure_future(collect(s)) for s in started]
    gone = asyncio.ensure_future(disconnected(request))  # type: ignore[arg-type]
    pending: set[asyncio.Future[object]] = {*tasks, gone}  # type: ignore[arg-type]
    try:
        while not all(t.done() for t in tasks):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if gone in done:
                return Response(status_code=499)  # nobody reads it
            failed = next((t.exception() for t in done if t is not gone and t.exception() is not None), None)
            if isinstance(failed, RequestError):
                return error(failed)
            if failed is not None:
                raise failed
    finally:
        for task in (*tasks, gone):
            task.cancel()
        await asyncio.gather(*tasks, gone, return_exceptions=True)
    done_results = [t.result() for t in tasks]
    choices = [s.choice for s in started]
    ends = [(s, c.last) for s, c in zip(started, done_results)]
    body = shape.whole_of([shape.choice(s.choice.index, c.text, c.last.finish_reason or "stop", c.ids, c.logprobs)
                           for s, c in zip(started, done_results)], _counts(ends, choices))
    return JSONResponse(body, headers={"x-request-id": shape.rid})


async def events(started: list[Started], shape: Shape, include_usage: bool,
                 sse: Callable[[dict[str, object]], str]) -> AsyncIterator[str]:
    """The choices' chunks as they come, each naming its index; then their usage; then [DONE]."""
    ends: list[tuple[Started, gateway_pb2.GenerateResponse]] = []
    try:
        for s in started:
            for chunk in shape.opening(s.choice.index):
                yield sse(chunk)
        async with contextlib.aclosing(as_they_come(started)) as messages:
            async for s, item in messages:
                if isinstance(item, RequestError):
                    yield sse(error_body(item))
                    continue
                if item.text or item.token_ids:
                    yield sse(shape.delta(item.text, s.choice.index, item.token_ids, item.logprobs))
                if item.finish_reason:
                    yield sse(shape.finish(item.finish_reason, s.choice.index))
                    ends.append((s, item))
    finally:  # a client gone mid-stream: every choice ends now, its blocks freed
        await asyncio.gather(*(s.rest.aclose() for s in started), return_exceptions=True)
    if include_usage:
        yield sse(shape.usage_chunk(_counts(ends, [x.choice for x in started])))
    yield "data: [DONE]\n\n"
