"""The load tester against any OpenAI-compatible server (pdserve's HTTP port, vLLM, SGLang, ...):
the same plan, schedule and records as over gRPC, so both are measured by one definition.

- ``openai``: ``POST /v1/completions`` with the planned token ids as the prompt.
- ``openai-chat``: ``POST /v1/chat/completions``, one user message of words drawn from the planned
  ids (a chat API takes text); the prompt length recorded is the server's own count (``usage``),
  chat template included.

Both stream (``stream_options.include_usage``), greedy, and send a request's SLOs as the
headers pdserve reads (``x-slo-ttft-ms``, ``x-slo-tpot-ms``; as over gRPC, not the class's name),
which other servers ignore. A token's arrival is a chunk carrying text, or an empty content chunk (a
token whose text the server holds back until its character completes); the output length is the
server's ``completion_tokens``. HTTP statuses are recorded under the gRPC status names pdserve maps them
from, so rejected (429) and failed requests count as they do over gRPC.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from client.async_client import auth_metadata
from client.bench.metrics import RequestRecord
from client.bench.runner import Goodput, new_record, schedule
from client.bench.sse import HttpStatusError, get_json, post_events
from client.bench.workload import PlannedRequest
from wire.request_start import stamp

BACKENDS = ("pdserve", "openai", "openai-chat")
ENDPOINTS = {"openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
ERROR_TYPES = {"invalid_request_error": "INVALID_ARGUMENT", "authentication_error": "UNAUTHENTICATED",
               "permission_error": "PERMISSION_DENIED", "not_found_error": "NOT_FOUND",
               "rate_limit_error": "RESOURCE_EXHAUSTED", "cancelled": "CANCELLED",
               "service_unavailable": "UNAVAILABLE", "timeout": "DEADLINE_EXCEEDED"}
# Common English words: most are one token in any BPE vocabulary, so a chat prompt of N of
# them is close to N tokens (the server's count is what is recorded).
WORDS = tuple(("time year people way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night point "
         "home water room mother area money story fact month lot right study book eye job word business issue "
         "side kind head house service friend father power hour game line end member law car city community name "
         "president team minute idea kid body information back parent face others level office door health person "
         "art war history party result change morning reason research girl guy moment air teacher force "
         "education").split())


@dataclass(frozen=True, slots=True)
class OpenAITarget:
    base_url: str  # scheme://host:port, without the /v1 path
    backend: str  # "openai" or "openai-chat"
    model: str
    api_key: str = ""
    endpoint: str = ""  # the path; "" for the backend's usual one

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + (self.endpoint or ENDPOINTS[self.backend])

    def headers(self) -> dict[str, str]:
        return dict(auth_metadata(self.api_key) or ())


async def served_model(base_url: str, api_key: str = "") -> str:
    """The first model ``GET /v1/models`` lists: what to send when ``--model`` is not given."""
    listing = await get_json(base_url.rstrip("/") + "/v1/models", dict(auth_metadata(api_key) or ()))
    models = listing.get("data") if isinstance(listing, dict) else None
    if not models:
        raise ValueError(f"{base_url}/v1/models lists no model; name one with --model")
    return str(models[0]["id"])


def words_prompt(ids: list[int]) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in ids)


def request_body(target: OpenAITarget, item: PlannedRequest, ignore_eos: bool) -> dict[str, object]:
    body: dict[str, object] = {"model": target.model, "max_tokens": item.output_len, "temperature": 0,
                               "stream": True, "stream_options": {"include_usage": True}}
    if target.backend == "openai-chat":
        body["messages"] = [{"role": "user", "content": words_prompt(item.prompt)}]
    else:
        body["prompt"] = item.prompt
    if ignore_eos:  # an extension (vLLM's name); sent only when asked for
        body["ignore_eos"] = True
    return body


def slo_headers(item: PlannedRequest) -> dict[str, str]:
    cls = item.slo_class
    if cls is None:
        return {}
    # the figures, not the name: a class name means the gateway's own classes (--slo-classes)
    return {"x-slo-ttft-ms": f"{cls.ttft_ms:g}", "x-slo-tpot-ms": f"{cls.tpot_ms:g}"}


async def run_plan_openai(target: OpenAITarget, plan: list[PlannedRequest], ignore_eos: bool,
                          max_concurrency: int | None, goodput: Goodput, on_done: Callable[[RequestRecord], None],
                          timeout_s: float = 600) -> tuple[list[RequestRecord], float]:
    async def send(item: PlannedRequest, started: float) -> RequestRecord:
        record = new_record(item, goodput, started)
        try:
            await asyncio.wait_for(_stream(target, item, ignore_eos, record, started), timeout_s)
        except HttpStatusError as exc:
            record.error = STATUS_NAMES.get(exc.status, f"HTTP_{exc.status}")
        except asyncio.TimeoutError:
            record.error = "DEADLINE_EXCEEDED"
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            record.error = "UNAVAILABLE" if isinstance(exc, OSError) else "INTERNAL"
        return record

    return await schedule(plan, max_concurrency, send, on_done)


async def _stream(target: OpenAITarget, item: PlannedRequest, ignore_eos: bool, record: RequestRecord,
                  started: float) -> None:
    completion_tokens: int | None = None
    async for event in post_events(target.url, request_body(target, item, ignore_eos),
                                   {**target.headers(), **slo_headers(item), **dict([stamp()])}):
        if isinstance(event.get("error"), dict):  # a failure after the stream began
            record.error = ERROR_TYPES.get(str(event["error"].get("type")), "INTERNAL")
            return
        for choice in event.get("choices") or []:
            if _carries_token(choice):
                record.token_times.append(time.perf_counter() - started)
                record.tokens_per_message.append(1)
        usage = event.get("usage")
        if isinstance(usage, dict):
            completion_tokens = int(usage.get("completion_tokens") or 0)
            record.input_len = int(usage.get("prompt_tokens") or record.input_len)
            details = usage.get("prompt_tokens_details")
            record.cached_tokens = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    if completion_tokens is not None and record.tokens_per_message:
        # chunks carry whole characters, so a token held back (half a character) joins the next
        # chunk: the server's count is the output length
        record.tokens_per_message[-1] += max(0, completion_tokens - sum(record.tokens_per_message))


def _carries_token(choice: dict[str, object]) -> bool:
    """Whether a chunk's choice is a token's arrival: it carries text, or it is a content chunk
    whose text is empty (neither the chat stream's role opening nor its finish), which servers send
    for a token whose text they hold back, part of a character (pdserve and vLLM do)."""
    if _text(choice):
        return True
    if choice.get("finish_reason"):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return "content" in delta and "role" not in delta
    return "text" in choice


def _text(choice: dict[str, object]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")
