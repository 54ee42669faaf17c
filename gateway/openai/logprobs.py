"""Log probabilities as the OpenAI API shows them, from the ones a message carries
(``GenerateResponse.logprobs``, one per token): chat's ``{"content": [...]}`` with each token's
text, bytes and alternatives, and completions' parallel lists (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``).

A token's text is its own decoding; a token that holds part of a character decodes to U+FFFD
there, as the whole text does not (its ``bytes`` are those of that decoding).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

from common.text.detokenizer import Decoder
from wire.v1 import gateway_pb2

TokenText = Callable[[int], str]


def token_text(tokenizer: Callable[[], Decoder]) -> TokenText:
    """A token's own text, by the tokenizer ``tokenizer()`` gives when one is first wanted."""
    @lru_cache(maxsize=65536)
    def text(token_id: int) -> str:
        return tokenizer().decode([token_id], skip_special_tokens=False)
    return text


def _entry(text: TokenText, token_id: int, logprob: float) -> dict[str, object]:
    t = text(token_id)
    return {"token": t, "logprob": logprob, "bytes": list(t.encode())}


def chat_content(ids: Sequence[int], logprobs: Sequence[gateway_pb2.TokenLogprobs], text: TokenText) -> list[dict[str, object]]:
    """Chat's ``logprobs.content`` entries of these tokens."""
    return [{**_entry(text, t, lp.logprob),
             "top_logprobs": [_entry(text, a, alp) for a, alp in zip(lp.top_token_ids, lp.top_logprobs)]}
            for t, lp in zip(ids, logprobs)]


def completion_lists(ids: Sequence[int], logprobs: Sequence[gateway_pb2.TokenLogprobs], text: TokenText,
                     offset: int) -> tuple[dict[str, list[object]], int]:
    """Completions' ``logprobs`` lists of these tokens, their text starting at ``offset`` in the
    choice's text; and the offset after them."""
    lists: dict[str, list[object]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for t, lp in zip(ids, logprobs):
        s = text(t)
        missing = math.isnan(lp.logprob)  # an echoed prompt's first token (``gateway.openai.echo``)
        lists["tokens"].append(s)
        lists["token_logprobs"].append(None if missing else lp.logprob)
        lists["top_logprobs"].append(None if missing else {text(a): alp for a, alp in zip(lp.top_token_ids, lp.top_logprobs)})
        lists["text_offset"].append(offset)
        offset += len(s)
    return lists, offset


def joined(parts: Sequence[dict[str, list[object]]]) -> dict[str, list[object]]:
    """Several messages' completions lists as one."""
    out: dict[str, list[object]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for part in parts:
        for key, values in part.items():
            out[key].extend(values)
    return out
