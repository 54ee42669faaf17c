"""The text path on the real default model's 49,152-token BPE vocabulary and chat template,
against transformers' own tokenizer: what the gateway renders, tokenizes, detokenizes and stops on."""

from __future__ import annotations

import random

import pytest

from common.model.config import load_model_config
from common.model.location import ensure_model
from common.text.chat_template import ChatTemplateError, load_chat_template
from common.text.text_tokenizer import load_text_tokenizer
from gateway.text_stream import TextStream

MODEL = "smollm2-135m"
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! 🙂"}, {"role": "user", "content": "Wie geht's? 你好"}],
]
TEXTS = ["naïve café — 你好, 🙂🙃 'quoted'  two  spaces\n\tand tabs", " leading space", "don't stop",
         "x = [1, 2, 3]; print(x[::-1])"]


@pytest.fixture(scope="module")
def hf_tokenizer():  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_model(MODEL)))


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_the_chat_template_renders_and_tokenizes_as_transformers_does(hf_tokenizer, messages):
    directory = ensure_model(MODEL)
    text = load_chat_template(directory).render(messages)
    assert text == hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"]
    assert load_text_tokenizer(directory).encode(text, add_special_tokens=False) == list(expected)


def test_a_template_that_refuses_a_conversation_says_why():
    from common.text.chat_template import ChatTemplate

    strict = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
                          "{{ messages[0].content }}", {})
    with pytest.raises(ChatTemplateError, match="first must be user"):
        strict.render([{"role": "assistant", "content": "x"}])


def test_generation_stops_at_the_end_of_turn_token():
    config = load_model_config(ensure_model(MODEL))
    assert 2 in config.eos_token_ids  # <|im_end|>, from generation_config.json


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_text_is_transformers_decoding_of_the_same_ids(hf_tokenizer, text):
    ids = hf_tokenizer.encode(text, add_special_tokens=False)
    stream = TextStream(load_text_tokenizer(ensure_model(MODEL)))
    deltas = [stream.add([t]).text for t in ids]
    assert all("\ufffd" not in d for d in deltas)  # never a broken character
    assert "".join(deltas) + stream.finish().text == hf_tokenizer.decode(ids, skip_special_tokens=True)


def test_random_ids_stream_to_transformers_decoding(hf_tokenizer):
    rng = random.Random(0)
    for _ in range(20):
        ids = [rng.randrange(3, 49152) for _ in range(rng.randrange(1, 40))]
        stream = TextStream(load_text_tokenizer(ensure_model(MODEL)))
        streamed = "".join(stream.add([t]).text for t in ids) + stream.finish().text
        assert streamed == hf_tokenizer.decode(ids, skip_special_tokens=True)


def test_a_stop_string_spread_over_tokens_is_cut_and_never_partly_sent(hf_tokenizer):
    text = "The answer is forty-two. Then more text follows."
    ids = hf_tokenizer.encode(text, add_special_tokens=False)
    stop = "forty-two"
    pieces = [hf_tokenizer.decode([t]) for t in ids]
    assert not any(stop in p for p in pieces)  # the stop string really spans tokens
    stream = TextStream(load_text_tokenizer(ensure_model(MODEL)), stop=(stop,))
    sent, stopped = [], False
    for t in ids:
        delta = stream.add([t])
        sent.append(delta.text)
        if delta.stopped:
            stopped = True
            break
    assert stopped and "".join(sent) == "The answer is "
