"""The gateway's torch-free tokenizer against transformers' AutoTokenizer, and the prompt
size limit it derives."""

from __future__ import annotations

import pytest

from common.model.location import ensure_model
from common.text.text_tokenizer import TextTokenizer, load_text_tokenizer
from common.text.auto_tokenizer import load_tokenizer
from gateway.errors import RequestError
from gateway.validation import ModelLimits, prompt_text, validate
from wire.v1 import gateway_pb2

TEXTS = ["hello", "  leading spaces", "héllo wörld ñ", "emoji 😀 and 中文", "tabs\tand\nnewlines", "<s> looks special",
         "a" * 3000]


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_ids_and_text_equal_transformers(preset):
    reference = load_tokenizer(ensure_model(preset))
    ours = load_text_tokenizer(ensure_model(preset))
    for text in TEXTS:
        ids = reference.encode(text)
        assert ours.encode(text) == ids
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True)
        assert ours.decode(ids, skip_special_tokens=False) == reference.decode(ids, skip_special_tokens=False)


def test_a_token_never_stands_for_more_bytes_than_the_derived_bound():
    tokenizer = load_text_tokenizer(ensure_model("tiny"))
    for text in TEXTS:
        for token_id in tokenizer.encode(text):
            assert len(tokenizer.decode([token_id], skip_special_tokens=False).encode()) <= tokenizer.max_token_bytes


def test_config_settings_that_change_ids_or_text_are_applied():
    directory = ensure_model("tiny")
    base = TextTokenizer.from_dir(directory)
    configured = TextTokenizer(base._tokenizer, {"add_eos_token": True, "eos_token": "</s>",
                                                 "clean_up_tokenization_spaces": True})
    assert configured.encode("hi") == base.encode("hi") + [base._tokenizer.token_to_id("</s>")]
    assert configured.decode(base.encode("yes , no .")) == "yes, no."


def _text(text: str) -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(text=text)


def test_text_longer_than_can_fit_is_refused_without_tokenizing():
    limits = ModelLimits(max_model_len=100, vocab_size=300, max_prompt_bytes=500)
    assert prompt_text(_text("x" * 500), limits) == "x" * 500
    for too_long in ("x" * 501, "é" * 251):  # 501 characters; 502 bytes in 251 characters
        with pytest.raises(RequestError) as err:
            prompt_text(_text(too_long), limits)
        assert "text is longer than the 500 bytes" in err.value.message
    with pytest.raises(RequestError, match="prompt is empty"):
        prompt_text(_text(""), limits)
    ids = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1, 2]))
    assert prompt_text(ids, limits) is None and validate(ids, None, limits).prompt_token_ids == [1, 2]
