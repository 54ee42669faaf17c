"""Completions' ``echo``: the prompt before the completion, in the first message's text and, with
``logprobs``, its tokens before the completion's (each prompt token's logprob from the prefill,
``SamplingParams.prompt_logprobs``: how evaluation harnesses score a text's likelihood). The
prompt's first token has no logprob: NaN stands for it here, and ``null`` in the answer."""

from __future__ import annotations

import math

from common.text.detokenizer import Decoder
from wire.v1 import gateway_pb2

NO_LOGPROB = math.nan  # the prompt's first token: nothing comes before it to predict it


def echoed(first: gateway_pb2.GenerateResponse, request: gateway_pb2.GenerateRequest,
           tokenizer: Decoder) -> gateway_pb2.GenerateResponse:
    """``first`` (a request's first message) with its prompt before its text, and before its
    tokens and their logprobs where the prompt's were asked for."""
    out = gateway_pb2.GenerateResponse()
    out.CopyFrom(first)
    prompt = request.text if request.WhichOneof("prompt") == "text" else tokenizer.decode(
        list(request.token_ids.ids), skip_special_tokens=False)
    out.text = prompt + first.text
    if request.sampling.HasField("prompt_logprobs"):
        del out.token_ids[:]
        del out.logprobs[:]
        out.token_ids.extend([*first.prompt_token_ids, *first.token_ids])
        out.logprobs.append(gateway_pb2.TokenLogprobs(logprob=NO_LOGPROB))
        out.logprobs.extend([*first.prompt_logprobs, *first.logprobs])
    return out
