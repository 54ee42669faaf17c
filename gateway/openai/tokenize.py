"""``POST /tokenize`` and ``POST /detokenize``, as vLLM's server answers them: the served model's
tokenizer and chat template, behind the same authentication as the other routes.

    POST /tokenize    {"model": M, "prompt": "text"}                 -> {"count", "max_model_len", "tokens"}
                      {"model": M, "messages": [...], "add_generation_prompt": true}
    POST /detokenize  {"model": M, "tokens": [1, 2, 3]}              -> {"prompt": "text"}
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from common.text.chat_template import ChatTemplateError
from gateway.errors import RequestError, invalid
from gateway.front_door import Caller, FrontDoor
from gateway.openai.errors import not_found
from gateway.openai.schemas import ChatMessageIn


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int] = Field(min_length=0)


async def tokenize(front: FrontDoor, body: TokenizeRequest) -> dict[str, Any]:
    """The prompt's (or the rendered chat's) token ids; a body with neither, or both, is a 400."""
    if (body.prompt is None) == (body.messages is None):
        error = invalid("give one of prompt or messages")
        error.param = "prompt"  # type: ignore[attr-defined]
        raise error
    if body.messages is not None:
        if front.chat is None:
            raise invalid("this model has no chat template: send a prompt")
        try:
            text = front.chat.render([{"role": m.role, "content": m.content if isinstance(m.content, str) else
                                       "".join(p.text for p in m.content or [])} for m in body.messages],
                                     add_generation_prompt=body.add_generation_prompt)
        except ChatTemplateError as exc:
            raise invalid(f"messages: {exc}") from None
        special = False  # the template writes them
    else:
        text, special = body.prompt or "", body.add_special_tokens
    ids = await asyncio.get_running_loop().run_in_executor(None, lambda: front.tokenizer.encode(
        text, add_special_tokens=special))
    return {"count": len(ids), "max_model_len": front.limits.max_model_len, "tokens": list(ids)}


def detokenize(front: FrontDoor, body: DetokenizeRequest) -> dict[str, Any]:
    vocab_size = front.limits.vocab_size
    bad = [t for t in body.tokens if not 0 <= t < vocab_size]
    if bad:
        error = invalid(f"tokens: {bad[0]} is outside the vocabulary [0, {vocab_size})")
        error.param = "tokens"  # type: ignore[attr-defined]
        raise error
    return {"prompt": front.tokenizer.decode(body.tokens, skip_special_tokens=False)}


def add_tokenizer_routes(app: FastAPI, front: FrontDoor, serves: Callable[[str | None], bool], served: str,
                         caller: Callable[[Request], Caller], error: Callable[[RequestError], Response]) -> None:
    """The two routes on ``app``: ``serves(name)`` says whether a body's ``model`` is the served one."""

    async def answer(request: Request, name: str | None, build: Callable[[], Awaitable[dict[str, Any]]]) -> Response:
        try:
            front.authenticate(caller(request))
            if not serves(name):
                raise not_found(f"model {name!r} does not exist: this server serves {served!r}")
            return JSONResponse(await build())
        except RequestError as exc:
            return error(exc)

    @app.post("/tokenize")
    async def tokenize_route(body: TokenizeRequest, request: Request) -> Response:
        return await answer(request, body.model, lambda: tokenize(front, body))

    @app.post("/detokenize")
    async def detokenize_route(body: DetokenizeRequest, request: Request) -> Response:
        async def build() -> dict[str, Any]:
            return detokenize(front, body)

        return await answer(request, body.model, build)
