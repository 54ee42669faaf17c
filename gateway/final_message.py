"""A request's last message over the gateway's API: its last tokens and text, why it ended, its
usage, and where its time went (``Timings``)."""

from __future__ import annotations

import time

from gateway.request_state import Progress
from gateway.validation import ValidatedRequest
from wire.v1 import gateway_pb2, worker_pb2


def final_message(req: ValidatedRequest, p: Progress, token_ids: list[int], text: str,
              reason: str) -> gateway_pb2.GenerateResponse:
    """The request's last message: its last tokens and text, why it ended, its usage and timings."""
    reply = p.prefill_reply or worker_pb2.PrefillResponse()
    timings = gateway_pb2.Timings(prefill_ms=reply.prefill_ms, transfer_ms=reply.transfer_ms, ttft_ms=p.ttft_ms,
                                  e2e_ms=(time.perf_counter() - p.started) * 1000, kv_transport=reply.transport,
                                  prefill_worker=p.prefill.worker_id if p.prefill else "",
                                  decode_worker=p.decode.worker_id if p.decode else "",
                                  kv_transfer_bytes=reply.transfer_bytes, decode_cached_tokens=p.decode_cached_tokens)
    usage = gateway_pb2.Usage(prompt_tokens=len(req.prompt_token_ids), completion_tokens=p.completion_tokens,
                              cached_tokens=reply.cached_tokens)
    return gateway_pb2.GenerateResponse(request_id=req.request_id, token_ids=token_ids, text=text,
                                        finish_reason=reason, usage=usage, timings=timings)
