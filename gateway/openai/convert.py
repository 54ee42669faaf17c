"""OpenAI request bodies into the public ``GenerateRequest``, and pdserve's answers back.

A choice a request: ``n`` choices of each prompt (completions take a list), each a request of its
own (``ChoiceRequest``). Log probabilities are those of the model's raw logits (before temperature,
top-k and top-p): chat's ``logprobs``/``top_logprobs``, completions' ``logprobs`` (an integer).
``echo`` puts the prompt before a completion (with ``logprobs``, its tokens' too: ``echo``).
Output constraints (``response_format``, vLLM's ``guided_*``) are enforced while sampling
(``structured``). Tools: ``gateway.openai.tools``. Penalties, ``suffix`` and ``logit_bias`` are refused with a 400 that names
the field, never accepted and ignored. SLOs come from the body's ``slo`` extension or, for clients that cannot add body fields, the headers
``x-slo-ttft-ms``, ``x-slo-tpot-ms`` and ``x-slo-class`` (the body wins).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping

from common.model.sampling_params import MAX_LOGPROBS
from gateway.choices import ChoiceRequest, choice_requests
from gateway.errors import field_error, invalid
from gateway.openai.schemas import ChatCompletionRequest, CompletionRequest, SamplingFields
from gateway.openai.structured import structured_output
from gateway.openai.tools import ToolUse, tool_use
from wire.slo import slo_to_proto
from wire.v1 import gateway_pb2

def completion_requests(body: CompletionRequest, headers: Mapping[str, str], request_id: str) -> list[ChoiceRequest]:
    """A request per choice: every prompt of a list, ``n`` each."""
    _refuse_unserved(body)
    if body.suffix:
        raise field_error("suffix", "suffix is not supported")
    prompt = body.prompt
    prompts = list(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)) else [prompt]
    built = []
    if isinstance(body.logprobs, bool):
        raise field_error("logprobs", "logprobs must be an integer for completions: how many alternatives a token")
    for p in prompts:
        request = gateway_pb2.GenerateRequest(sampling=_sampling(body, body.max_tokens), slo=_slo(body, headers))
        if body.logprobs is not None:
            request.sampling.logprobs = _logprobs_count("logprobs", body.logprobs)
            if body.echo:  # the prompt's tokens are scored too
                request.sampling.prompt_logprobs = request.sampling.logprobs
        if isinstance(p, str):
            request.text = p
        else:
            request.token_ids.ids.extend(p)  # type: ignore[arg-type]
        built.append(request)
    return _choices(built, body, request_id, echo=body.echo)


def chat_requests(body: ChatCompletionRequest, headers: Mapping[str, str], request_id: str) -> list[ChoiceRequest]:
    return _choices([chat_request(body, headers, request_id)], body, request_id)


def chat_tool_use(body: ChatCompletionRequest) -> ToolUse | None:
    """How a chat's answers are read for tool calls (``gateway.openai.tools``)."""
    return tool_use(body.tools, body.tool_choice, gateway_pb2.GenerateRequest())


def _choices(prompts: list[gateway_pb2.GenerateRequest], body: SamplingFields, request_id: str,
             echo: bool = False) -> list[ChoiceRequest]:
    for prompt in prompts:  # (the OpenAI body's seed is in each prompt's sampling already)
        prompt.sampling.n = body.n
    return choice_requests(prompts, body.n, request_id, echo, lambda message: field_error("n", message))


def chat_request(body: ChatCompletionRequest, headers: Mapping[str, str], request_id: str) -> gateway_pb2.GenerateRequest:
    _refuse_unserved(body)
    if not body.messages:
        raise field_error("messages", "messages must not be empty")
    max_tokens = body.max_completion_tokens or body.max_tokens
    request = gateway_pb2.GenerateRequest(request_id=request_id, sampling=_sampling(body, max_tokens),
                                          slo=_slo(body, headers))
    if body.logprobs is not None and not isinstance(body.logprobs, bool):
        raise field_error("logprobs", "logprobs must be true or false for a chat (top_logprobs says how many alternatives)")
    if body.top_logprobs is not None and not body.logprobs:
        raise field_error("top_logprobs", "top_logprobs needs logprobs: true")
    if body.logprobs:
        request.sampling.logprobs = _logprobs_count("top_logprobs", body.top_logprobs or 0)
    for m in body.messages:
        content = m.content if isinstance(m.content, str) else "".join(p.text for p in m.content or [])
        request.messages.messages.add(role=m.role, content=content, tool_calls=json.dumps(m.tool_calls) if m.tool_calls
                                      else "", tool_call_id=m.tool_call_id or "", name=m.name or "")
    tool_use(body.tools, body.tool_choice, request)
    return request


def _refuse_unserved(body: SamplingFields) -> None:
    if body.n < 1:
        raise field_error("n", "n must be at least 1")
    if body.presence_penalty or body.frequency_penalty:
        raise field_error("presence_penalty" if body.presence_penalty else "frequency_penalty",
                           "penalties are not supported")
    if body.logit_bias is not None:
        raise field_error("logit_bias", "logit_bias is not supported")


def _logprobs_count(field: str, k: int) -> int:
    if not 0 <= k <= MAX_LOGPROBS:
        raise field_error(field, f"{field} must be in [0, {MAX_LOGPROBS}], got {k}")
    return k


def _sampling(body: SamplingFields, max_tokens: int | None) -> gateway_pb2.SamplingParams:
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    params = gateway_pb2.SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature, top_k=body.top_k,
        min_tokens=body.min_tokens, stop_token_ids=body.stop_token_ids, stop=stop, ignore_eos=body.ignore_eos,
        max_tokens=max_tokens)  # None leaves it unset: 16 for text, what fits the model for a chat
    if body.top_p is not None:
        params.top_p = body.top_p
    if body.seed is not None:
        params.seed = body.seed
    structured = structured_output(body)
    if structured is not None:
        params.structured.CopyFrom(structured)
    return params


def _slo(body: SamplingFields, headers: Mapping[str, str]) -> gateway_pb2.SLO:
    if body.slo is not None:
        return slo_to_proto(body.slo.ttft_ms, body.slo.tpot_ms, body.slo.name)
    try:
        ttft_ms, tpot_ms = float(headers.get("x-slo-ttft-ms", 0)), float(headers.get("x-slo-tpot-ms", 0))
        if not (math.isfinite(ttft_ms) and math.isfinite(tpot_ms)):
            raise ValueError
        return slo_to_proto(ttft_ms, tpot_ms, headers.get("x-slo-class", ""))
    except ValueError:
        raise invalid("x-slo-ttft-ms and x-slo-tpot-ms must be milliseconds >= 0") from None


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, object]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def created() -> int:
    return int(time.time())
