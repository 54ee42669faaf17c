"""Several choices of one prompt, or of several, each a request of its own through the front door
(admitted, routed and guarded as any other): ``n`` > 1 on gRPC (``SamplingParams.n``) and on the
OpenAI port, and completions with a list of prompts (``gateway.openai.choices`` shapes those).

The first choice of each prompt goes first; the prompt's other choices follow its first token, so
their prompts are found in the prefill worker's prefix cache and computed once. With a seed, a
choice's is the seed plus its place among its prompt's choices (each a different sample). A
refusal of any choice refuses the whole request (the others are ended, their blocks freed).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from gateway.errors import RequestError, invalid
from gateway.front_door import Caller, FrontDoor
from wire.v1 import gateway_pb2

MAX_CHOICES = 64  # choices (prompts × n) one request may ask for
Messages = AsyncIterator[gateway_pb2.GenerateResponse]


@dataclass(frozen=True, slots=True)
class ChoiceRequest:
    """One choice of a request, as a request of its own."""

    index: int  # its index in the answer: prompt × n + its place among the prompt's choices
    of_prompt: int  # which prompt (0 for one)
    request: gateway_pb2.GenerateRequest
    echo: bool = False  # completions' ``echo``: its prompt goes before its text (``gateway.openai.echo``)


def choice_requests(prompts: list[gateway_pb2.GenerateRequest], n: int, request_id: str,
                    echo: bool = False, too_many: Callable[[str], RequestError] = invalid) -> list[ChoiceRequest]:
    """``n`` choices of each prompt's request: their own ids (``<id>-<index>`` when several) and,
    with a seed, seed + their place among the prompt's choices."""
    if len(prompts) * n > MAX_CHOICES:
        raise too_many(f"{len(prompts)} prompts × n = {n} choices: at most {MAX_CHOICES} a request")
    several = len(prompts) * n > 1
    out = []
    for p, request in enumerate(prompts):
        for j in range(n):
            choice = gateway_pb2.GenerateRequest()
            choice.CopyFrom(request)
            choice.sampling.ClearField("n")
            index = p * n + j
            choice.request_id = f"{request_id}-{index}" if several else request_id
            if request.sampling.HasField("seed"):
                choice.sampling.seed = request.sampling.seed + j
            out.append(ChoiceRequest(index, p, choice, echo))
    return out


@dataclass
class Started:
    choice: ChoiceRequest
    first: gateway_pb2.GenerateResponse
    rest: Messages


async def start_all(front: FrontDoor, caller: Caller, choices: list[ChoiceRequest],
                    first_of: Callable[[ChoiceRequest, gateway_pb2.GenerateResponse], gateway_pb2.GenerateResponse]
                    = lambda _, message: message) -> list[Started]:
    """Every choice begun (each up to its first message, as ``first_of`` makes it); a refusal ends
    the others and is raised."""
    started: list[Started] = []

    async def begin(choice: ChoiceRequest) -> Started:
        messages = front.generate(choice.request, caller)
        try:
            return Started(choice, first_of(choice, await anext(messages)), messages)
        except BaseException:
            await messages.aclose()
            raise

    async def begin_wave(wave: list[ChoiceRequest]) -> None:
        results = await asyncio.gather(*(begin(c) for c in wave), return_exceptions=True)
        started.extend(r for r in results if isinstance(r, Started))
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed

    try:
        await begin_wave([c for c in choices if c.index == first_of_prompt(choices, c.of_prompt)])
        await begin_wave([c for c in choices if c.index != first_of_prompt(choices, c.of_prompt)])
    except BaseException:
        await asyncio.gather(*(s.rest.aclose() for s in started), return_exceptions=True)
        raise
    return sorted(started, key=lambda s: s.choice.index)


def first_of_prompt(choices: list[ChoiceRequest], prompt: int) -> int:
    return min(c.index for c in choices if c.of_prompt == prompt)


async def as_they_come(started: list[Started]) -> AsyncIterator[tuple[Started, gateway_pb2.GenerateResponse | RequestError]]:
    """Every choice's messages (or the error that ended it) as they come; each choice's stream is
    closed when this ends, however it ends."""
    queue: asyncio.Queue[tuple[Started, gateway_pb2.GenerateResponse | RequestError | None]] = asyncio.Queue()

    async def follow(s: Started) -> None:
        try:
            await queue.put((s, s.first))
            async for message in s.rest:
                await queue.put((s, message))
        except RequestError as exc:
            await queue.put((s, exc))
        await queue.put((s, None))

    tasks = [asyncio.ensure_future(follow(s)) for s in started]
    try:
        open_ = len(started)
        while open_:
            s, item = await queue.get()
            if item is None:
                open_ -= 1
            else:
                yield s, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(s.rest.aclose() for s in started), return_exceptions=True)


async def interleaved(front: FrontDoor, caller: Caller, request: gateway_pb2.GenerateRequest) -> Messages:
    """A gRPC request of ``n`` > 1 choices: every choice's messages as they come, each naming its
    ``choice_index``; the first error of any ends them all."""
    n = request.sampling.n
    if not 1 <= n <= MAX_CHOICES:
        raise invalid(f"sampling.n must be in [1, {MAX_CHOICES}], got {n}")
    rid = request.request_id or uuid.uuid4().hex
    started = await start_all(front, caller, choice_requests([request], n, rid))
    try:
        async with contextlib.aclosing(as_they_come(started)) as messages:
            async for s, item in messages:
                if isinstance(item, RequestError):
                    raise item
                item.choice_index = s.choice.index
                yield item
    finally:  # the caller gone, or one choice failed: every choice ends now
        await asyncio.gather(*(s.rest.aclose() for s in started), return_exceptions=True)
