"""Client types ⇄ protobuf messages."""

from __future__ import annotations

import time

from client.types import SLO, Chunk, ClusterInfo, SamplingOptions, WorkerInfo
from pdserve.v1 import gateway_pb2


def generate_request(prompt: str | list[int], options: SamplingOptions | None, slo: SLO | None,
                     request_id: str, tenant: str) -> gateway_pb2.GenerateRequest:
    o = options or SamplingOptions()
    sampling = gateway_pb2.SamplingParams(temperature=o.temperature, top_k=o.top_k, min_tokens=o.min_tokens,
                                          stop_token_ids=list(o.stop_token_ids), stop=list(o.stop),
                                          ignore_eos=o.ignore_eos)
    for name in ("max_tokens", "top_p", "seed"):  # proto3 optional: set only when given
        if getattr(o, name) is not None:
            setattr(sampling, name, getattr(o, name))
    s = slo or SLO()
    request = gateway_pb2.GenerateRequest(request_id=request_id, sampling=sampling, tenant=tenant,
                                          slo=gateway_pb2.SLO(ttft_ms=s.ttft_ms, tpot_ms=s.tpot_ms))
    if isinstance(prompt, str):
        request.text = prompt
    else:
        request.token_ids.ids.extend(prompt)
    return request


def chunk(message: gateway_pb2.GenerateResponse) -> Chunk:
    t = message.timings
    timings: dict[str, float | str] = {}
    if message.finish_reason:
        timings = {"prefill_ms": t.prefill_ms, "transfer_ms": t.transfer_ms, "ttft_ms": t.ttft_ms,
                   "e2e_ms": t.e2e_ms, "prefill_worker": t.prefill_worker, "decode_worker": t.decode_worker,
                   "kv_transport": t.kv_transport}
    return Chunk(message.request_id, message.text, tuple(message.token_ids), message.finish_reason or None,
                 time.perf_counter(), message.usage.prompt_tokens, message.usage.completion_tokens, timings)


def cluster_info(info: gateway_pb2.InfoResponse) -> ClusterInfo:
    workers = [WorkerInfo(w.worker_id, w.role, w.address, w.state, w.free_blocks, w.total_blocks)
               for w in info.workers]
    return ClusterInfo(info.model, info.max_model_len, workers)
