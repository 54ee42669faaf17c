"""Client types <-> protobuf messages, and chunks -> a Completion."""

from __future__ import annotations

from collections.abc import Sequence

from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions, TokenLogprob, Usage, WorkerInfo
from wire.slo import slo_to_proto
from wire.v1 import gateway_pb2

_OPTIONAL_SAMPLING = ("max_tokens", "top_p", "seed", "logprobs", "prompt_logprobs", "n")  # proto3 `optional`: set only when given


def generate_request(prompt: str | Sequence[int], options: SamplingOptions | None = None, slo: SLO | None = None,
                     request_id: str = "", tenant: str = "") -> gateway_pb2.GenerateRequest:
    """A GenerateRequest; a ``str`` prompt goes in ``text``, token ids in ``token_ids``."""
    request = gateway_pb2.GenerateRequest(request_id=request_id, tenant=tenant,
                                          sampling=sampling_params(options or SamplingOptions()))
    if slo is not None:
        request.slo.CopyFrom(slo_to_proto(slo.ttft_ms, slo.tpot_ms, slo.name))
    if isinstance(prompt, str):
        request.text = prompt
    else:
        request.token_ids.CopyFrom(gateway_pb2.TokenIds(ids=list(prompt)))
    return request


def sampling_params(o: SamplingOptions) -> gateway_pb2.SamplingParams:
    params = gateway_pb2.SamplingParams(temperature=o.temperature, top_k=o.top_k, min_tokens=o.min_tokens,
                                        stop_token_ids=list(o.stop_token_ids), stop=list(o.stop),
                                        ignore_eos=o.ignore_eos)
    for name in _OPTIONAL_SAMPLING:
        if (value := getattr(o, name)) is not None:
            setattr(params, name, value)
    if o.structured is not None:
        params.structured.kind, params.structured.spec = o.structured
    return params


def chunk(message: gateway_pb2.GenerateResponse, received_at: float) -> Chunk:
    """One response message as a Chunk; ``usage``/``timings`` only where the message carries them."""
    usage = None
    if message.HasField("usage"):
        usage = Usage(message.usage.prompt_tokens, message.usage.completion_tokens, message.usage.cached_tokens)
    timings = timings_dict(message.timings) if message.HasField("timings") else None
    logprobs = tuple(TokenLogprob(lp.logprob, tuple(zip(lp.top_token_ids, lp.top_logprobs))) for lp in message.logprobs)
    return Chunk(message.request_id, message.text, tuple(message.token_ids), message.finish_reason or None,
                 usage, timings, received_at, logprobs, message.choice_index)


def timings_dict(t: gateway_pb2.Timings) -> dict[str, float | str]:
    return {"queue_ms": t.queue_ms, "prefill_ms": t.prefill_ms, "transfer_ms": t.transfer_ms,
            "ttft_ms": t.ttft_ms, "e2e_ms": t.e2e_ms, "prefill_worker": t.prefill_worker,
            "decode_worker": t.decode_worker, "kv_transport": t.kv_transport}


def one_choice(options: SamplingOptions | None) -> None:
    """Raises ValueError for options asking for several choices, which one Completion cannot hold."""
    if options is not None and options.n not in (None, 1):
        raise ValueError("complete() collects one choice: with n > 1, stream() and group the chunks by choice_index")


def completion(chunks: Sequence[Chunk], sent_at: float, request_id: str = "") -> Completion:
    """Joins the chunks of one request; ``sent_at`` is the perf_counter() of the send."""
    last = chunks[-1] if chunks else None
    return Completion(
        request_id=last.request_id if last else request_id,
        text="".join(c.text for c in chunks),
        token_ids=tuple(t for c in chunks for t in c.token_ids),
        finish_reason=last.finish_reason if last else None,
        usage=next((c.usage for c in reversed(chunks) if c.usage), None),
        timings=next((c.timings for c in reversed(chunks) if c.timings), None),
        ttft_s=chunks[0].received_at - sent_at if chunks else None,
        chunk_times=tuple(c.received_at for c in chunks),
        logprobs=tuple(lp for c in chunks for lp in c.logprobs),
    )


def cluster_info(info: gateway_pb2.InfoResponse) -> ClusterInfo:
    """An InfoResponse as a ClusterInfo."""
    workers = tuple(WorkerInfo(w.worker_id, w.role, w.address, w.state, w.free_blocks, w.total_blocks,
                               w.running, w.waiting, w.device, w.heartbeat_age_ms) for w in info.workers)
    return ClusterInfo(info.model, info.max_model_len, info.vocab_size, info.block_size, workers)


def not_ready_message(seen: ClusterInfo | str, num_prefill: int, num_decode: int, timeout_s: float) -> str:
    """Why ``wait_ready`` gave up: what it wanted, and the workers (or the error) it last saw."""
    what = seen.describe() if isinstance(seen, ClusterInfo) else seen
    return (f"cluster not ready after {timeout_s:g}s: wanted {num_prefill} prefill and {num_decode} decode "
            f"workers ready; last saw: {what}")
