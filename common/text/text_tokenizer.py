"""A checkpoint's tokenizer for processes that only turn text into ids and back.

The gateway tokenizes prompts and detokenizes streams; transformers' ``AutoTokenizer`` would
import torch into it (hundreds of MB and seconds of start-up for no forward). This reads the
same ``tokenizer.json`` with the ``tokenizers`` library and applies the two settings of
``tokenizer_config.json`` that change ids or text (BOS/EOS added by config, space clean-up);
a unit test holds it equal to ``AutoTokenizer`` on the embedded models.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

# What transformers' ``clean_up_tokenization_spaces`` undoes after decoding.
_CLEAN_UPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
              (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer, config: dict[str, object]) -> None:
        self._tokenizer = tokenizer
        self._clean_up = bool(config.get("clean_up_tokenization_spaces", False))
        self._bos = self._id_of(config, "bos_token") if config.get("add_bos_token") else None
        self._eos = self._id_of(config, "eos_token") if config.get("add_eos_token") else None
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        # No token stands for more text than its longest written form (byte-level symbols and
        # "▁" are longer in UTF-8 than the bytes they stand for), so a prompt of more bytes than
        # this × the model's length cannot fit.
        self.max_token_bytes = max((len(token.encode("utf-8")) for token in vocab), default=1)

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> TextTokenizer:
        directory = Path(model_dir)
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        return cls(Tokenizer.from_file(str(directory / "tokenizer.json")), config)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """``add_special_tokens=False`` for text that already holds them (a rendered chat template)."""
        ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        if not add_special_tokens:
            return ids
        if self._bos is not None and ids[:1] != [self._bos]:
            ids.insert(0, self._bos)
        if self._eos is not None and ids[-1:] != [self._eos]:
            ids.append(self._eos)
        return ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        text = self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        if self._clean_up:
            for before, after in _CLEAN_UPS:
                text = text.replace(before, after)
        return text

    def _id_of(self, config: dict[str, object], key: str) -> int | None:
        token = config.get(key)
        if isinstance(token, dict):  # {"content": "<s>", ...} in older configs
            token = token.get("content")
        return self._tokenizer.token_to_id(token) if isinstance(token, str) else None


@lru_cache(maxsize=8)
def load_text_tokenizer(model_dir: str | Path) -> TextTokenizer:
    return TextTokenizer.from_dir(model_dir)
