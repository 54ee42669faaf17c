"""proto ⇄ domain conversions shared by the gateway and the workers (schedulers never see protos)."""

from __future__ import annotations

from common.engine.sampling_params import SamplingParams
from wire.v1 import gateway_pb2

DEFAULT_MAX_TOKENS = 16


def sampling_from_proto(msg: gateway_pb2.SamplingParams) -> SamplingParams:
    """Raises ValueError naming the field for out-of-range values."""
    return SamplingParams(
        max_tokens=msg.max_tokens if msg.HasField("max_tokens") else DEFAULT_MAX_TOKENS,
        temperature=msg.temperature,
        top_k=msg.top_k,
        top_p=msg.top_p if msg.HasField("top_p") else 1.0,
        seed=msg.seed if msg.HasField("seed") else None,
        min_tokens=msg.min_tokens,
        stop_token_ids=tuple(msg.stop_token_ids),
        ignore_eos=msg.ignore_eos,
    )


def sampling_to_proto(params: SamplingParams) -> gateway_pb2.SamplingParams:
    msg = gateway_pb2.SamplingParams(
        max_tokens=params.max_tokens, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        min_tokens=params.min_tokens, stop_token_ids=list(params.stop_token_ids), ignore_eos=params.ignore_eos,
    )
    if params.seed is not None:
        msg.seed = params.seed
    return msg
