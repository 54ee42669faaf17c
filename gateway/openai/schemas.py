"""The request bodies the OpenAI API defines, as typed models (fields pdserve does not serve are
refused by name rather than ignored, so a client never gets an answer to a different question).

Extensions, as vLLM names them: ``top_k``, ``min_tokens``, ``ignore_eos``, ``stop_token_ids``;
and pdserve's own ``slo`` (``{"ttft_ms": 200, "tpot_ms": 30}`` or ``{"name": "interactive"}``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SloExtension(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttft_ms: float = Field(0, ge=0, allow_inf_nan=False)  # fractions travel to the microsecond
    tpot_ms: float = Field(0, ge=0, allow_inf_nan=False)
    name: str = ""


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """What completions and chat completions share."""

    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    stop_token_ids: list[int] = Field(default_factory=list)
    slo: SloExtension | None = None
    logprobs: bool | int | None = None  # chat: true/false (top_logprobs: how many alternatives); completions: that count
    # refused unless at their neutral value: pdserve does not compute them
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    user: str | None = None
    # output constraints, enforced while sampling (``gateway.openai.structured``); logit_bias refused
    response_format: dict[str, object] | None = None
    guided_json: object = None
    guided_regex: str | None = None
    guided_choice: object = None  # a list of strings (checked where it is read, with its field named)
    guided_grammar: str | None = None
    logit_bias: dict[str, float] | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, object]] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessageIn]
    max_completion_tokens: int | None = Field(None, ge=1)
    top_logprobs: int | None = None
    tools: list[dict[str, object]] | None = None
    tool_choice: str | dict[str, object] | None = None
    parallel_tool_calls: bool | None = None  # the model's template decides how many calls it makes
