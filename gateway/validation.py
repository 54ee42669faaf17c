"""A public ``GenerateRequest`` checked and turned into domain values, or INVALID_ARGUMENT."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from common.rpc.convert import sampling_from_proto
from common.model.sampling_params import SamplingParams
from gateway.errors import invalid
from wire.slo import slo_from_proto
from wire.v1 import gateway_pb2


@dataclass(frozen=True, slots=True)
class ValidatedRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    stop: tuple[str, ...]
    ttft_ms: float  # to the microsecond (wire.slo)
    tpot_ms: float
    tenant: str
    slo_class: str = ""  # for metrics: the named class, "custom" for explicit values, "default", or ""
    received_at: float = 0.0  # perf_counter when the RPC reached the gateway: TTFT deadlines count from here
    deadline: float | None = None  # perf_counter when the client stops waiting; None: it set no deadline
    # of the TTFT budget, what its front is expected to spend delivering the first token after the
    # gateway has it (``gateway.delivery``): its TTFT deadline is that much earlier
    delivery_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelLimits:
    max_model_len: int
    vocab_size: int
    default_slo: tuple[float, float] = (0, 0)  # (ttft_ms, tpot_ms) for requests that give none
    named_slos: dict[str, tuple[float, float]] | None = None
    max_prompt_bytes: int = 0  # prompt text longer than this cannot fit the model: refused untokenized


def prompt_text(request: gateway_pb2.GenerateRequest, limits: ModelLimits) -> str | None:
    """The text to tokenize (None for a token-id prompt), refused at once when it is empty or
    so long that it cannot fit the model, whatever it tokenizes to. Cheap: no tokenizing."""
    if request.WhichOneof("prompt") != "text":
        return None
    text = request.text
    if not text:
        raise invalid("prompt is empty: set text or token_ids")
    # every character is at least one byte, so the count of characters settles most cases free
    if limits.max_prompt_bytes and (len(text) > limits.max_prompt_bytes
                                    or len(text.encode("utf-8")) > limits.max_prompt_bytes):
        raise invalid(f"text is longer than the {limits.max_prompt_bytes} bytes that can fit the model's limit of "
                      f"{limits.max_model_len} tokens")
    return text


def validate(request: gateway_pb2.GenerateRequest, text_ids: list[int] | None,
             limits: ModelLimits) -> ValidatedRequest:
    """``text_ids``: the tokenized ``prompt_text`` (done off the event loop), None for id prompts."""
    prompt = text_ids if text_ids is not None else _prompt_ids(request, limits)
    try:
        params = sampling_from_proto(request.sampling)
    except ValueError as exc:
        raise invalid(f"sampling.{exc}") from None
    if request.WhichOneof("prompt") == "messages" and not request.sampling.HasField("max_tokens"):
        # a chat reply without a limit may run to the model's (it ends at the end of its turn)
        params = dataclasses.replace(params, max_tokens=max(1, limits.max_model_len - len(prompt)))
    if len(prompt) + params.max_tokens > limits.max_model_len:
        raise invalid(f"prompt ({len(prompt)} tokens) + sampling.max_tokens ({params.max_tokens}) exceeds the "
                      f"model's limit of {limits.max_model_len} tokens")
    if any(not s for s in request.sampling.stop):
        raise invalid("sampling.stop must not contain empty strings")
    ttft_ms, tpot_ms = slo_ms(request.slo, limits)
    return ValidatedRequest(
        request_id=request.request_id or uuid.uuid4().hex,
        prompt_token_ids=prompt,
        params=params,
        stop=tuple(request.sampling.stop),
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        tenant=request.tenant,
        slo_class=_slo_class(request.slo, ttft_ms, tpot_ms),
    )


def _slo_class(slo: gateway_pb2.SLO, ttft_ms: float, tpot_ms: float) -> str:
    if slo.name:
        return slo.name
    if any(slo_from_proto(slo)):
        return "custom"
    return "default" if ttft_ms or tpot_ms else ""


def slo_ms(slo: gateway_pb2.SLO, limits: ModelLimits) -> tuple[float, float]:
    """Explicit values win, then the named class, then the server default."""
    base = limits.default_slo
    if slo.name:
        named = (limits.named_slos or {}).get(slo.name)
        if named is None:
            raise invalid(f"slo.name {slo.name!r} is not a class configured at the gateway")
        base = named
    ttft_ms, tpot_ms = slo_from_proto(slo)
    return ttft_ms or base[0], tpot_ms or base[1]


def _prompt_ids(request: gateway_pb2.GenerateRequest, limits: ModelLimits) -> list[int]:
    kind = request.WhichOneof("prompt")
    ids = list(request.token_ids.ids) if kind == "token_ids" else []
    if not ids:
        raise invalid("prompt is empty: set text or token_ids")
    if min(ids) < 0 or max(ids) >= limits.vocab_size:
        raise invalid(f"token_ids must be in [0, {limits.vocab_size})")
    return ids
