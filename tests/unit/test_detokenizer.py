from __future__ import annotations

from common.text.detokenizer import IncrementalDetokenizer
from common.model.location import ensure_model
from common.text.auto_tokenizer import load_tokenizer


def test_split_utf8_characters_are_emitted_only_when_whole():
    tokenizer = load_tokenizer(ensure_model("tiny"))
    text = "naïve 你好 🙂!"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.add([t]) for t in ids]
    assert "".join(deltas) + detok.flush() == text
    assert all("\ufffd" not in d for d in deltas)
    # 你 is three byte tokens: the first two emit nothing, the third emits the character
    start = text.index("你")
    offset = len(text[:start].encode())
    assert deltas[offset:offset + 3] == ["", "", "你"]


def test_special_tokens_are_skipped_in_streamed_text():
    tokenizer = load_tokenizer(ensure_model("tiny"))
    detok = IncrementalDetokenizer(tokenizer)
    ids = tokenizer.encode("ok")  # starts with BOS
    assert ids[0] == tokenizer.bos_token_id
    assert "".join(detok.add([t]) for t in ids) == "ok"
