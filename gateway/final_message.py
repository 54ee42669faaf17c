"""A request's last message over the gateway's API: its last tokens and text, why it ended, its
usage, and where its time went (``Timings``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from gateway.request_state import Progress
from gateway.validation import ValidatedRequest
from wire.v1 import gateway_pb2, worker_pb2


def final_message(req: ValidatedRequest, p: Progress, token_ids: list[int], text: str, reason: str,
                  logprobs: Sequence[gateway_pb2.TokenLogprobs] = (),
                  prompt: Mapping[str, object] | None = None) -> gateway_pb2.GenerateResponse:
    """The request's last message: its last tokens (and their logprobs) and text, why it ended,
    its usage and timings (and, when it is also the first, its prompt's logprobs: ``prompt_logprobs``)."""
    reply = p.prefill_reply or worker_pb2.PrefillResponse()
    timings = gateway_pb2.Timings(prefill_ms=reply.prefill_ms, transfer_ms=reply.transfer_ms, ttft_ms=p.ttft_ms,
                                  e2e_ms=(time.perf_counter() - p.started) * 1000, kv_transport=reply.transport,
                                  prefill_worker=p.prefill.worker_id if p.prefill else "",
                                  decode_worker=p.decode.worker_id if p.decode else "",
                                  kv_transfer_bytes=reply.transfer_bytes, decode_cached_tokens=p.decode_cached_tokens)
    usage = gateway_pb2.Usage(prompt_tokens=len(req.prompt_token_ids), completion_tokens=p.completion_tokens,
                              cached_tokens=reply.cached_tokens)
    return gateway_pb2.GenerateResponse(request_id=req.request_id, token_ids=token_ids, text=text,
                                        finish_reason=reason, usage=usage, timings=timings, logprobs=logprobs,
                                        **(prompt or {}))


def first_logprobs(reply: worker_pb2.PrefillResponse) -> list[gateway_pb2.TokenLogprobs]:
    """The first token's logprobs as a message carries them: none unless its sampling asked."""
    return [reply.first_logprobs] if reply.HasField("first_logprobs") else []


def prompt_logprobs(req: ValidatedRequest, reply: worker_pb2.PrefillResponse) -> dict[str, object]:
    """The first message's prompt fields: the prompt's tokens and their logprobs, when asked for."""
    if req.params.prompt_logprobs is None:
        return {}
    return {"prompt_token_ids": req.prompt_token_ids, "prompt_logprobs": reply.prompt_logprobs}
